"""The report job: every table checked against a plain-Python count over the same events.

The input mixes topic records (schema 1 and 2), admin API calls and broker config changes
(allowed, denied, audit-would-deny) with bad lines; the read, the report and the replay count
the same events.
"""

from __future__ import annotations

import html as htmllib
import json
import re
import shutil
import subprocess
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import matplotlib.image
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from pipeline.audit_events import read_audit
from pipeline.html_report import small_multiples, time_chart
from pipeline.replay import run_replay
from pipeline.report import periods_of, run_report
from policy.builders import create_request
from policy.cluster import InMemoryCluster
from policy.decision_log import V2_FIELDS, RecordedAction, Stamp, decision_record
from policy.engine import CompiledPolicy
from policy.judge import ClusterFacts, judge
from policy.loader import load_policy
from policy.model import Principal
from tests.pipeline.audit_data import (
    ConfigCall,
    admin_events,
    broker_config_events,
    example_cluster,
    generate_events,
    write_events,
    write_snapshot,
)

REPO = Path(__file__).resolve().parents[2]
POLICY = REPO / "examples" / "policy.yaml"
EVENTS = 3000
SPACING = timedelta(seconds=9)  # 3000 events over seven and a half hours
ADMIN_CALLS = [("CreateAcls", "User:alice"), ("ElectLeaders", "User:bob")] * 3
CONFIG_CALLS: list[ConfigCall] = [
    ("User:platform-admin", "broker", "1", [("num.io.threads", "SET", "8")]),
    ("User:alice", "broker", "1", [("num.io.threads", "SET", "8")]),
    ("User:platform-admin", "broker", "2", [("num.io.threads", "SET", "2")]),
    ("User:platform-admin", "cluster_default", "", [("log.segment.bytes", "SET", "1048576")]),
    ("User:platform-admin", "cluster_default", "", [("log.retention.ms", "SET", "7776000000")]),
    ("User:platform-admin", "broker_logger", "1", [("kafka.server", "SET", "DEBUG")]),
    ("User:bob", "group", "g1", [("consumer.session.timeout.ms", "SET", "45000")]),
] * 2
V1_EVENTS = 200  # topic records rewritten as schema 1


@dataclass(frozen=True)
class Run:
    events: list[dict[str, Any]]
    malformed_file: str
    out: Path
    summary: dict[str, Any]
    inputs: list[str]


def _tiny_segments(
    policy: CompiledPolicy, cluster: InMemoryCluster, count: int, start: datetime
) -> list[dict[str, Any]]:
    """Creates whose segment.bytes and segment.ms are both too small: segment-size twice."""
    events = []
    for i in range(count):
        principal = Principal(("User:carol", "User:bob")[i % 2], "client-1", "10.0.0.7:5000")
        configs = [("segment.bytes", str(1 << 20)), ("segment.ms", "60000")]
        request = create_request(f"orders.tiny-{i}", 6, 3, configs=configs, principal=principal)
        (verdict,) = judge(policy, [request], ClusterFacts(cluster))
        assert verdict.decision is not None
        events.append(
            decision_record(
                verdict.request,
                verdict.decision,
                Stamp(
                    time=(start + timedelta(minutes=13 * i)).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                    decision_id=f"tiny-{i}",
                    policy_revision=policy.revision,
                    cluster_id=None,
                    proxy_id="proxy-1",
                    conn=1,
                    client=principal.address,
                    api="CreateTopics",
                    api_key=19,
                    api_version=7,
                ),
            )
        )
    return events


def _micros(stamp: str) -> int:
    moment = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    return (moment - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)


def _hour(stamp: str) -> int:
    seconds = _micros(stamp) // 1_000_000
    return seconds - seconds % 3600


def _resource(event: dict[str, Any]) -> tuple[str, str]:
    # A schema 1 record is about its topic.
    if event["schema"] == 1:
        return "topic", event["topic"]
    return event["resource_type"], event["resource"]


def _topic(event: dict[str, Any]) -> set[str]:
    # Per-topic counts leave out the records of no topic.
    return set() if event["topic"] is None else {event["topic"]}


def _v1(event: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in event.items() if k not in V2_FIELDS} | {"schema": 1}


