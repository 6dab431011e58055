"""Policy files: refused input names the path, the line and the reason; the JSON Schema."""

from __future__ import annotations

import pytest

from kafka_policy_proxy.policy.loader import (
    PolicyError,
    format_path,
    load_policy,
    parse_document,
    policy_json_schema,
)


def problems(source: str | dict[str, object]) -> list[tuple[str, str, int | None]]:
    with pytest.raises(PolicyError) as caught:
        load_policy(source, "policy.yaml")
    return [(p.where, p.reason, p.line) for p in caught.value.problems]


def test_paths_are_rendered_for_people() -> None:
    assert format_path(("rules", 2, "configs", "retention.ms", "max")) == (
        'rules[2].configs."retention.ms".max'
    )
    assert format_path(()) == "(top level)"


def test_bad_duration_bound_names_the_path_and_line() -> None:
    text = """\
rules:
  - name: a
    partitions: {max: 4}
  - name: b
    deny: true
  - name: retention
    configs:
      retention.ms:
        min: 1h
        max: 7x
"""
    assert problems(text) == [
        (
            'rules[2].configs."retention.ms".max',
            "'7x': unknown unit 'x' for a duration (units: ms, s, m, h, d, w)",
            10,
        )
    ]


def test_min_greater_than_max() -> None:
    config = {"rules": [{"name": "r", "configs": {"retention.ms": {"min": "7d", "max": "1d"}}}]}
    assert problems(config) == [
        ('rules[0].configs."retention.ms".max', "max (1d) is less than min (7d)", None)
    ]
    parts = {"rules": [{"name": "r", "partitions": {"min": 10, "max": 2}}]}
    assert problems(parts) == [("rules[0].partitions.max", "max (2) is less than min (10)", None)]


def test_unknown_keys_and_bad_regexes_are_all_reported() -> None:
    text = """\
rules:
  - name: r
    match: {topic: "orders(", principal: User:alice}
    name_pattern: "[a-z"
    partitions: {max: 4, maximum: 5}
"""
    found = problems(text)
    assert (
        "rules[0].match.topic",
        "not a valid regular expression: missing ), unterminated subpattern at position 6",
        3,
    ) in found
    assert ("rules[0].match.principal", "unknown key", 3) in found
    assert any(
        w == "rules[0].name_pattern" and "not a valid regular expression" in r for w, r, _ in found
    )
    assert ("rules[0].partitions.maximum", "unknown key", 5) in found


@pytest.mark.parametrize(
    ("rule", "where", "fragment"),
    [
        ({"name": "r"}, "rules[0]", "the rule has no constraints"),
        ({"name": "Bad Name", "deny": True}, "rules[0].name", "should match pattern"),
        ({"name": "r", "mode": "warn", "deny": True}, "rules[0].mode", "'enforce' or 'audit'"),
        (
            {"name": "r", "match": {"actions": ["drop"]}, "deny": True},
            "rules[0].match.actions[0]",
            "Input should be",
        ),
        (
            {"name": "r", "streams": {}, "deny": True},
            "rules[0].streams",
            "a streams rule takes no other constraints (deny)",
        ),
        (
            {"name": "r", "configs": {"cleanup.policy": {"max": 3}}},
            'rules[0].configs."cleanup.policy".max',
            "cleanup.policy is a list config",
        ),
        (
            {"name": "r", "configs": {"x": {"required": True, "forbidden": True}}},
            "rules[0].configs.x",
            "both required and forbidden",
        ),
        (
            {"name": "r", "configs": {"x": {"min": [1]}}},
            "rules[0].configs.x.min",
            "must be a number, a duration such as '7d' or a size such as '1GiB'",
        ),
        (
            {"name": "r", "partitions": {"max": 0}},
            "rules[0].partitions.max",
            "greater than or equal to 1",
        ),
    ],
)
def test_rule_errors(rule: dict[str, object], where: str, fragment: str) -> None:
    found = problems({"rules": [rule]})
    assert any(w == where and fragment in r for w, r, _ in found), found


