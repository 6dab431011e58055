"""Writing the jobs' small outputs (HTML, PNG, JSON) next to their Parquet tables, on any URI."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

from pyspark.sql import SparkSession

from pipeline.html_report import Report, chart_files, render


def write_report(spark: SparkSession, directory: str, name: str, report: Report) -> str:
    """Write `name`.html (self-contained) and its charts as PNG files beside it."""
    for file, png in chart_files(name, report).items():
        write_bytes(spark, directory, file, png)
    return write_text(spark, directory, f"{name}.html", render(report))


def write_text(spark: SparkSession, directory: str, name: str, text: str) -> str:
    """Write `text` to `directory/name`; a local path or file: URI directly, else via Hadoop."""
    return write_bytes(spark, directory, name, text.encode("utf-8"))


def write_bytes(spark: SparkSession, directory: str, name: str, data: bytes) -> str:
    """Write `data` to `directory/name`; a local path or file: URI directly, else via Hadoop."""
    target = f"{directory.rstrip('/')}/{name}"
    scheme = urlparse(directory).scheme
    if scheme in ("", "file"):
        path = Path(urlparse(target).path if scheme else target)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return str(path)
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    hadoop_path = jvm.org.apache.hadoop.fs.Path(target)
    fs = hadoop_path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    stream = fs.create(hadoop_path, True)
    try:
        stream.write(bytearray(data))
    finally:
        stream.close()
    return target
