"""The report job: every table checked against a plain-Python count over the same events, and
its page: self-contained, with the key numbers, and drawn by a real browser.

The input (`report_inputs.py`) mixes topic records (schema 1 and 2), admin API
calls and broker config changes (allowed, denied, audit-would-deny) with bad lines; the read,
the report and the replay count the same events. The report runs once for the module; its
tests only read it.
"""

from __future__ import annotations

import html as htmllib
import json
import re
import shutil
import subprocess
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import matplotlib.image
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from harness.audit_data import example_cluster, write_snapshot
from kafka_policy_proxy.pipeline.jobs.replay import run_replay
from kafka_policy_proxy.pipeline.jobs.report import run_report
from kafka_policy_proxy.pipeline.rendering.html_page import page_files
from kafka_policy_proxy.pipeline.rendering.periods import periods_between
from kafka_policy_proxy.pipeline.rendering.replay_page import replay_page
from kafka_policy_proxy.pipeline.rendering.report_page import report_page
from kafka_policy_proxy.pipeline.sources.audit_events import read_audit
from kafka_policy_proxy.policy.decision_log import Outcome, RecordedAction
from tests.unit.pipeline.jobs.report_inputs import (
    EVENTS,
    POLICY,
    V1_EVENTS,
    Run,
    run_mixed_report,
    self_contained,
    table,
)
from tests.unit.pipeline.rendering.page_facts import replay_facts, report_facts

