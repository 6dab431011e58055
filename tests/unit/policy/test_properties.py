"""Properties of evaluation over generated requests, against the example policy."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from kafka_policy_proxy.policy import builders
from kafka_policy_proxy.policy.loader import load_policy
from kafka_policy_proxy.policy.model import Decision, Fact, Principal
from kafka_policy_proxy.policy.offline.scenario import parse_suite

ROOT = Path(__file__).resolve().parents[3]
POLICY = load_policy((ROOT / "examples/policy.yaml").read_text(), "examples/policy.yaml")
CLUSTER = parse_suite((ROOT / "examples/policy-tests.yaml").read_text()).cluster.build()
# Keys no example rule mentions.
UNRELATED = ["flush.messages", "preallocate", "index.interval.bytes", "x.custom.setting"]
CONSTRAINED = ["retention.ms", "min.insync.replicas", "cleanup.policy", "segment.bytes"]

names = st.sampled_from(["orders.v2", "Orders", "orders_v1", "payments.x", "sandbox.t", "a"])
principals = st.sampled_from(["User:alice", "User:platform-admin", "User:streams-payments"])
config_values = st.sampled_from(["-1", "1", "60000", "3600000", "7776000000", "compact", "x"])


@st.composite
def creates(draw: st.DrawFn) -> tuple[str, int, int, list[tuple[str, str]], str]:
    configs = draw(st.lists(st.tuples(st.sampled_from(CONSTRAINED), config_values), max_size=3))
    return (
        draw(names),
        draw(st.sampled_from([-1, 1, 3, 64])),
        draw(st.sampled_from([-1, 1, 3])),
        configs,
        draw(principals),
    )


def evaluate(
    name: str, partitions: int, rf: int, configs: list[tuple[str, str]], who: str
) -> Decision:
    bare = builders.create_request(name, partitions, rf, None, configs, principal=Principal(who))
    return POLICY.evaluate(builders.resolve(bare, CLUSTER, frozenset(Fact)), CLUSTER)


@given(creates(), st.sampled_from(UNRELATED), st.text(max_size=6))
def test_a_denied_create_stays_denied_when_an_unrelated_config_is_added(
    create: tuple[str, int, int, list[tuple[str, str]], str], key: str, value: str
) -> None:
    name, partitions, rf, configs, who = create
    before = evaluate(name, partitions, rf, configs, who)
    after = evaluate(name, partitions, rf, [*configs, (key, value)], who)
    if not before.allowed:
        assert not after.allowed
    assert [v.rule for v in after.violations] == [v.rule for v in before.violations]


@given(
    creates(),
    st.sampled_from(["orders.v1", "payments.settlements"]),
    st.lists(
        st.tuples(
            st.sampled_from(CONSTRAINED + UNRELATED),
            st.sampled_from(["SET", "DELETE", "APPEND", "SUBTRACT"]),
            config_values,
        ),
        max_size=4,
    ),
)
def test_evaluation_is_deterministic(
    create: tuple[str, int, int, list[tuple[str, str]], str],
    existing: str,
    changes: list[tuple[str, str, str]],
) -> None:
    name, partitions, rf, configs, who = create
    assert evaluate(name, partitions, rf, configs, who) == evaluate(
        name, partitions, rf, configs, who
    )
    alter = builders.resolve(
        builders.incremental_alter_configs_request(existing, changes, principal=Principal(who)),
        CLUSTER,
        frozenset(Fact),
    )
    first = POLICY.evaluate(alter, CLUSTER)
    assert all(POLICY.evaluate(alter, CLUSTER) == first for _ in range(3))
