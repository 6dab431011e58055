"""The SparkSession the jobs run in, set up the same way for the CLI and the tests."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[*]"

# Small jobs on a laptop: 200 shuffle partitions would cost more than the work itself.
_LOCAL_DEFAULTS = {
    "spark.sql.shuffle.partitions": "8",
    "spark.ui.enabled": "false",
    # A lake's partitions (a date per day of the log) are listed by the driver: on one machine
    # a listing job per table costs more than the listing (past 32 directories by default).
    "spark.sql.sources.parallelPartitionDiscovery.threshold": "4096",
}
# One task reads one file, whole and in order: audit lines get their line numbers
# (pipeline.sources.audit_events). The proxy rotates its log, so a day is many files, read in
# parallel.
_WHOLE_FILE = str(2**40)
_DEFAULTS = {
    "spark.sql.files.maxPartitionBytes": _WHOLE_FILE,
    "spark.sql.files.openCostInBytes": _WHOLE_FILE,
    "spark.sql.session.timeZone": "UTC",
    # Parquet's standard instant (not Spark's legacy INT96): other engines read the lake.
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # The lake's writes are partitioned by date, and a task (one audit file) spans several
    # dates: up to this many files open at once, instead of sorting the task's rows by date
    # first (measured: the sort was ~10 of 47 s writing 1M events). More dates than this in
    # one task fall back to the sort.
    "spark.sql.maxConcurrentOutputFileWriters": "16",
}


def spark_session(
    master: str | None = DEFAULT_MASTER,
    app_name: str = "kafka-policy-proxy",
    config: Mapping[str, str] | None = None,
) -> SparkSession:
    """A SparkSession on `master` (None: whatever spark-submit chose), with the jobs' defaults."""
    builder = SparkSession.builder.appName(app_name)
    settings = dict(_DEFAULTS)
    if master is not None:
        builder = builder.master(master)
        if master.startswith("local"):
            settings.update(_LOCAL_DEFAULTS)
            # Python workers must import the same packages as the driver: use its interpreter.
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    settings.update(config or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session