def test_duplicate_names_across_rules_and_plugins() -> None:
    config = {
        "rules": [{"name": "a", "deny": True}, {"name": "a", "deny": True}],
        "plugins": [{"name": "a", "class": "x.Y"}],
    }
    assert problems(config) == [
        ("rules[1].name", "duplicate name 'a' (also rules[0])", None),
        ("plugins[0].name", "duplicate name 'a' (also rules[0])", None),
    ]


def test_unknown_config_keys_can_be_bounded_with_a_declared_type() -> None:
    document = parse_document(
        {"rules": [{"name": "r", "configs": {"x.custom.ms": {"type": "duration", "max": "1d"}}}]}
    )
    assert document.rules[0].configs["x.custom.ms"].max == "1d"
    assert problems({"rules": [{"name": "r", "configs": {"x.custom": {"max": "1d"}}}]}) == [
        (
            'rules[0].configs."x.custom".max',
            "x.custom is a string config; min/max need a number, duration or size "
            "(set `type` for configs Kafka does not define)",
            None,
        )
    ]


def test_yaml_errors_and_top_level_shape() -> None:
    [(where, reason, line)] = problems("rules: [\n  {name: a,\n")
    assert where == "(top level)" and reason.startswith("not valid YAML") and line is not None
    assert problems("- just\n- a list\n") == [
        ("(top level)", "the top level must be a mapping", None)
    ]
    assert problems("version: 2\n")[0][0] == "version"


def test_error_message_lists_every_problem() -> None:
    with pytest.raises(PolicyError) as caught:
        load_policy("rules:\n  - name: r\n    partitions: {max: 0}\n", "p.yaml")
    assert str(caught.value) == (
        "invalid policy p.yaml:\n"
        "  line 3: rules[0].partitions.max: Input should be greater than or equal to 1"
    )


ENFORCES_NOTHING = "set `enforce: nothing` at the top level"


@pytest.mark.parametrize(
    ("source", "why"),
    [
        ("", "it has no rules and no plugins"),
        ("version: 1\n", "it has no rules and no plugins"),
        ("rules: []\nplugins: []\n", "it has no rules and no plugins"),
        ("rules:\n  - {name: a, deny: true, mode: audit}\n", "every rule and plugin is in audit"),
        (
            "plugins:\n  - {name: p, class: x.Y, mode: audit}\n",
            "every rule and plugin is in audit",
        ),
        ("dry_run: true\nrules:\n  - {name: a, deny: true}\n", "dry_run: true puts every"),
    ],
)
def test_a_policy_that_enforces_nothing_is_refused(source: str, why: str) -> None:
    [(where, reason, _)] = problems(source)
    assert where == "(top level)"
    assert why in reason and ENFORCES_NOTHING in reason


def test_enforce_nothing_admits_such_a_policy_and_must_be_true() -> None:
    assert load_policy("enforce: nothing\n", "empty.yaml").rule_names == ()
    audit = "enforce: nothing\nrules:\n  - {name: a, deny: true, mode: audit}\n"
    assert load_policy(audit, "audit.yaml").rule_names == ("a",)
    dry = "enforce: nothing\ndry_run: true\nrules:\n  - {name: a, deny: true}\n"
    assert load_policy(dry, "dry.yaml").dry_run
    enforcing = audit + "  - {name: b, deny: true}\n"
    assert problems(enforcing) == [
        (
            "enforce",
            "`enforce: nothing` says this policy denies nothing, but rules[1] enforces; "
            "remove the key",
            1,
        )
    ]
    assert problems("enforce: everything\nrules:\n  - {name: a, deny: true}\n")[0][0] == ("enforce")


def test_json_schema_describes_rules_and_refuses_unknown_keys() -> None:
    schema = policy_json_schema()
    assert schema["additionalProperties"] is False
    rule = schema["$defs"]["Rule"]
    assert {"name", "match", "partitions", "configs", "streams", "mode"} <= set(rule["properties"])
    assert "class" in schema["$defs"]["PluginSpec"]["properties"]
