"""The fact cache with plain objects: no broker, no event loop, the time given by the test."""

from __future__ import annotations

from kafka_policy_proxy.policy.model import ConfigMap, TopicState
from kafka_policy_proxy.proxy.cluster.fact_cache import (
    ALL_TOPICS,
    BROKER_DEFAULTS,
    PRUNE_MIN,
    FactCache,
    Hit,
    Key,
    id_key,
    name_key,
)

ORDERS_ID, PAYMENTS_ID = (
    "6b1b8f0e-6a4e-4d6b-9a59-0d1f2f9b7c11",
    "0d4c2e5a-1f3b-4a6c-8d9e-2b7f1a3c5e70",
)
ORDERS = TopicState("orders", ORDERS_ID, partitions=1, replication_factor=1)
PAYMENTS = TopicState("payments", PAYMENTS_ID, partitions=3, replication_factor=1)
DEFAULTS = ConfigMap({"retention.ms": "604800000"})


def filled(ttl_s: float = 10.0) -> FactCache[str]:
    """A cache holding both topics by name and by id, the listing and the defaults, at t=0."""
    cache: FactCache[str] = FactCache(ttl_s)
    values: dict[Key, object] = {
        name_key("orders"): ORDERS,
        id_key(ORDERS_ID): ORDERS,
        name_key("payments"): PAYMENTS,
        id_key(PAYMENTS_ID): PAYMENTS,
        ALL_TOPICS: ((ORDERS, PAYMENTS), 1),
        BROKER_DEFAULTS: DEFAULTS,
    }
    assert cache.fill(values, 0.0, cache.generation)
    return cache


def held(cache: FactCache[str], now: float = 1.0) -> set[Key]:
    """The keys with a fresh entry at `now`."""
    keys = [name_key("orders"), id_key(ORDERS_ID), name_key("payments"), id_key(PAYMENTS_ID)]
    return {k for k in [*keys, ALL_TOPICS, BROKER_DEFAULTS] if cache.cached(k, now) is not None}


def test_an_entry_is_served_until_its_ttl_runs_out() -> None:
    cache = filled(ttl_s=10.0)
    assert cache.cached(name_key("orders"), 9.9) == Hit(ORDERS)
    assert cache.cached(name_key("orders"), 10.0) is None
    assert cache.cached(name_key("nothing"), 0.0) is None


def test_a_read_that_started_before_an_invalidation_stores_nothing() -> None:
    cache: FactCache[str] = FactCache(10.0)
    started = cache.generation
    cache.invalidate("orders")
    assert not cache.fill({name_key("orders"): ORDERS}, 0.0, started)
    assert cache.cached(name_key("orders"), 0.0) is None
    assert cache.fill({name_key("orders"): ORDERS}, 0.0, cache.generation)


def test_invalidating_a_topic_drops_it_by_name_and_by_id_and_the_listing() -> None:
    cache = filled()
    cache.invalidate("orders")
    assert held(cache) == {name_key("payments"), id_key(PAYMENTS_ID), BROKER_DEFAULTS}


def test_a_changed_topic_is_held_as_changed_and_the_listing_stays() -> None:
    cache = filled()
    changed = TopicState("orders", ORDERS_ID, 1, 1, configs=ConfigMap({"retention.ms": "5"}))
    cache.changed(changed, 5.0)
    assert cache.cached(name_key("orders"), 14.0) == Hit(changed)
    # The id entry held the old state: it is dropped, not served stale.
    assert cache.cached(id_key(ORDERS_ID), 1.0) is None
    assert cache.cached(ALL_TOPICS, 1.0) is not None


def test_a_deleted_topic_is_known_absent_by_name_and_by_id() -> None:
    cache = filled()
    cache.deleted("orders", ORDERS_ID, 0.0)
    assert cache.cached(name_key("orders"), 1.0) == Hit(None)
    assert cache.cached(id_key(ORDERS_ID), 1.0) == Hit(None)
    assert cache.cached(ALL_TOPICS, 1.0) is None
    assert cache.cached(name_key("payments"), 1.0) == Hit(PAYMENTS)


def test_forgetting_an_id_drops_that_id_only() -> None:
    cache = filled()
    cache.forget_ids([ORDERS_ID])
    assert held(cache) == {
        name_key("orders"),
        name_key("payments"),
        id_key(PAYMENTS_ID),
        ALL_TOPICS,
        BROKER_DEFAULTS,
    }


def test_a_broker_config_change_drops_every_config_but_keeps_what_is_known_absent() -> None:
    cache = filled()
    cache.deleted("gone", None, 0.0)
    cache.forget_configs()
    assert held(cache) == set()
    assert cache.cached(name_key("gone"), 1.0) == Hit(None)


