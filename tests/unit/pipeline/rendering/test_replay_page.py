"""The replay's page from hand-built facts: the first screen counts what would break (distinct
principals, topics, client ids) and names the applications; the sample has no empty column."""

from __future__ import annotations

import re

from kafka_policy_proxy.pipeline.rendering.html_page import render
from kafka_policy_proxy.pipeline.rendering.replay_page import replay_page
from tests.unit.pipeline.rendering.page_facts import replay_facts

# The keys the typed replay adds to its facts (the brief's "Replay facts").
NEW_KEYS = ("distinct", "distinct_allowed", "clients", "cache")


def _table(html: str, key: str) -> str:
    start = html.index(f'id="{key}"')
    return html[start : html.index("</table>", start)]


def test_the_first_screen_counts_what_would_break_and_names_the_applications() -> None:
    facts, summary = replay_facts()
    html = render(replay_page(facts, summary, "file:///data/audit/"))
    # The headline counts who and what would be denied, not only repeated requests.
    figures = re.findall(r"<dt>([^<]+)</dt><dd>([^<]+)</dd>", html)
    assert figures[:5] == [
        ("would flip", "8.1%"),
        ("allow-&gt;deny", "8,000 (8.1%)"),
        ("principals denied", "3"),
        ("topics denied", "41"),
        ("client ids denied", "5"),
    ]
    act = html[html.index('id="act"') : html.index("</section>")]
    assert html.index('id="act"') < html.index("Most affected topics")
    assert (
        "Would deny 8,000 requests (8.1%; 812 distinct): 3 principals, 41 topics, "
        "5 client ids. Would allow 10 requests (0.0%; 2 distinct): 1 principal, 2 topics, "
        "1 client id."
    ) in act
    clients = _table(act, "clients")
    assert clients.count("<tr>") == 1 + 5
    assert re.search(r"<td>orders-service-0</td><td><span class=\"warn\">User:ANONYMOUS", clients)
    assert "<td>4,000</td><td>10</td><td>topic-naming</td>" in clients
    assert "[topic-naming] topic name" in clients
    assert "4,000 of the requests it would deny come from unauthenticated clients" in act
    assert "Judgement cache: 90,000 of 98,765 lookups" in html


def test_the_sample_leaves_out_the_columns_no_row_fills() -> None:
    facts, summary = replay_facts()
    allow_to_deny = [r for r in facts["sample"] if r["flip"] == "allow->deny"]
    html = render(replay_page(facts | {"sample": allow_to_deny}, summary, "x"))
    sample = _table(html, "sample")
    header = re.findall(r"<th>([^<]+)</th>", sample)
    # No allow->deny flip had recorded rules, and the facts give no client ids.
    assert header == [
        "first time",
        "flip",
        "principal",
        "resource",
        "action",
        "requests",
        "new violations",
    ]
    assert sample.count("<tr>") == 1 + 4
    both = _table(render(replay_page(facts, summary, "x")), "sample")
    assert "<th>recorded rules</th>" in both and "<td>partitions</td>" in both


def test_a_replay_of_the_facts_before_the_contract_is_still_drawn() -> None:
    facts, summary = replay_facts()
    old = {k: v for k, v in facts.items() if k not in NEW_KEYS}
    old["sample"] = [{k: v for k, v in r.items() if k != "requests"} for r in facts["sample"]]
    html = render(replay_page(old, summary, "x"))
    assert 'id="act"' not in html  # no empty box
    assert "Judgement cache" not in html
    assert "<th>requests</th>" not in _table(html, "sample")
