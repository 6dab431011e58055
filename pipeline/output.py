"""Writing the jobs' small outputs (HTML, JSON) next to their Parquet tables, on any URI."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

from pyspark.sql import SparkSession


def write_text(spark: SparkSession, directory: str, name: str, text: str) -> str:
    """Write `text` to `directory/name`; a local path or file: URI directly, else via Hadoop."""
    target = f"{directory.rstrip('/')}/{name}"
    scheme = urlparse(directory).scheme
    if scheme in ("", "file"):
        path = Path(urlparse(target).path if scheme else target)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return str(path)
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    hadoop_path = jvm.org.apache.hadoop.fs.Path(target)
    fs = hadoop_path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    stream = fs.create(hadoop_path, True)
    try:
        stream.write(bytearray(text.encode("utf-8")))
    finally:
        stream.close()
    return target
