"""docs/pipeline.md: its drill-down queries give, in Spark SQL and in DuckDB, what a plain count
of the ingested events gives (a batch without its manifest left out), and its report commands
parse."""

from __future__ import annotations

import re
import shlex
from collections import Counter
from pathlib import Path
from typing import Any

import duckdb
import pytest
from pyspark.sql import SparkSession

from harness.audit_data import example_cluster, generate_events, write_events
from kafka_policy_proxy.cli import build_parser
from kafka_policy_proxy.pipeline.sources.lake import ingest
from kafka_policy_proxy.policy.loader import load_policy

ROOT = Path(__file__).resolve().parents[3]
TEXT = (ROOT / "docs" / "pipeline.md").read_text()
DRILL = TEXT.split("### Drilling down", 1)[1].split("\n## ", 1)[0]
QUERIES = re.findall(r"^```sql\n(.*?)^```", DRILL, re.MULTILINE | re.DOTALL)
REPORT = TEXT.split("\n## report\n", 1)[1].split("\n## ", 1)[0]


@pytest.fixture(scope="module")
def lake(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Counter]:
    """A lake of two committed batches and one whose manifest was never written; the denials
    of 2026-10-01 per (principal, topic) in its committed events."""
    root = tmp_path_factory.mktemp("docs")
    policy = load_policy((ROOT / "examples" / "policy.yaml").read_text(), "policy.yaml")
    events = list(generate_events(policy, example_cluster(), 300, seed=4))
    for i, part in enumerate((events[:150], events[150:250], events[250:])):
        (root / f"logs{i}").mkdir()
        write_events(root / f"logs{i}" / "audit.jsonl", part)
        done = ingest(spark, [str(root / f"logs{i}")], str(root / "lake"))
    (root / "lake" / "_manifest" / f"{done['batch']}.json").unlink()  # died before its commit
    denials = Counter(
        (e["principal"], e["topic"])
        for e in events[:250]
        if e["decision"] == "denied" and e["time"].startswith("2026-10-01")
    )
    return root, denials


def _top(denials: Counter) -> list[tuple[Any, ...]]:
    ranked = sorted(denials.items(), key=lambda item: (-item[1], *item[0]))
    return [(principal, topic, n) for (principal, topic), n in ranked[:20]]


def test_the_section_shows_a_query_for_each_engine() -> None:
    assert [q.splitlines()[0].split()[1] for q in QUERIES] == ["Spark", "DuckDB"]


def test_the_spark_sql_query_counts_the_committed_events(
    spark: SparkSession, lake: tuple[Path, Counter]
) -> None:
    root, denials = lake
    text = QUERIES[0].replace("'lake/", f"'{root}/lake/")
    statements = [s for s in text.split(";") if s.strip()]
    for statement in statements[:-1]:
        spark.sql(statement)
    rows = spark.sql(statements[-1]).collect()
    assert [tuple(r) for r in rows] == _top(denials)


def test_the_duckdb_query_counts_the_committed_events(lake: tuple[Path, Counter]) -> None:
    root, denials = lake
    text = QUERIES[1].replace("'lake/", f"'{root}/lake/")
    assert duckdb.sql(text).fetchall() == _top(denials)


def test_the_report_commands_parse() -> None:
    block = REPORT.split("```")[1].replace("\\\n", "")
    commands = [line.split("#")[0] for line in block.splitlines() if line.strip()]
    assert len(commands) == 3
    for command in commands:
        args = build_parser().parse_args(shlex.split(command)[1:])
        assert args.job == "report"
    windowed = build_parser().parse_args(shlex.split(commands[1])[1:])
    assert (windowed.since.isoformat(), windowed.until.isoformat()) == (
        "2026-11-16T00:00:00+00:00",
        "2026-11-23T00:00:00+00:00",
    )
