"""Spark jobs over the proxy's audit log and cluster snapshots: report, replay, scan."""
