"""Every API key kio knows is classified; nothing unclassified is advertised or accepted."""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from kio.schema.index import api_key_map

from harness.messages import build
from kafka_policy_proxy.codec import api_versions
from kafka_policy_proxy.codec.api_classes import (
    API_CLASSES,
    CLUSTER_MUTATIONS,
    ApiClass,
    api_class,
    markdown_table,
)
from kafka_policy_proxy.codec.api_versions import cap_response, proxy_range, supports
from kafka_policy_proxy.codec.errors import api_name
from kafka_policy_proxy.codec.guarded import GUARDED_API_KEYS
from kafka_policy_proxy.codec.registry import decode_exact, encode, known_versions, response_class

SECURITY_DOC = Path(__file__).resolve().parents[3] / "docs" / "security.md"


def test_every_key_kio_knows_is_classified_under_its_own_name() -> None:
    assert set(api_key_map) == set(API_CLASSES)
    for key, entry in API_CLASSES.items():
        assert entry.name == api_name(key)


def test_topic_mutations_are_exactly_the_guarded_apis_metadata_and_streams() -> None:
    topic = {k for k, e in API_CLASSES.items() if e.api_class is ApiClass.TOPIC_MUTATION}
    # Metadata can auto-create; a StreamsGroupHeartbeat's topology makes the broker create.
    assert topic == GUARDED_API_KEYS | {3, 88}


@pytest.mark.parametrize(
    "name",
    [
        "CreateAcls",
        "DeleteAcls",
        "AlterUserScramCredentials",
        "AlterClientQuotas",
        "ElectLeaders",
        "AlterReplicaLogDirs",
        "UpdateFeatures",
        "UnregisterBroker",
        "CreateDelegationToken",
        "RenewDelegationToken",
        "ExpireDelegationToken",
        "AlterPartition",
        "Envelope",
        "WriteTxnMarkers",
        "AddRaftVoter",
        "WriteShareGroupState",
    ],
)
def test_cluster_and_security_mutations_are_judged(name: str) -> None:
    (key,) = [k for k, e in API_CLASSES.items() if e.name == name]
    assert key in CLUSTER_MUTATIONS


def test_an_unclassified_key_is_never_supported(monkeypatch: pytest.MonkeyPatch) -> None:
    known = known_versions(51)
    assert known is not None and supports(51, known[0])
    monkeypatch.setattr(api_versions, "api_class", lambda key: None)
    assert api_versions.proxy_range(51) is None
    assert not api_versions.supports(51, known[0])


@pytest.fixture
def fresh_caps() -> Iterator[None]:
    """The capped answers are cached per broker answer; these tests change the classification."""
    api_versions._capped.cache_clear()
    yield
    api_versions._capped.cache_clear()


@pytest.mark.usefixtures("fresh_caps")
def test_unknown_and_unclassified_keys_are_not_advertised(monkeypatch: pytest.MonkeyPatch) -> None:
    m = importlib.import_module(response_class(18, 3).__module__)
    keys = tuple(
        build(m.ApiVersion, api_key=k, min_version=0, max_version=20) for k in (30, 51, 9999)
    )
    body = encode(
        build(
            m.ApiVersionsResponse,
            error_code=0,
            api_keys=keys,
            throttle_time=0,
            supported_features=(),
            finalized_features_epoch=-1,
            finalized_features=(),
            zk_migration_ready=False,
        )
    )

    def advertised() -> set[int]:
        out = decode_exact(response_class(18, 3), cap_response(body, 3))
        return {int(e.api_key) for e in out.api_keys}

    assert advertised() == {30, 51}
    assert advertised() == {30, 51}  # the second time from the cache
    monkeypatch.setattr(
        api_versions, "api_class", lambda key: None if key == 51 else api_class(key)
    )
    api_versions._capped.cache_clear()
    assert advertised() == {30}


def test_elect_leaders_v0_is_not_offered() -> None:
    assert proxy_range(43) == (1, 2)


def test_the_security_doc_shows_the_current_table() -> None:
    text = SECURITY_DOC.read_text()
    match = re.search(r"<!-- api-table -->\n(.*?)\n<!-- /api-table -->", text, re.DOTALL)
    assert match is not None, "docs/security.md has no <!-- api-table --> section"
    assert match.group(1) == markdown_table(), (
        "docs/security.md's API table is out of date: paste codec.api_classes.markdown_table()"
    )
