"""Spark jobs over the proxy's audit log and cluster snapshots: ingest, report, replay, scan.

Three rooms: `sources` (audit lines, the lake, the audit topic, snapshots, files on any Hadoop
file system), `jobs` (report, replay, scan: each its job, its aggregation or evaluation, its
summary) and `rendering` (the self-contained HTML pages and their charts). `session` sets
up the SparkSession the same way everywhere; `worker_cache` keeps what a Python worker
compiles once. The command line is `kafka_policy_proxy.cli.pipeline_command`.
"""
