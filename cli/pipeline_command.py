"""`kafka-policy-proxy pipeline ingest|report|replay|scan`: the Spark jobs from the command line.

The jobs need the 'pipeline' extra (PySpark and friends): they are imported only when a job
runs, inside the functions that call them, so that the command line starts without it and
mypy still sees every job call's types.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Callable, Mapping
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kafka_policy_proxy.cli.instants import add_now, instant
from kafka_policy_proxy.proxy.kafka_client.java_client import consumer_options
from kafka_policy_proxy.proxy.kafka_client.security import ClientSecurity, load_client_security

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from kafka_policy_proxy.pipeline.sources.audit_source import AuditSource

# A job: run in the session, it returns its summary.
Job = Callable[["SparkSession"], Mapping[str, Any]]

_KAFKA_PACKAGE = "org.apache.spark:spark-sql-kafka-0-10_2.13:"
EXIT_FAILED = 1
EXIT_USAGE = 2


def add_parser(commands: Any) -> None:
    """Add the `pipeline` command and its jobs to the top-level subparsers."""
    pipeline = commands.add_parser(
        "pipeline",
        help="Spark jobs over audit logs and cluster snapshots",
        description="Spark jobs over the proxy's audit logs and cluster snapshots. Inputs are "
        "files, directories, globs or any Hadoop URI; outputs are Parquet tables, an HTML "
        "report and summary.json under --out. Run them on a cluster with spark-submit "
        "(docs/pipeline.md). Needs the 'pipeline' extra: "
        "pip install '.[pipeline]' in a clone of kafka-policy-proxy.",
    )
    add_jobs(pipeline, default_master="local[*]")


def add_jobs(parser: argparse.ArgumentParser, *, default_master: str) -> None:
    """Add the report, replay and scan subcommands to `parser`."""
    jobs = parser.add_subparsers(dest="job", required=True, metavar="JOB")
    ingest = jobs.add_parser(
        "ingest",
        help="add audit logs, or the audit topic, to the Parquet audit lake",
        description="Adds the audit files not yet ingested to the lake as one batch: good "
        "events partitioned by date, the other lines (blank, malformed, unknown schema "
        "version) in its quarantine table with file, line, reason and the first 200 bytes. "
        "A file already ingested (same size and mtime, wherever it is now) is skipped; a "
        "log already in the lake, grown, renamed or compressed since (it starts with the same "
        "line), gives only its lines beyond those; a last line with no newline yet is left "
        "for a later ingest; an event whose decision_id is already in the lake is not added "
        "again (counted as repeated_events). With "
        "--topic, reads the audit topic with Spark Structured Streaming instead, exactly once "
        "through a checkpoint: until it is drained (--once) or continuously.",
    )
    source = ingest.add_mutually_exclusive_group(required=True)
    source.add_argument("--audit", nargs="+", metavar="PATH", help="audit logs")
    source.add_argument("--topic", help="the audit topic (audit.kafka.topic)")
    ingest.add_argument(
        "--bootstrap-server", metavar="HOST:PORT", help="the audit topic's cluster (with --topic)"
    )
    ingest.add_argument(
        "--checkpoint",
        metavar="DIR",
        help="the stream's checkpoint (default: LAKE/_checkpoints/TOPIC)",
    )
    ingest.add_argument(
        "--once", action="store_true", help="stop once the topic is drained (availableNow)"
    )
    ingest.add_argument(
        "--interval",
        default="1 minute",
        help="micro-batch interval when continuous (default: %(default)s)",
    )
    ingest.add_argument(
        "--kafka-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Kafka consumer setting, repeatable (max.poll.records=500, ...); security "
        "settings go in --command-config",
    )
    ingest.add_argument(
        "--command-config",
        type=Path,
        metavar="FILE",
        help="Kafka client properties for the audit topic's cluster, as `snapshot` takes them",
    )
    ingest.add_argument(
        "--lake", required=True, metavar="DIR", help="the lake's root directory or URI"
    )
    _master(ingest, default_master)
    ingest.set_defaults(func=_ingest)
    report = jobs.add_parser(
        "report",
        help="who was denied what, over time",
        description="Decisions by principal, rule, topic and hour; top denied principals, "
        "rules and topics with an example message; what rose against the previous period; "
        "audit-mode would-deny counts; exceptions and budgets; malformed lines counted by "
        "reason. From a lake, it reads only the rollups that ingest keeps.",
    )
    _input(report)
    report.add_argument(
        "--since",
        type=instant,
        help="report from this hour on (RFC 3339 with an offset or Z; per-day counts: from "
        "its day); reads only the rollups of the window",
    )
    report.add_argument(
        "--until",
        type=instant,
        help="report up to this instant, excluded (RFC 3339 with an offset or Z)",
    )
    report.add_argument(
        "--drill-down",
        action="store_true",
        help="also write the decisions and violations tables, from every event of the window "
        "(a pass over the events; the lake itself can be queried instead: docs/pipeline.md)",
    )
    _common(report, default_master)
    report.set_defaults(func=_report)
    replay = jobs.add_parser(
        "replay",
        help="what a candidate policy would have decided on past requests",
        description="Re-evaluates every recorded per-topic request with the candidate policy "
        "and compares the new decision with the recorded one.",
    )
    replay.add_argument("--policy", required=True, metavar="FILE", help="candidate policy YAML")
    _input(replay)
    replay.add_argument(
        "--snapshot",
        nargs="*",
        default=[],
        metavar="PATH",
        help="cluster snapshots giving the cluster-wide facts the recorded events do not carry",
    )
    _common(replay, default_master)
    replay.set_defaults(func=_replay)
    scan = jobs.add_parser(
        "scan",
        help="which existing topics break a policy",
        description="Evaluates every topic of the snapshots as if it were created now with its "
        "current state, in the cluster made of the other topics. With owners: in the policy, "
        "also writes a report per team (teams/<team>/report.json and .html, and teams.json).",
    )
    scan.add_argument("--policy", required=True, metavar="FILE", help="policy YAML")
    scan.add_argument(
        "--snapshot", nargs="+", required=True, metavar="PATH", help="snapshot JSON Lines files"
    )
    scan.add_argument(
        "--principal",
        default="User:ANONYMOUS",
        help="existing topics have no creator: evaluate them as this principal "
        "(default: %(default)s)",
    )
    add_now(scan)
    scan.add_argument(
        "--teams",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="write a report per team of the policy's owners: beside the whole one, topics no "
        "team claims under (unowned) (default: when the policy has owners: or budgets:)",
    )
    _common(scan, default_master)
    scan.set_defaults(func=_scan)


def submit_main(argv: list[str] | None = None) -> int:
    """The jobs under spark-submit (cli/spark_submit.py), keeping its master."""
    parser = argparse.ArgumentParser(
        prog="pipeline", description="kafka-policy-proxy's Spark jobs, run by spark-submit."
    )
    add_jobs(parser, default_master="none")
    args = parser.parse_args(argv)
    result: int = args.func(args)
    return result


def _input(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--lake", metavar="DIR", help="the audit lake (pipeline ingest)")
    source.add_argument(
        "--audit", nargs="+", metavar="PATH", help="raw audit logs, for a one-off run"
    )


def _common(parser: argparse.ArgumentParser, default_master: str) -> None:
    parser.add_argument("--out", required=True, metavar="DIR", help="output directory or URI")
    _master(parser, default_master)


def _master(parser: argparse.ArgumentParser, default_master: str) -> None:
    parser.add_argument(
        "--master",
        default=default_master,
        help="Spark master (default: %(default)s); 'none' leaves it to spark-submit",
    )
    parser.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra Spark setting, repeatable",
    )


def _ingest(args: argparse.Namespace) -> int:
    if args.audit:

        def files(spark: SparkSession) -> Mapping[str, Any]:
            from kafka_policy_proxy.pipeline.sources.lake import ingest

            return ingest(spark, args.audit, args.lake)

        return _job(args, files)
    if not args.bootstrap_server:
        print("kafka-policy-proxy: ingest --topic needs --bootstrap-server", file=sys.stderr)
        return EXIT_USAGE
    try:
        security = (
            ClientSecurity()
            if args.command_config is None
            else load_client_security(args.command_config)
        )
        kafka = consumer_options(security, args.kafka_option)
    except ValueError as exc:
        print(f"kafka-policy-proxy: {exc}", file=sys.stderr)
        return EXIT_USAGE
    # Spark's Kafka source of the same version, resolved from Maven; without pyspark, _job
    # says which extra is missing.
    with contextlib.suppress(PackageNotFoundError):
        args.conf.append(f"spark.jars.packages={_KAFKA_PACKAGE}{version('pyspark')}")

    def topic(spark: SparkSession) -> Mapping[str, Any]:
        from kafka_policy_proxy.pipeline.sources.audit_stream import stream_ingest

        return stream_ingest(
            spark,
            topic=args.topic,
            bootstrap=args.bootstrap_server,
            lake=args.lake,
            checkpoint=args.checkpoint,
            kafka=kafka,
            once=args.once,
            interval=args.interval,
        )

    return _job(args, topic)


def _report(args: argparse.Namespace) -> int:
    def job(spark: SparkSession) -> Mapping[str, Any]:
        from kafka_policy_proxy.pipeline.jobs.report import run_report

        return run_report(
            spark,
            _source(args),
            args.out,
            since=args.since,
            until=args.until,
            drill_down=args.drill_down,
        )

    return _job(args, job)


def _replay(args: argparse.Namespace) -> int:
    def job(spark: SparkSession) -> Mapping[str, Any]:
        from kafka_policy_proxy.pipeline.jobs.replay import run_replay

        return run_replay(spark, args.policy, _source(args), args.out, snapshots=args.snapshot)

    return _job(args, job)


def _source(args: argparse.Namespace) -> AuditSource:
    from kafka_policy_proxy.pipeline.sources.audit_source import AuditSource

    return AuditSource(paths=args.audit or (), lake=args.lake)


def _scan(args: argparse.Namespace) -> int:
    def job(spark: SparkSession) -> Mapping[str, Any]:
        from kafka_policy_proxy.pipeline.jobs.scan import run_scan

        return run_scan(
            spark,
            args.policy,
            args.snapshot,
            args.out,
            principal=args.principal,
            now=args.now,
            teams=args.teams,
        )

    return _job(args, job)


def _job(args: argparse.Namespace, run: Job) -> int:
    settings: dict[str, str] = {}
    for item in args.conf:
        key, sep, value = item.partition("=")
        if not sep or not key:
            print(f"kafka-policy-proxy: --conf {item!r}: expected KEY=VALUE", file=sys.stderr)
            return EXIT_USAGE
        settings[key] = value
    try:
        from pyspark.errors import PySparkException

        from kafka_policy_proxy.pipeline.session import spark_session
        from kafka_policy_proxy.pipeline.sources.lake import IngestConflict
        from kafka_policy_proxy.pipeline.sources.snapshots import SnapshotError
        from kafka_policy_proxy.policy.loader import PolicyError
    except ImportError as exc:
        print(
            f"kafka-policy-proxy: the pipeline needs the 'pipeline' extra ({exc.name} is missing):"
            " pip install '.[pipeline]' in a clone of kafka-policy-proxy",
            file=sys.stderr,
        )
        return EXIT_USAGE
    master = None if args.master == "none" else args.master
    spark = spark_session(master, app_name=f"kafka-policy-proxy {args.job}", config=settings)
    try:
        summary = run(spark)
    except (PolicyError, SnapshotError, OSError) as exc:
        print(f"kafka-policy-proxy: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (PySparkException, IngestConflict) as exc:
        print(f"kafka-policy-proxy: {args.job} failed: {exc}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        spark.stop()
    for warning in summary.get("warnings", ()):
        print(f"kafka-policy-proxy: warning: {warning}", file=sys.stderr)
    print(json.dumps(summary, indent=2, sort_keys=True, default=str))
    return 0
