"""Listing, reading and writing files on any Hadoop file system (local, HDFS, S3A, ABFS, GCS)
via Spark: the lake's manifests, and the jobs' small outputs (HTML, PNG, JSON) beside their
Parquet tables."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from pyspark.sql import SparkSession

_TASK_BYTES = 32 * 2**20


@dataclass(frozen=True)
class FileStatus:
    """A file as the file system lists it: its URI, size in bytes and mtime in epoch ms."""

    path: str
    size: int
    mtime: int


def list_files(spark: SparkSession, paths: Sequence[str]) -> list[FileStatus]:
    """The files of files, directories (recursively) and globs, as Spark would read them.

    Hidden names (starting with `_` or `.`) are skipped inside directories, as Spark does;
    a path that matches nothing is an error (FileNotFoundError), as it is for Spark.
    """
    jvm, conf = _hadoop(spark)
    found: dict[str, FileStatus] = {}
    for path in paths:
        hadoop_path = jvm.org.apache.hadoop.fs.Path(path)
        fs = hadoop_path.getFileSystem(conf)
        matches = fs.globStatus(hadoop_path)
        if not matches:
            raise FileNotFoundError(f"{path}: no such file or directory")
        for status in matches:
            for file in _walk(fs, status):
                found.setdefault(file.path, file)
    return sorted(found.values(), key=lambda f: f.path)


def read_tasks(spark: SparkSession, paths: Sequence[str]) -> int:
    """How many tasks read the lake's files under `paths`: ~32 MiB of them each."""
    # The session's setting is a task per file (audit logs need it); the lake's files are many
    # and small, and a task per file costs more than reading it.
    size = sum(f.size for f in list_files(spark, paths))
    return max(spark.sparkContext.defaultParallelism, -(-size // _TASK_BYTES))


def _walk(fs: Any, status: Any) -> Iterator[FileStatus]:
    if not status.isDirectory():
        yield FileStatus(status.getPath().toString(), status.getLen(), status.getModificationTime())
        return
    for child in fs.listStatus(status.getPath()):
        if not child.getPath().getName().startswith(("_", ".")):
            yield from _walk(fs, child)


def exists(spark: SparkSession, path: str) -> bool:
    """Whether `path` exists."""
    jvm, conf = _hadoop(spark)
    hadoop_path = jvm.org.apache.hadoop.fs.Path(path)
    return bool(hadoop_path.getFileSystem(conf).exists(hadoop_path))


def remove(spark: SparkSession, pattern: str) -> None:
    """Delete the files and directories (recursively) a glob matches, if any."""
    jvm, conf = _hadoop(spark)
    hadoop_path = jvm.org.apache.hadoop.fs.Path(pattern)
    fs = hadoop_path.getFileSystem(conf)
    for status in fs.globStatus(hadoop_path) or []:
        fs.delete(status.getPath(), True)


def read_text(spark: SparkSession, path: str) -> str:
    """A small file's text (UTF-8)."""
    jvm, conf = _hadoop(spark)
    hadoop_path = jvm.org.apache.hadoop.fs.Path(path)
    stream = hadoop_path.getFileSystem(conf).open(hadoop_path)
    try:
        return str(jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
    finally:
        stream.close()


def write_bytes(spark: SparkSession, directory: str, name: str, data: bytes) -> str:
    """Write `data` to `directory/name`; a local path or file: URI directly, else via Hadoop."""
    target = f"{directory.rstrip('/')}/{name}"
    scheme = urlparse(directory).scheme
    if scheme in ("", "file"):
        path = Path(urlparse(target).path if scheme else target)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return str(path)
    jvm, conf = _hadoop(spark)
    hadoop_path = jvm.org.apache.hadoop.fs.Path(target)
    stream = hadoop_path.getFileSystem(conf).create(hadoop_path, True)
    try:
        stream.write(bytearray(data))
    finally:
        stream.close()
    return target


def write_text(spark: SparkSession, directory: str, name: str, text: str) -> str:
    """Write `text` (UTF-8) to `directory/name`, as `write_bytes` does."""
    return write_bytes(spark, directory, name, text.encode("utf-8"))


def write_files(spark: SparkSession, directory: str, files: Mapping[str, bytes]) -> None:
    """Write each of `files` (by name) into `directory`, as `write_bytes` does."""
    for name, data in files.items():
        write_bytes(spark, directory, name, data)


def _codec(jvm: Any, conf: Any, path: Any) -> Any:
    # The codec Hadoop (and so Spark's text reader) picks by the file's name; None if plain.
    return jvm.org.apache.hadoop.io.compress.CompressionCodecFactory(conf).getCodec(path)


def _hadoop(spark: SparkSession) -> tuple[Any, Any]:
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    return jvm, spark.sparkContext._jsc.hadoopConfiguration()


def head(spark: SparkSession, path: str, limit: int = 4096) -> bytes:
    """The first `limit` bytes of a file's content (decompressed, as Spark reads it)."""
    jvm, conf = _hadoop(spark)
    hadoop_path = jvm.org.apache.hadoop.fs.Path(path)
    codec = _codec(jvm, conf, hadoop_path)
    stream = hadoop_path.getFileSystem(conf).open(hadoop_path)
    if codec is not None:
        stream = codec.createInputStream(stream)  # closing it closes the file
    try:
        bounded = jvm.org.apache.commons.io.input.BoundedInputStream(stream, limit)
        return bytes(jvm.org.apache.commons.io.IOUtils.toByteArray(bounded))
    finally:
        stream.close()


def compressed(spark: SparkSession, path: str) -> bool:
    """Whether Spark reads the file through a compression codec (by its name: `.gz`, ...)."""
    jvm, conf = _hadoop(spark)
    return _codec(jvm, conf, jvm.org.apache.hadoop.fs.Path(path)) is not None


def last_byte(spark: SparkSession, file: FileStatus) -> bytes:
    """The file's last byte as stored (empty for an empty file)."""
    if file.size == 0:
        return b""
    jvm, conf = _hadoop(spark)
    hadoop_path = jvm.org.apache.hadoop.fs.Path(file.path)
    stream = hadoop_path.getFileSystem(conf).open(hadoop_path)
    try:
        stream.seek(file.size - 1)
        return bytes([stream.read()])
    finally:
        stream.close()