def test_an_invalidation_stops_callers_joining_the_reads_in_flight_it_concerns() -> None:
    cache = filled()
    cache.began([name_key("orders"), name_key("payments")], "by-name")
    cache.began([id_key(PAYMENTS_ID)], "by-id")
    cache.began([BROKER_DEFAULTS], "defaults")
    cache.invalidate("orders")
    # An id read may resolve to the changed topic; another topic's read by name may not.
    assert cache.reading(name_key("orders")) is None
    assert cache.reading(id_key(PAYMENTS_ID)) is None
    assert cache.reading(name_key("payments")) == "by-name"
    assert cache.reading(BROKER_DEFAULTS) == "defaults"
    cache.forget_configs()
    assert cache.reading(name_key("payments")) is None
    assert cache.reading(BROKER_DEFAULTS) is None


def test_a_read_that_ended_leaves_a_newer_read_of_the_same_key_joinable() -> None:
    cache: FactCache[str] = FactCache(10.0)
    cache.began([name_key("orders")], "first")
    assert cache.reading(name_key("orders")) == "first"
    cache.invalidate("orders")
    cache.began([name_key("orders")], "second")
    cache.ended([name_key("orders")], "first")
    assert cache.reading(name_key("orders")) == "second"
    cache.ended([name_key("orders")], "second")
    assert cache.reading(name_key("orders")) is None


def test_expired_entries_are_dropped_whenever_the_cache_has_doubled() -> None:
    cache: FactCache[str] = FactCache(1.0)
    cache.fill({name_key(f"t{i}"): None for i in range(PRUNE_MIN)}, 0.0, cache.generation)
    cache.fill({name_key("later"): None}, 2.0, cache.generation)
    assert len(cache) == 1  # everything from t=0 had expired
    assert cache.cached(name_key("later"), 2.5) == Hit(None)


def test_a_cache_of_fresh_entries_is_pruned_again_only_at_twice_its_size() -> None:
    cache: FactCache[str] = FactCache(1.0)
    cache.fill({name_key(f"t{i}"): None for i in range(PRUNE_MIN)}, 0.0, cache.generation)
    cache.fill({name_key("fresh"): None}, 0.5, cache.generation)
    assert len(cache) == PRUNE_MIN + 1  # nothing had expired at 0.5
    cache.fill({name_key("later"): None}, 2.0, cache.generation)
    assert len(cache) == PRUNE_MIN + 2


def test_a_caller_that_needs_facts_read_after_a_mark_takes_only_those() -> None:
    cache: FactCache[str] = FactCache(10.0)
    cache.fill({name_key("orders"): ORDERS}, 0.0, cache.generation, started=5)
    assert cache.cached(name_key("orders"), 1.0, since=4) == Hit(ORDERS)
    assert cache.cached(name_key("orders"), 1.0, since=5) is None
    assert cache.cached(name_key("orders"), 1.0) == Hit(ORDERS)
    cache.began([name_key("payments")], "read", started=7)
    assert cache.reading(name_key("payments"), since=6) == "read"
    assert cache.reading(name_key("payments"), since=7) is None


def test_what_the_proxy_stored_itself_is_never_fresh() -> None:
    cache = filled()
    changed = TopicState("orders", ORDERS_ID, 1, 1, configs=ConfigMap({"retention.ms": "5"}))
    cache.changed(changed, 5.0)
    cache.deleted("payments", PAYMENTS_ID, 5.0)
    assert cache.cached(name_key("orders"), 6.0) == Hit(changed)
    assert cache.cached(name_key("orders"), 6.0, since=0) is None
    assert cache.cached(id_key(PAYMENTS_ID), 6.0, since=0) is None


def test_an_unknown_id_is_kept_briefly_and_dropped_by_any_forwarded_change() -> None:
    cache: FactCache[str] = FactCache(10.0, unknown_ttl_s=2.0)
    unknown = "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d"
    cache.fill({id_key(unknown): None, name_key("nothing"): None}, 0.0, cache.generation)
    assert cache.unknown_id(unknown, 1.9)
    assert not cache.unknown_id(unknown, 2.0)
    assert cache.cached(name_key("nothing"), 9.0) == Hit(None)  # names keep the full ttl
    cache.fill({id_key(unknown): None}, 3.0, cache.generation)
    cache.invalidate("created.by.this.proxy")
    assert not cache.unknown_id(unknown, 3.5)


def test_a_change_drops_the_topic_wherever_it_was_stored_and_after_it_was_restored() -> None:
    # The entries a change drops are found through indexes kept as entries come and go.
    cache = filled()
    renamed = TopicState("orders-v2", ORDERS_ID, partitions=1, replication_factor=1)
    cache.fill({id_key(ORDERS_ID): renamed}, 0.0, cache.generation)  # the id now names another
    cache.deleted(None, ORDERS_ID, 0.0)  # by id: whatever holds that id goes
    assert cache.cached(id_key(ORDERS_ID), 1.0) == Hit(None)
    assert cache.cached(name_key("orders"), 1.0) is None
    cache.fill({id_key(ORDERS_ID): ORDERS, name_key("orders"): ORDERS}, 1.0, cache.generation)
    cache.invalidate("orders")
    assert held(cache, 2.0) == {name_key("payments"), id_key(PAYMENTS_ID), BROKER_DEFAULTS}
