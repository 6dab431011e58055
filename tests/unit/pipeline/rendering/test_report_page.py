"""The report's page from hand-built facts: what its first screen says, the tables a team is
sent, the capped bad lines, exceptions and budgets, and a report of old facts still drawn."""

from __future__ import annotations

import re
from datetime import timedelta

from kafka_policy_proxy.pipeline.rendering.html_page import Chart, Section, render
from kafka_policy_proxy.pipeline.rendering.report_action import period_change
from kafka_policy_proxy.pipeline.rendering.report_page import report_page
from tests.unit.pipeline.rendering.page_facts import LAST, LONG_MESSAGE, report_facts

# The keys the rollups add to the report's facts (the brief's "Report facts").
NEW_KEYS = (
    "window",
    "periods",
    "rising",
    "topics",
    "topics_total",
    "principal_rules",
    "exceptions",
    "budgets",
    "partial",
)


def _section(html: str, key: str) -> str:
    start = html.index(f'id="{key}"')
    return html[start : html.index("</table>", start)]


def test_the_first_screen_says_what_to_act_on_before_any_chart() -> None:
    html = render(report_page(report_facts(), "file:///data/audit/"))
    act = html[html.index('<section class="act" id="act">') : html.index("</section>")]
    assert html.index('id="act"') < html.index("<img")
    # Is it getting better: the denials of the last 7 days against the days before.
    # The denial rate rose (7.6% to 10.5%): it is not getting better.
    assert "Is it getting better? No: 5,975 denials in 7 days to 2026-10-10 14:23 UTC" in act
    rising = _section(act, "rising")
    assert rising.count("<tr>") == 1 + 3
    assert "+2,500 (+167%)" in rising and ">new<" in rising
    assert "User:ANONYMOUS (unauthenticated)" in rising
    topics = _section(act, "top-topics")
    assert topics.count("<tr>") == 1 + 5  # the first screen's five, of the 30 given
    assert "5 of 4,655 denied" in topics
    # The example message is cut to a readable length, whole on pointing at it.
    assert (
        'title="' + LONG_MESSAGE.replace("'", "&#x27;").replace("<", "&lt;").replace(">", "&gt;")
        in topics
    )
    assert "[partitions] 128 partitions &gt; 48" in topics
    # Unauthenticated clients, an expiring exception and a full budget are called out.
    assert 'class="warn" id="unauthenticated"' in act
    assert "User:ANONYMOUS made 3,077 events, 2,000 of them denied (65.0%)" in act
    assert "payments-legacy-names" in act and "analytics-big-partitions" not in act
    assert "team-payments" in act and "team-analytics" not in act


def test_period_change_counts_the_hours_of_each_period_once() -> None:
    hour = LAST.replace(minute=0, second=0, microsecond=0)
    hourly = [
        {"hour": hour - timedelta(hours=h), "decision": d, "events": n}
        for h in range(0, 10)
        for d, n in (("denied", h + 1), ("allowed", 10))
    ]
    split = hour - timedelta(hours=4)  # on an hour: that hour is the current period's
    text = period_change(
        hourly, {"current": [split, LAST], "previous": [split - timedelta(hours=5), split]}
    )
    # Current: hours 0..4 (denied 1..5 = 15); previous: hours 5..9 (6..10 = 40).
    assert "Yes: 15 denials" in text and "against 40 in the period before" in text
    assert "-25 (-62%)" in text


def test_the_tables_a_team_is_sent() -> None:
    html = render(report_page(report_facts(), "file:///data/audit/"))
    table = _section(html, "principal-rules")
    principals = re.findall(r"<tr><td>(?:<span[^>]*>)?([^<]+)", table)
    # Grouped by principal, the most denied first; unauthenticated marked as such.
    assert principals[:8] == ["User:ANONYMOUS (unauthenticated)"] * 8
    assert principals[8:16] == ["User:app-2"] * 8
    assert "[rule-1] example message for User:app-2" in table
    topics = _section(html, "topics")
    assert "25 of 4,655 denied" in topics and topics.count("<tr>") == 1 + 25


def test_bad_lines_are_capped_with_their_line_and_sample() -> None:
    html = render(report_page(report_facts(), "file:///data/audit/"))
    start = html.index('id="bad-lines"')
    table = html[start : html.index("</table>", start)]
    assert table.count("<tr>") == 1 + 10
    assert "and 20 more (1,836 lines): all in bad_lines/" in table
    assert "<th>first line</th>" in table and "<td>17</td>" in table
    # The file by its last segments, its whole URI on hover; the sample cut, whole on hover.
    assert 'title="file:///data/audit/2026/10/01/proxy-0.jsonl">…/01/proxy-0.jsonl<' in table
    assert re.search(r'class="code" title="[^"]{200,}">[^<]{100,}…<', table)


def test_exceptions_and_budgets_have_a_section_each() -> None:
    html = render(report_page(report_facts(), "file:///data/audit/"))
    exceptions = _section(html, "exceptions")
    assert exceptions.index("payments-legacy-names") < exceptions.index("analytics-big")
    assert '<span class="warn">4 days</span>' in exceptions  # 2026-10-15 against 10-10 14:23
    assert "<td>PAY-123</td>" in exceptions
    budgets = _section(html, "budgets")
    assert budgets.index("team-payments") < budgets.index("team-analytics")
    assert '<span class="warn">93%</span>' in budgets and "<td>unlimited</td>" in budgets


def test_charts_state_their_scale_and_partial_periods_once() -> None:
    page = report_page(report_facts(), "file:///data/audit/")
    charts = {c.key: c for c in page.parts if isinstance(c, Chart)}
    over_time, trends = charts["decisions-over-time"], charts["rule-trends"]
    assert over_time.title == "Decisions per day (UTC)"
    assert "partial days (the first from 2026-10-01 06:12 and the last to 2026-10-10 14:23" in (
        over_time.note
    )
    assert trends.note.startswith("One y scale for every panel: denials per day, 0 to 720")
    assert "partial days" in trends.note
    html = render(page)
    # Each title once, as the heading: the images carry none.
    assert html.count(">Decisions per day (UTC)<") == 1


def test_a_report_of_the_facts_before_the_rollups_is_still_drawn() -> None:
    facts = {k: v for k, v in report_facts().items() if k not in NEW_KEYS}
    for row in facts["bad_lines"]:
        del row["first_line"], row["sample"]
    page = report_page(facts, "file:///data/audit/")
    html = render(page)
    act = next(p for p in page.parts if isinstance(p, Section))
    assert [getattr(p, "key", "") for p in act.parts] == ["unauthenticated"]
    assert 'id="principal-rules"' not in html and 'id="exceptions"' not in html
    bad = _section(html, "bad-lines")
    assert "<th>first line</th>" not in bad and "<th>sample</th>" not in bad


def test_an_empty_report_has_no_first_screen() -> None:
    facts = report_facts()
    facts |= {
        "decisions": dict.fromkeys(facts["decisions"], 0),
        "hourly": [],
        "rule_hours": [],
        "principals": [],
        "rules": [],
        "first": None,
        "last": None,
        "rising": [],
        "topics": [],
        "topics_total": 0,
        "principal_rules": [],
        "bad_lines": [],
        "lines": {"total": 0, "malformed": 0, "blank": 0, "unknown_version": 0},
    }
    html = render(report_page(facts, "file:///data/audit/"))
    assert "nothing to report" in html and 'id="act"' not in html
