"""The shipped Grafana dashboard queries only metrics the proxy exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client import REGISTRY

import kafka_policy_proxy.proxy.metrics  # noqa: F401  (registers every metric)
from harness.promql import parse_errors

DASHBOARD = Path(__file__).resolve().parents[2] / "examples" / "grafana-dashboard.json"


def exported() -> set[str]:
    """Every sample name the proxy's metrics can produce."""
    return {
        sample_name
        for collector in list(REGISTRY._collector_to_names)
        for sample_name in REGISTRY._collector_to_names[collector]
        if sample_name.startswith("kpp_")
    }


def test_every_query_names_an_exported_metric() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    names = exported()
    queried = set()
    for panel in dashboard["panels"]:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            found = set(re.findall(r"\bkpp_[a-z_]+", target["expr"]))
            assert found, (panel["title"], target["expr"])
            assert found <= names, (panel["title"], found - names)
            queried |= found
    # Every metric family appears on the dashboard at least once.
    families = {
        name.removesuffix("_total")
        for name in names
        if not name.endswith(("_sum", "_count", "_created", "_bucket"))
    }
    assert {q.removesuffix("_total").removesuffix("_bucket") for q in queried} >= families


def test_panels_do_not_overlap() -> None:
    cells = set()
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        g = panel["gridPos"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, panel["title"]
                cells.add((x, y))


def test_every_query_is_filtered_by_the_instance_variable() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    (variable,) = [v for v in dashboard["templating"]["list"] if v["name"] == "instance"]
    assert variable["includeAll"] and variable["multi"] and variable["allValue"] == ".*"
    (source,) = re.findall(r"label_values\((kpp_[a-z_]+), instance\)", variable["definition"])
    assert source in exported()
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            # Every metric the query reads carries the filter, not only the first one.
            selectors = re.findall(r"\bkpp_[a-z_]+(\{[^}]*\})?", target["expr"])
            assert selectors, (panel["title"], target["expr"])
            for selector in selectors:
                assert selector.startswith('{instance=~"$instance"'), (panel["title"], target)


def test_every_query_parses_as_promql() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    assert parse_errors(queries) == {}