# The key columns of `decisions`; `violations` adds rule and rule_mode.
KEYS = (
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


@pytest.fixture(scope="module")
def mixed_report(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Run:
    """The report over the mixed input of `run_mixed_report`."""
    return run_mixed_report(spark, tmp_path_factory.mktemp("report"))


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


def _rules(event: dict[str, Any]) -> list[tuple[str, str]]:
    # A rule whose two checks both failed is listed twice: the report counts it once.
    return list(dict.fromkeys((v["rule"], v["mode"]) for v in event["violations"]))


def test_the_input_has_what_the_report_is_about(mixed_report: Run) -> None:
    decisions = Counter(e["decision"] for e in mixed_report.events)
    assert min(decisions.values()) >= 20, decisions
    hours = {_hour(e["time"]) for e in mixed_report.events}
    assert len(hours) >= 7
    assert any(len(_rules(e)) >= 2 for e in mixed_report.events)
    assert any(len(_rules(e)) < len(e["violations"]) for e in mixed_report.events)
    # Every action, and records of no topic with every decision, in each of the three inputs.
    assert {e["action"] for e in mixed_report.events} == set(RecordedAction)
    configs = [e for e in mixed_report.events if e["action"] == "alter_broker_config"]
    assert {e["decision"] for e in configs} == {"allowed", "denied", "audit-would-deny"}
    assert {e["resource_type"] for e in configs} == {"broker", "cluster", "broker_logger", "group"}
    for part in (
        mixed_report.events[:1000],
        mixed_report.events[1000:2000],
        mixed_report.events[2000:],
    ):
        assert {e["action"] for e in part} >= {"admin_api", "alter_broker_config"}
    assert sum(e["schema"] == 1 for e in mixed_report.events) == V1_EVENTS


def _event_key(e: dict[str, Any]) -> tuple[Any, ...]:
    """An event's key in `decisions` (KEYS), the hour as epoch microseconds."""
    hour = _hour(e["time"]) * 1_000_000
    return (
        hour,
        e["principal"],
        e["topic"],
        e["action"],
        e["api"],
        *_resource(e),
        e["decision"],
        e["mode"],
    )


def test_decisions_are_counted_per_hour_and_key(spark: SparkSession, mixed_report: Run) -> None:
    expected = Counter(_event_key(e) for e in mixed_report.events)
    rows = table(spark, mixed_report.out, "decisions")
    got = {tuple(r[k] for k in KEYS): r["events"] for r in rows}
    assert len(got) == len(rows), "two rows of one key"
    assert got == dict(expected)
    assert set(rows[0]) == {*KEYS, "events"}


def test_violations_count_each_rule_of_each_event_once(
    spark: SparkSession, mixed_report: Run
) -> None:
    expected: Counter[tuple[Any, ...]] = Counter()
    for e in mixed_report.events:
        for rule, mode in _rules(e):
            expected[(*_event_key(e), rule, mode)] += 1
    rows = table(spark, mixed_report.out, "violations")
    keys = (*KEYS, "rule", "rule_mode")
    got = {tuple(r[k] for k in keys): r["events"] for r in rows}
    assert len(got) == len(rows), "two rows of one key"
    assert got == dict(expected)


def _ranked(totals: dict[str, dict[str, Any]]) -> list[str]:
    return sorted(totals, key=lambda name: (-totals[name]["denials"], name))


def test_top_denied_principals(spark: SparkSession, mixed_report: Run) -> None:
    totals: dict[str, dict[str, Any]] = defaultdict(lambda: {"denials": 0, "topics": set()})
    for e in mixed_report.events:
        if e["decision"] == "denied":
            entry = totals[e["principal"]]
            entry["denials"] += 1
            entry["topics"] |= _topic(e)
            entry.setdefault("times", []).append(_micros(e["time"]))
    events = Counter(e["principal"] for e in mixed_report.events)
    rows = sorted(table(spark, mixed_report.out, "top_denied_principals"), key=lambda r: r["rank"])
    assert [r["principal"] for r in rows] == _ranked(totals)
    assert [r["rank"] for r in rows] == list(range(1, len(totals) + 1))
    for row in rows:
        entry = totals[row["principal"]]
        assert row["denials"] == entry["denials"]
        assert row["events"] == events[row["principal"]]  # every decision: the rate's base
        assert row["topics"] == len(entry["topics"])
        assert (row["first_seen"], row["last_seen"]) == (min(entry["times"]), max(entry["times"]))
    top = mixed_report.summary["top_principals"]
    assert [p["principal"] for p in top] == _ranked(totals)[:10]
    assert top[0]["denials"] == totals[top[0]["principal"]]["denials"]


def test_top_denied_rules_count_enforce_rules_of_denied_events(
    spark: SparkSession, mixed_report: Run
) -> None:
    totals: dict[str, dict[str, Any]] = defaultdict(
        lambda: {"denials": 0, "principals": set(), "topics": set(), "times": []}
    )
    for e in mixed_report.events:
        for rule, mode in _rules(e):
            if e["decision"] == "denied" and mode == "enforce":
                entry = totals[rule]
                entry["denials"] += 1
                entry["principals"].add(e["principal"])
                entry["topics"] |= _topic(e)
                entry["times"].append(_micros(e["time"]))
    rows = sorted(table(spark, mixed_report.out, "top_denied_rules"), key=lambda r: r["rank"])
    assert [r["rule"] for r in rows] == _ranked(totals)
    assert "segment-size" not in {r["rule"] for r in rows}  # an audit rule denies nothing
    for row in rows:
        entry = totals[row["rule"]]
        assert row["denials"] == entry["denials"]
        assert row["principals"] == len(entry["principals"])
        assert row["topics"] == len(entry["topics"])
        assert (row["first_seen"], row["last_seen"]) == (min(entry["times"]), max(entry["times"]))
    assert [r["rule"] for r in mixed_report.summary["top_rules"]] == _ranked(totals)[:10]


def test_would_deny_counts_audit_rules(spark: SparkSession, mixed_report: Run) -> None:
    expected: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    topics: dict[tuple[str, str], set[str]] = defaultdict(set)
    for e in mixed_report.events:
        for rule, mode in _rules(e):
            if mode == "audit":
                expected[rule, e["principal"]][e["decision"]] += 1
                topics[rule, e["principal"]] |= _topic(e)
    assert expected, "the example policy's segment-size rule should have fired"
    rows = table(spark, mixed_report.out, "would_deny")
    got = {(r["rule"], r["principal"]): r for r in rows}
    assert set(got) == set(expected)
    for key, counts in expected.items():
        row = got[key]
        assert row["would_deny"] == counts["audit-would-deny"]
        assert row["denied_anyway"] == counts["denied"]
        assert row["fired"] == counts.total()
        assert row["topics"] == len(topics[key])
    per_rule = {r["rule"]: r for r in mixed_report.summary["audit_rules"]}
    assert per_rule["segment-size"]["would_deny"] == sum(
        c["audit-would-deny"] for (rule, _), c in expected.items() if rule == "segment-size"
    )


def test_malformed_lines_are_counted_by_file_and_reason(
    spark: SparkSession, mixed_report: Run
) -> None:
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
    rows = table(spark, mixed_report.out, "bad_lines")
    assert {r["problem"]: r["lines"] for r in rows if r["kind"] == "malformed"} == expected
    assert all(r["source"].endswith("/" + mixed_report.malformed_file) for r in rows)
    lines = mixed_report.summary["lines"]
    assert (lines["malformed"], lines["blank"], lines["unknown_version"]) == (10, 1, 1)
    assert lines["malformed_by_problem"] == expected
    assert lines["unknown_versions"] == {"4": 1}
    assert list(lines["bad_by_file"].values()) == [12]
    assert lines["total"] == EVENTS + 12
    # Every good event is still counted, the ones next to the bad lines too.
    assert mixed_report.summary["events"] == EVENTS
    decisions = Counter(e["decision"] for e in mixed_report.events)
    assert mixed_report.summary["decisions"] == {o.value: decisions[o.value] for o in Outcome}
    actions = Counter(e["action"] for e in mixed_report.events)
    assert mixed_report.summary["actions"] == {a.value: actions[a.value] for a in RecordedAction}


def test_every_job_counts_the_same_events(
    spark: SparkSession, mixed_report: Run, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The read, the report and the replay (of the recorded policy, with the snapshot of the
    cluster the events were judged in) count the same events, per action and decision."""
    actions = Counter(e["action"] for e in mixed_report.events)
    audit = read_audit(spark, mixed_report.inputs)
    read = {r["action"]: r["count"] for r in audit.events.groupBy("action").count().collect()}
    assert read == dict(actions)
    assert audit.quarantine.count() == mixed_report.summary["lines"]["total"] - EVENTS
    root = tmp_path_factory.mktemp("replay")
    snapshot = write_snapshot(root / "snapshot.jsonl", example_cluster())
    replay = run_replay(spark, str(POLICY), mixed_report.inputs, str(root / "out"), [str(snapshot)])
    assert replay["requests"] == mixed_report.summary["events"] == EVENTS
    assert replay["actions"] == mixed_report.summary["actions"]
    assert replay["lines"] == mixed_report.summary["lines"]
    # Replayed as recorded, broker config changes too: new topic-config defaults included.
    assert replay["unchanged"] == EVENTS
    assert replay["new_decisions"] == mixed_report.summary["decisions"] | {"unknown": 0, "error": 0}
    # The per-topic rows of both jobs leave out the same records of no topic.
    decisions = spark.read.parquet(str(root / "out" / "decisions"))
    no_topic = actions["admin_api"] + actions["alter_broker_config"]
    assert decisions.where("topic IS NULL").count() == no_topic
    reported = spark.read.parquet(str(mixed_report.out / "decisions")).where("topic IS NULL")
    assert reported.agg(F.sum("events")).first()[0] == no_topic
    changes = decisions.where("action = 'alter_broker_config'").collect()
    assert Counter((r["resource_type"], r["resource"]) for r in changes) == Counter(
        (e["resource_type"], e["resource"])
        for e in mixed_report.events
        if e["action"] == "alter_broker_config"
    )


def test_summary_is_written_and_returned(mixed_report: Run) -> None:
    written = json.loads((mixed_report.out / "summary.json").read_text())
    assert written == mixed_report.summary
    times = sorted(e["time"] for e in mixed_report.events)
    assert mixed_report.summary["time_range"] == {"first": times[0], "last": times[-1]}
    outputs = mixed_report.summary["outputs"]
    for name in ("decisions", "violations", "top_denied_principals", "top_denied_rules"):
        assert Path(outputs[name]) == mixed_report.out / name
    assert Path(outputs["report"]).is_file()


def test_empty_input_gives_an_empty_report(spark: SparkSession, tmp_path: Path) -> None:
    (tmp_path / "empty.jsonl").write_text("")
    out = tmp_path / "out"
    summary = run_report(spark, [str(tmp_path / "empty.jsonl")], out.as_uri(), drill_down=True)
    assert summary["events"] == 0
    assert summary["lines"]["total"] == 0
    assert summary["time_range"] == {"first": None, "last": None}
    assert summary["top_principals"] == summary["top_rules"] == []
    for name in ("decisions", "violations", "top_denied_principals", "bad_lines"):
        assert table(spark, out, name) == []
    html = (out / "report.html").read_text()
    assert self_contained(html) == []
    assert "nothing to report" in html
    assert json.loads((out / "summary.json").read_text()) == summary


def test_the_session_settings_are_restored(spark: SparkSession, mixed_report: Run) -> None:
    assert mixed_report.summary["events"] == EVENTS
    assert spark.conf.get("spark.sql.shuffle.partitions") == "8"
    assert spark.conf.get("spark.sql.inMemoryColumnarStorage.compressed") == "true"


def test_html_report_is_self_contained_with_the_key_numbers(mixed_report: Run) -> None:
    html = (mixed_report.out / "report.html").read_text()
    # Decisions over time, the trend of each top rule, top rules, top principals.
    assert len(self_contained(html)) == 4
    pngs = sorted(p.name for p in mixed_report.out.glob("report-*.png"))
    assert pngs == [
        "report-1-decisions-per-hour-utc.png",
        "report-2-denials-per-hour-by-rule.png",
        "report-3-denials-by-rule-top-10.png",
        "report-4-denials-by-principal-top-10.png",
    ]
    counts = Counter(e["decision"] for e in mixed_report.events)
    assert f"<dd>{EVENTS:,}</dd>" in html
    for decision in ("denied", "audit-would-deny", "allowed"):
        rate = f"{100 * counts[decision] / EVENTS:.1f}%"
        assert f"<dt>{decision}</dt><dd>{counts[decision]:,} ({rate})</dd>" in html
    # Times to the second, in UTC, saying so; never microseconds.
    first = min(e["time"] for e in mixed_report.events)
    assert f"<dd>{first[:10]} {first[11:19]} UTC</dd>" in html
    # (A bad line's sample is quoted as it was written, microseconds and all.)
    shown = re.sub(r'<span class="code"[^>]*>[^<]*</span>', "", html)
    assert not re.search(r"\d\d:\d\d:\d\d\.\d{6}", shown), re.findall(r".{30}\.\d{6}.{10}", shown)
    top = mixed_report.summary["top_principals"][0]
    assert f"{100 * top['denials'] / top['events']:.1f}%" in html
    assert "<dd>10</dd>" in html  # malformed lines
    assert "<h2>Decisions by action</h2>" in html
    assert "<td>alter_broker_config</td>" in html and "<td>admin_api</td>" in html
    for problem in ("not valid JSON", "missing field principal"):
        assert f"<td>{problem}</td>" in html
    assert mixed_report.malformed_file in html
    assert mixed_report.summary["top_principals"][0]["principal"] in html
    assert "segment-size" in html


# Injected at the top of a copy of the page: records every error (resource errors included,
# in the capture phase) and, once loaded, each image's decoded and laid-out size and the top
# and bottom of every element with an id (the parts of the first screen, say).
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
  ids: Object.fromEntries([...document.querySelectorAll("[id]")].map(e => {
    const box = e.getBoundingClientRect();
    return [e.id, [box.top, box.bottom, box.right]];
  })),
  notes: [...document.querySelectorAll("p.note")].map(e => e.textContent),
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


def _probe(html: str, tmp_path: Path) -> dict[str, Any]:
    """What the probe recorded of the page, laid out in a first screen of 1280 x 1000."""
    probed = tmp_path / "probed.html"
    probed.write_text(html.replace("<head>", "<head>" + _PROBE, 1))
    dom = _chromium(
        "--virtual-time-budget=5000", "--window-size=1280,1000", "--dump-dom", probed.as_uri()
    ).stdout
    found = re.search(r'data-probe="([^"]*)"', dom)
    assert found, "the page never finished loading"
    probe: dict[str, Any] = json.loads(htmllib.unescape(found.group(1)))
    assert probe["errors"] == []
    return probe


def _screenshots(page: Path, tmp_path: Path) -> dict[str, Any]:
    """The page's first screen and its whole length as PNGs in `tmp_path`, as pixels."""
    shots = {}
    for name, height in (("first-screen", 1000), ("whole", 4000)):
        shot = tmp_path / f"{page.stem}-{name}.png"
        done = _chromium(f"--screenshot={shot}", f"--window-size=1280,{height}", page.as_uri())
        assert "CONSOLE" not in done.stderr
        pixels = matplotlib.image.imread(shot)
        assert pixels.shape[:2] == (height, 1280)
        assert pixels.std() > 0.05, f"a blank page? pixel deviation {pixels.std()}"
        shots[name] = pixels
    return shots


def test_the_report_renders_in_a_real_browser(mixed_report: Run, tmp_path: Path) -> None:
    html = (mixed_report.out / "report.html").read_text()
    probe = _probe(html, tmp_path)
    assert len(probe["images"]) == 4
    for natural_width, natural_height, width, height in probe["images"]:
        # Decoded PNGs, laid out at a readable size.
        assert natural_width > 300 and natural_height > 100, probe["images"]
        assert width > 300 and height > 100, probe["images"]
    # The input stops inside its last hour: the charts say which period is partial.
    first, last = (_instant(t) for t in mixed_report.summary["time_range"].values())
    periods = periods_between(first, last)
    assert periods.last_partial
    partial = [n for n in probe["notes"] if "Dashed, hollow points: partial hours" in n]
    assert len(partial) == 2, probe["notes"]  # decisions over time and the rule panels
    assert any(n.startswith("One y scale for every panel") for n in probe["notes"])
    _screenshots(mixed_report.out / "report.html", tmp_path)


def _instant(stamp: str) -> datetime:
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)


@pytest.mark.parametrize(
    ("name", "first_screen"),
    [
        ("report", ["act", "period-change", "unauthenticated", "rising", "top-topics"]),
        ("replay", ["act", "distinct", "unauthenticated", "clients"]),
    ],
)
def test_the_first_screen_says_what_to_act_on_in_a_real_browser(
    name: str, first_screen: list[str], tmp_path: Path
) -> None:
    """Pages of hand-built facts (`page_facts`: every key of the contracts) as a new user first
    sees them: what to act on within the first screen, before any chart, and inside the page's
    width; the partial periods said. The screenshots stay in the test's tmp_path."""
    if name == "report":
        page = report_page(report_facts(), "file:///data/audit/")
    else:
        facts, summary = replay_facts()
        page = replay_page(facts, summary, "file:///data/audit/")
    files = page_files(name, page)
    for file, data in files.items():
        (tmp_path / file).write_bytes(data)
    html = files[f"{name}.html"].decode()
    assert len(self_contained(html)) == (4 if name == "report" else 1)
    probe = _probe(html, tmp_path)
    ids = probe["ids"]
    act_right = ids["act"][2]
    for key in first_screen:
        top, _, right = ids[key]
        assert top < 1000, (key, ids[key])  # seen without scrolling
        assert right <= act_right + 1, (key, ids[key])  # inside the box, not beyond it
    if name == "report":
        assert ids["act"][1] < ids["decisions-over-time"][0]  # before the first chart
        assert ids["rising"][1] < 1000  # the rules and principals denied more: all on screen
        partial = [n for n in probe["notes"] if "Dashed, hollow points: partial days" in n]
        assert len(partial) == 2
        for key in ("principal-rules", "topics", "exceptions", "budgets", "bad-lines"):
            assert key in ids
    _screenshots(tmp_path / f"{name}.html", tmp_path)