def _rules(event: dict[str, Any]) -> list[tuple[str, str]]:
    # A rule whose two checks both failed is listed twice: the report counts it once.
    return list(dict.fromkeys((v["rule"], v["mode"]) for v in event["violations"]))


def _table(spark: SparkSession, out: Path, name: str) -> list[dict[str, Any]]:
    df = spark.read.parquet(str(out / name))
    # Epoch numbers, not datetimes: collected timestamps take the driver's local zone.
    columns = [
        F.unix_micros(c).alias(c) if c in ("hour", "first_seen", "last_seen") else F.col(c)
        for c in df.columns
    ]
    return [row.asDict() for row in df.select(*columns).collect()]


@pytest.fixture(scope="module")
def run(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Run:
    """One report over events given as a directory, a glob and a file: URI, bad lines mixed in."""
    root = tmp_path_factory.mktemp("report")
    policy = load_policy(POLICY.read_text(), "policy.yaml")
    cluster = example_cluster()
    admin = list(admin_events(policy, ADMIN_CALLS))
    configs = list(broker_config_events(policy, CONFIG_CALLS, cluster))
    topics = EVENTS - 20 - len(admin) - len(configs)
    events = list(generate_events(policy, cluster, topics, seed=7, spacing=SPACING))
    events[:V1_EVENTS] = [_v1(e) for e in events[:V1_EVENTS]]
    events += _tiny_segments(policy, cluster, 20, datetime(2026, 10, 1, 0, 5, tzinfo=UTC))
    # Records of no topic spread over the three inputs (and next to the bad lines).
    for i, config in enumerate(configs):
        events.insert(150 * i + 75, config)
    for i, call in enumerate(admin):
        events.insert(500 * i + 200, call)
    (root / "dir").mkdir()
    (root / "glob").mkdir()
    write_events(root / "dir" / "audit.jsonl", events[:1000])
    write_events(root / "glob" / "audit-1.jsonl", events[1000:2000])
    good = [json.dumps(e) for e in events[2000:]]
    config = json.loads(json.dumps(configs[0]))
    # A violation that lost its rule name: the schema requires one.
    denied = json.loads(next(line for line in good[4:] if '"decision": "denied"' in line))
    denied["violations"][0].pop("rule")
    bad = [
        "",
        json.dumps(denied),
        "not json",
        good[0][:-7],  # a line cut short
        json.dumps(json.loads(good[1]) | {"schema": 3}),
        json.dumps({k: v for k, v in json.loads(good[2]).items() if k != "principal"}),
        json.dumps({k: v for k, v in json.loads(good[3]).items() if k != "principal"}),
        # Records of no topic that break the record's own rules.
        json.dumps(config | {"topic": "orders.v1"}),
        json.dumps(config | {"resource_type": "topic", "topic": "orders.v1"}),
        json.dumps(_v1(config)),
        json.dumps(config | {"action": "alter_cluster"}),
        json.dumps(config | {"resource_type": "controller"}),
    ]
    # Bad lines in between good ones; the good ones they were made from are kept too.
    mixed = [*good[:300], *bad, *good[300:]]
    malformed_file = root / "last.jsonl"
    malformed_file.write_text("\n".join(mixed) + "\n")
    out = root / "out"
    inputs = [str(root / "dir"), str(root / "glob" / "*.jsonl"), malformed_file.as_uri()]
    summary = run_report(spark, inputs, str(out))
    return Run(events, malformed_file.name, out, summary, inputs)


def test_the_input_has_what_the_report_is_about(run: Run) -> None:
    decisions = Counter(e["decision"] for e in run.events)
    assert min(decisions.values()) >= 20, decisions
    hours = {_hour(e["time"]) for e in run.events}
    assert len(hours) >= 7
    assert any(len(_rules(e)) >= 2 for e in run.events)
    assert any(len(_rules(e)) < len(e["violations"]) for e in run.events)
    # Every action, and records of no topic with every decision, in each of the three inputs.
    assert {e["action"] for e in run.events} == set(RecordedAction)
    configs = [e for e in run.events if e["action"] == "alter_broker_config"]
    assert {e["decision"] for e in configs} == {"allowed", "denied", "audit-would-deny"}
    assert {e["resource_type"] for e in configs} == {"broker", "cluster", "broker_logger", "group"}
    for part in (run.events[:1000], run.events[1000:2000], run.events[2000:]):
        assert {e["action"] for e in part} >= {"admin_api", "alter_broker_config"}
    assert sum(e["schema"] == 1 for e in run.events) == V1_EVENTS


def test_decisions_are_counted_per_hour_and_key(spark: SparkSession, run: Run) -> None:
    expected = Counter(
        (
            _hour(e["time"]) * 1_000_000,
            e["principal"],
            e["topic"],
            e["action"],
            e["api"],
            *_resource(e),
            e["decision"],
            e["mode"],
        )
        for e in run.events
    )
    rows = _table(spark, run.out, "decisions")
    keys = (
        "hour",
        "principal",
        "topic",
        "action",
        "api",
        "resource_type",
        "resource",
        "decision",
        "mode",
    )
    got = {tuple(r[k] for k in keys): r["events"] for r in rows}
    assert len(got) == len(rows)  # one row per key
    assert got == dict(expected)
    assert set(rows[0]) == {*keys, "events"}


def test_violations_count_each_rule_of_each_event_once(spark: SparkSession, run: Run) -> None:
    expected: Counter[tuple[Any, ...]] = Counter()
    for e in run.events:
        for rule, mode in _rules(e):
            key = (_hour(e["time"]) * 1_000_000, e["principal"], e["topic"], e["action"])
            expected[(*key, e["api"], *_resource(e), e["decision"], e["mode"], rule, mode)] += 1
    rows = _table(spark, run.out, "violations")
    keys = (
        "hour",
        "principal",
        "topic",
        "action",
        "api",
        "resource_type",
        "resource",
        "decision",
        "mode",
        "rule",
        "rule_mode",
    )
    got = {tuple(r[k] for k in keys): r["events"] for r in rows}
    assert len(got) == len(rows)
    assert got == dict(expected)


def _ranked(totals: dict[str, dict[str, Any]]) -> list[str]:
    return sorted(totals, key=lambda name: (-totals[name]["denials"], name))


def test_top_denied_principals(spark: SparkSession, run: Run) -> None:
    totals: dict[str, dict[str, Any]] = defaultdict(lambda: {"denials": 0, "topics": set()})
    for e in run.events:
        if e["decision"] == "denied":
            entry = totals[e["principal"]]
            entry["denials"] += 1
            entry["topics"] |= _topic(e)
            entry.setdefault("times", []).append(_micros(e["time"]))
    events = Counter(e["principal"] for e in run.events)
    rows = sorted(_table(spark, run.out, "top_denied_principals"), key=lambda r: r["rank"])
    assert [r["principal"] for r in rows] == _ranked(totals)
    assert [r["rank"] for r in rows] == list(range(1, len(totals) + 1))
    for row in rows:
        entry = totals[row["principal"]]
        assert row["denials"] == entry["denials"]
        assert row["events"] == events[row["principal"]]  # every decision: the rate's base
        assert row["topics"] == len(entry["topics"])
        assert (row["first_seen"], row["last_seen"]) == (min(entry["times"]), max(entry["times"]))
    top = run.summary["top_principals"]
    assert [p["principal"] for p in top] == _ranked(totals)[:10]
    assert top[0]["denials"] == totals[top[0]["principal"]]["denials"]


def test_top_denied_rules_count_enforce_rules_of_denied_events(
    spark: SparkSession, run: Run
) -> None:
    totals: dict[str, dict[str, Any]] = defaultdict(
        lambda: {"denials": 0, "principals": set(), "topics": set(), "times": []}
    )
    for e in run.events:
        for rule, mode in _rules(e):
            if e["decision"] == "denied" and mode == "enforce":
                entry = totals[rule]
                entry["denials"] += 1
                entry["principals"].add(e["principal"])
                entry["topics"] |= _topic(e)
                entry["times"].append(_micros(e["time"]))
    rows = sorted(_table(spark, run.out, "top_denied_rules"), key=lambda r: r["rank"])
    assert [r["rule"] for r in rows] == _ranked(totals)
    assert "segment-size" not in {r["rule"] for r in rows}  # an audit rule denies nothing
    for row in rows:
        entry = totals[row["rule"]]
        assert row["denials"] == entry["denials"]
        assert row["principals"] == len(entry["principals"])
        assert row["topics"] == len(entry["topics"])
        assert (row["first_seen"], row["last_seen"]) == (min(entry["times"]), max(entry["times"]))
    assert [r["rule"] for r in run.summary["top_rules"]] == _ranked(totals)[:10]


def test_would_deny_counts_audit_rules(spark: SparkSession, run: Run) -> None:
    expected: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    topics: dict[tuple[str, str], set[str]] = defaultdict(set)
    for e in run.events:
        for rule, mode in _rules(e):
            if mode == "audit":
                expected[rule, e["principal"]][e["decision"]] += 1
                topics[rule, e["principal"]] |= _topic(e)
    assert expected, "the example policy's segment-size rule should have fired"
    rows = _table(spark, run.out, "would_deny")
    got = {(r["rule"], r["principal"]): r for r in rows}
    assert set(got) == set(expected)
    for key, counts in expected.items():
        row = got[key]
        assert row["would_deny"] == counts["audit-would-deny"]
        assert row["denied_anyway"] == counts["denied"]
        assert row["fired"] == counts.total()
        assert row["topics"] == len(topics[key])
    per_rule = {r["rule"]: r for r in run.summary["audit_rules"]}
    assert per_rule["segment-size"]["would_deny"] == sum(
        c["audit-would-deny"] for (rule, _), c in expected.items() if rule == "segment-size"
    )


def test_malformed_lines_are_counted_by_file_and_reason(spark: SparkSession, run: Run) -> None:
    expected = {
        "not valid JSON": 2,
        "missing field principal": 2,
        "field violations: [0] missing field rule": 1,
        "field topic: set in a record of resource type broker": 1,
        "action alter_broker_config on resource type topic": 1,
        "field topic: null in a topic record": 1,  # a schema 1 record is about a topic
        "field action: unknown value 'alter_cluster'": 1,
        "field resource_type: unknown value 'controller'": 1,
    }
    rows = _table(spark, run.out, "bad_lines")
    assert {r["problem"]: r["lines"] for r in rows if r["kind"] == "malformed"} == expected
    assert all(r["source"].endswith("/" + run.malformed_file) for r in rows)
    lines = run.summary["lines"]
    assert (lines["malformed"], lines["blank"], lines["unknown_version"]) == (10, 1, 1)
    assert lines["malformed_by_problem"] == expected
    assert lines["unknown_versions"] == {"3": 1}
    assert list(lines["bad_by_file"].values()) == [12]
    assert lines["total"] == EVENTS + 12
    # Every good event is still counted, the ones next to the bad lines too.
    assert run.summary["events"] == EVENTS
    assert run.summary["decisions"] == dict(Counter(e["decision"] for e in run.events))
    actions = Counter(e["action"] for e in run.events)
    assert run.summary["actions"] == {a.value: actions[a.value] for a in RecordedAction}


def test_every_job_counts_the_same_events(
    spark: SparkSession, run: Run, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The read, the report and the replay (of the recorded policy, with the snapshot of the
    cluster the events were judged in) count the same events, per action and decision."""
    actions = Counter(e["action"] for e in run.events)
    audit = read_audit(spark, run.inputs)
    read = {r["action"]: r["count"] for r in audit.events.groupBy("action").count().collect()}
    assert read == dict(actions)
    assert audit.quarantine.count() == run.summary["lines"]["total"] - EVENTS
    root = tmp_path_factory.mktemp("replay")
    snapshot = write_snapshot(root / "snapshot.jsonl", example_cluster())
    replay = run_replay(spark, str(POLICY), run.inputs, str(root / "out"), [str(snapshot)])
    assert replay["requests"] == run.summary["events"] == EVENTS
    assert replay["actions"] == run.summary["actions"]
    assert replay["lines"] == run.summary["lines"]
    # Replayed as recorded, broker config changes too: new topic-config defaults included.
    assert replay["unchanged"] == EVENTS
    assert replay["new_decisions"] == run.summary["decisions"] | {"unknown": 0, "error": 0}
    # The per-topic rows of both jobs leave out the same records of no topic.
    decisions = spark.read.parquet(str(root / "out" / "decisions"))
    no_topic = actions["admin_api"] + actions["alter_broker_config"]
    assert decisions.where("topic IS NULL").count() == no_topic
    reported = spark.read.parquet(str(run.out / "decisions")).where("topic IS NULL")
    assert reported.agg(F.sum("events")).first()[0] == no_topic
    changes = decisions.where("action = 'alter_broker_config'").collect()
    assert Counter((r["resource_type"], r["resource"]) for r in changes) == Counter(
        (e["resource_type"], e["resource"])
        for e in run.events
        if e["action"] == "alter_broker_config"
    )


def test_summary_is_written_and_returned(run: Run) -> None:
    written = json.loads((run.out / "summary.json").read_text())
    assert written == run.summary
    times = sorted(e["time"] for e in run.events)
    assert run.summary["time_range"] == {"first": times[0], "last": times[-1]}
    outputs = run.summary["outputs"]
    for name in ("decisions", "violations", "top_denied_principals", "top_denied_rules"):
        assert Path(outputs[name]) == run.out / name
    assert Path(outputs["report"]).is_file()


def _self_contained(html: str) -> list[str]:
    assert not re.search(r"https?:", html)
    images = re.findall(r'<img[^>]*src="([^"]*)"', html)
    assert all(src.startswith("data:image/png;base64,") for src in images)
    return images


def test_html_report_is_self_contained_with_the_key_numbers(run: Run) -> None:
    html = (run.out / "report.html").read_text()
    # Decisions over time, the trend of each top rule, top rules, top principals.
    assert len(_self_contained(html)) == 4
    pngs = sorted(p.name for p in run.out.glob("report-*.png"))
    assert pngs == [
        "report-1-decisions-per-hour-utc.png",
        "report-2-denials-per-hour-by-rule.png",
        "report-3-denials-by-rule-top-10.png",
        "report-4-denials-by-principal-top-10.png",
    ]
    counts = Counter(e["decision"] for e in run.events)
    assert f"<dd>{EVENTS:,}</dd>" in html
    for decision in ("denied", "audit-would-deny", "allowed"):
        rate = f"{100 * counts[decision] / EVENTS:.1f}%"
        assert f"<dt>{decision}</dt><dd>{counts[decision]:,} ({rate})</dd>" in html
    # Times to the second, in UTC, saying so; never microseconds.
    first = min(e["time"] for e in run.events)
    assert f"<dd>{first[:10]} {first[11:19]} UTC</dd>" in html
    assert not re.search(r"\d\d:\d\d:\d\d\.\d{6}", html)
    top = run.summary["top_principals"][0]
    assert f"{100 * top['denials'] / top['events']:.1f}%" in html
    assert "<dd>10</dd>" in html  # malformed lines
    assert "<h2>Decisions by action</h2>" in html
    assert "<td>alter_broker_config</td>" in html and "<td>admin_api</td>" in html
    for problem in ("not valid JSON", "missing field principal"):
        assert f"<td>{problem}</td>" in html
    assert run.malformed_file in html
    assert run.summary["top_principals"][0]["principal"] in html
    assert "segment-size" in html


def test_empty_input_gives_an_empty_report(spark: SparkSession, tmp_path: Path) -> None:
    (tmp_path / "empty.jsonl").write_text("")
    out = tmp_path / "out"
    summary = run_report(spark, [str(tmp_path / "empty.jsonl")], out.as_uri())
    assert summary["events"] == 0
    assert summary["lines"]["total"] == 0
    assert summary["time_range"] == {"first": None, "last": None}
    assert summary["top_principals"] == summary["top_rules"] == []
    for name in ("decisions", "violations", "top_denied_principals", "bad_lines"):
        assert _table(spark, out, name) == []
    html = (out / "report.html").read_text()
    assert _self_contained(html) == []
    assert "nothing to report" in html
    assert json.loads((out / "summary.json").read_text()) == summary


def test_the_session_settings_are_restored(spark: SparkSession, run: Run) -> None:
    assert run.summary["events"] == EVENTS
    assert spark.conf.get("spark.sql.shuffle.partitions") == "8"
    assert spark.conf.get("spark.sql.inMemoryColumnarStorage.compressed") == "true"


@pytest.mark.parametrize(
    ("first", "last", "partial"),
    [
        ("10:00:00.000000", "12:59:59.500000", (False, False)),
        ("10:30:00.000000", "12:59:59.500000", (True, False)),
        ("10:00:00.000000", "12:10:00.000000", (False, True)),
        ("10:05:00.000000", "10:55:00.000000", (True, True)),
    ],
)
def test_a_period_the_data_does_not_cover_is_marked_partial(
    first: str, last: str, partial: tuple[bool, bool]
) -> None:
    day = "2026-10-01T"
    facts = {"first": _instant(day + first), "last": _instant(day + last)}
    periods = periods_of(facts)
    assert (periods.first_partial, periods.last_partial) == partial
    assert periods.starts[0] == _instant(day + "10:00:00.000000")
    assert periods.step == timedelta(hours=1)


@pytest.mark.parametrize(
    ("first", "last", "step"),
    [
        ("2026-10-01T10:00:00", "2026-10-04T10:00:00", timedelta(hours=1)),
        ("2026-10-01T10:00:00", "2026-12-01T10:00:00", timedelta(days=1)),
        ("2021-10-01T10:00:00", "2026-10-01T10:00:00", timedelta(weeks=1)),
        # A clock decades or centuries off: fewer, longer periods, never 740,000 days.
        ("1970-01-01T00:00:05", "2026-10-01T10:00:00", timedelta(weeks=4)),
        ("0001-01-01T00:00:05", "2026-10-01T10:00:00", timedelta(weeks=520)),
        ("2026-10-01T10:00:00", "9999-12-31T23:59:59.999999", timedelta(weeks=520)),
    ],
)
def test_a_long_or_absurd_span_is_charted_in_longer_periods(
    first: str, last: str, step: timedelta
) -> None:
    periods = periods_of({"first": _instant(first), "last": _instant(last)})
    assert periods.step == step
    assert len(periods.starts) <= 1100
    assert periods.starts[0] <= _instant(first) < periods.starts[0] + step
    assert periods.starts[-1] <= _instant(last)
    if step >= timedelta(weeks=1):
        assert {s.weekday() for s in periods.starts} == {0}  # Mondays
    # Both chart kinds draw the first and last years there are (matplotlib cannot go beyond).
    series = {"a": [1.0] * len(periods.starts), "b": [2.0] * len(periods.starts)}
    for chart in (
        time_chart("t", periods, series, "events", ("rate", [0.5] * len(periods.starts))),
        small_multiples("t", periods, series, "events"),
    ):
        assert chart.png.startswith(b"\x89PNG")


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(text + "+00:00")


# Injected at the top of a copy of the page: records every error (resource errors included,
# in the capture phase) and, once loaded, each image's decoded and laid-out size.
_PROBE = """<script>
window.__errors = [];
addEventListener("error", e => {
  __errors.push(String(e.message || (e.target && e.target.src)));
}, true);
addEventListener("load", () => document.documentElement.setAttribute("data-probe", JSON.stringify({
  errors: __errors,
  images: [...document.images].map(i => {
    const box = i.getBoundingClientRect();
    return [i.naturalWidth, i.naturalHeight, box.width, box.height];
  }),
})));
</script>"""


def _chromium(*args: str) -> subprocess.CompletedProcess[str]:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    assert browser, "no chromium: .ci/run installs Debian's chromium package"
    return subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )


def test_the_report_renders_in_a_real_browser(run: Run, tmp_path: Path) -> None:
    html = (run.out / "report.html").read_text()
    probed = tmp_path / "probed.html"
    probed.write_text(html.replace("<head>", "<head>" + _PROBE, 1))
    dom = _chromium("--virtual-time-budget=5000", "--dump-dom", probed.as_uri()).stdout
    found = re.search(r'data-probe="([^"]*)"', dom)
    assert found, "the page never finished loading"
    probe = json.loads(htmllib.unescape(found.group(1)))
    assert probe["errors"] == []
    assert len(probe["images"]) == 4
    for natural_width, natural_height, width, height in probe["images"]:
        assert natural_width > 300 and natural_height > 100  # decoded PNGs
        assert width > 300 and height > 100  # laid out at a readable size
    shot = tmp_path / "report.png"
    done = _chromium(
        f"--screenshot={shot}", "--window-size=1280,2400", (run.out / "report.html").as_uri()
    )
    assert "CONSOLE" not in done.stderr
    pixels = matplotlib.image.imread(shot)
    assert pixels.shape[:2] == (2400, 1280)
    assert pixels.std() > 0.05  # not a blank page
