"""The programs bench/pipeline_bench.py times besides the CLI: the read floors and the report's
queries over the lake's rollups, in Spark and in DuckDB. Each runs as `python -c` in a child.

The report's queries follow the rollup contract (issue 34): `rollup_hours` (hour, action, api,
decision, mode, principal, rule, rule_mode, events, records, first_seen, last_seen; `rule`
null on the decision's own row) and `rollup_topics` (day, resource_type, resource, topic,
principal, decision, rule, rule_mode, events, first_seen, last_seen, example), of
the committed batches only. They are what the report's first screen needs: totals, the
hourly series, principals, rules and their daily trend, actions, the most denied topics and
the principal x rule table.
"""

from __future__ import annotations

# The files' lines counted: the cost of reading them at all.
FLOOR = """
import sys
from kafka_policy_proxy.pipeline.session import spark_session
spark = spark_session("local[2]")
print(spark.read.text(sys.argv[1]).count())
spark.stop()
"""

# Spark's own typed read of the same files: every line parsed with the record's schema and
# every field forced (a hash of the parsed row, its maximum). No check, no Python, no write.
TYPED_FLOOR = """
import json, sys
from pyspark.sql import functions as F
from kafka_policy_proxy.pipeline.session import spark_session
from kafka_policy_proxy.pipeline.sources.audit_events import AUDIT_SCHEMA, TIME_FORMAT
spark = spark_session("local[2]")
parsed = spark.read.text(sys.argv[1]).select(
    F.from_json("value", AUDIT_SCHEMA, {"timestampFormat": TIME_FORMAT}).alias("r")
)
fields = [F.col(f"r.{name}") for name in AUDIT_SCHEMA.fieldNames()]
row = parsed.select(F.max(F.hash(*fields)).alias("h"), F.count("*").alias("n")).first()
print(json.dumps({"rows": row["n"], "hash": row["h"]}))
spark.stop()
"""

TOTALS = "WHERE rule IS NULL"
DENIED_RULES = "WHERE rule IS NOT NULL AND decision = 'denied'"
REPORT_QUERIES = {
    "totals": "SELECT decision, sum(events) AS events, sum(records) AS records, "
    f"min(first_seen) AS first, max(last_seen) AS last FROM rollup_hours {TOTALS} "
    "GROUP BY decision",
    "hourly": "SELECT hour, decision, sum(events) AS events FROM rollup_hours "
    f"{TOTALS} GROUP BY hour, decision",
    "actions": "SELECT action, api, decision, sum(events) AS events FROM rollup_hours "
    f"{TOTALS} GROUP BY action, api, decision",
    "principals": "SELECT principal, decision, mode, sum(events) AS events FROM rollup_hours "
    f"{TOTALS} GROUP BY principal, decision, mode",
    "rules": "SELECT rule, rule_mode, decision, sum(events) AS events FROM rollup_hours "
    "WHERE rule IS NOT NULL GROUP BY rule, rule_mode, decision",
    "rule_days": "SELECT rule, principal, date_trunc('day', hour) AS day, sum(events) AS events "
    f"FROM rollup_hours {DENIED_RULES} GROUP BY rule, principal, date_trunc('day', hour)",
    "topics": "SELECT topic, sum(events) AS denials, count(DISTINCT principal) AS principals, "
    "min(first_seen) AS first_seen, max(last_seen) AS last_seen FROM rollup_topics "
    "WHERE rule IS NULL AND decision = 'denied' GROUP BY topic ORDER BY denials DESC LIMIT 50",
    "topic_rules": "SELECT topic, rule, sum(events) AS denials, min(example) AS example "
    f"FROM rollup_topics {DENIED_RULES} GROUP BY topic, rule",
    "principal_rules": "SELECT principal, rule, sum(events) AS denials, "
    "count(DISTINCT topic) AS topics, min(example) AS example "
    f"FROM rollup_topics {DENIED_RULES} GROUP BY principal, rule",
}
NO_ROLLUPS = (
    "the lake has no rollup tables (table=rollup_hours, table=rollup_topics): "
    "ingest it with a version that keeps rollups"
)

# Both engines: the committed batches (a manifest each) of the two rollup tables, every query
# run twice in one session and collected; the second round is the query alone, warm.
_PREAMBLE = f"""
import json, pathlib, sys, time
lake, queries = sys.argv[1], json.loads(sys.argv[2])
tables = ("rollup_hours", "rollup_topics")
if not all(pathlib.Path(lake, "table=" + t).is_dir() for t in tables):
    print(json.dumps({{"skipped": {NO_ROLLUPS!r}}}))
    sys.exit(0)
batches = sorted(p.stem for p in pathlib.Path(lake, "_manifest").glob("*.json"))
"""
_ROUNDS = """
times = []
for _ in range(2):
    started = time.perf_counter()
    rows = {name: len(run(sql)) for name, sql in queries.items()}
    times.append(time.perf_counter() - started)
print(json.dumps({"rows": rows, "first_s": times[0], "query_s": times[1]}))
"""
SPARK_QUERIES = (
    _PREAMBLE
    + """
from pyspark.sql import functions as F
from kafka_policy_proxy.pipeline.session import spark_session
spark = spark_session("local[2]")
for t in tables:
    frame = spark.read.parquet(f"{lake}/table={t}")
    frame.where(F.col("batch").isin(batches)).createOrReplaceTempView(t)
run = lambda sql: spark.sql(sql).collect()
"""
    + _ROUNDS
    + "spark.stop()\n"
)
DUCKDB_QUERIES = (
    _PREAMBLE
    + """
import duckdb
db = duckdb.connect()
db.execute("SET TimeZone = 'UTC'")
db.execute("SET enable_progress_bar = false")  # it would print to stdout on long queries
names = ", ".join(f"'{b}'" for b in batches) or "NULL"
for t in tables:
    files = f"{lake}/table={t}/*/*/*.parquet"
    db.execute(
        f"CREATE VIEW {t} AS SELECT * FROM read_parquet('{files}', hive_partitioning = true, "
        f"hive_types_autocast = false) WHERE batch IN ({names})"
    )
run = lambda sql: db.execute(sql).fetchall()
"""
    + _ROUNDS
)
