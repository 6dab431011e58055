"""Denial answers for admin APIs: every entry of every version the proxy negotiates."""

from __future__ import annotations

import importlib
import typing
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from harness.messages import build
from kafka_policy_proxy.codec.admin_denials import ANSWERABLE, denial_response, filled
from kafka_policy_proxy.codec.api_classes import CLUSTER_MUTATIONS
from kafka_policy_proxy.codec.api_versions import proxy_range
from kafka_policy_proxy.codec.errors import CodecError
from kafka_policy_proxy.codec.registry import decode_exact, encode, request_class, response_class

# As the filter sends it: the decision id last, kept whole in every entry that has a message.
MESSAGE = (
    "[admin-apis] User:ANONYMOUS may not call it (decision 01a2250d-eadb-7423-9209-069dabfc4ec4)"
)


def _versions(key: int) -> list[int]:
    span = proxy_range(key)
    assert span is not None
    return list(range(span[0], span[1] + 1))


def _module(key: int, version: int, response: bool = False) -> Any:
    cls = response_class(key, version) if response else request_class(key, version)
    return importlib.import_module(cls.__module__)


def _answer(key: int, version: int, request: Any) -> Any:
    body = denial_response(key, version, encode(request), MESSAGE)
    assert body is not None
    return decode_exact(response_class(key, version), body)


def _has_message(entry: Any) -> bool:
    return "error_message" in type(entry).__dataclass_fields__


def test_answerable_apis_are_cluster_mutations() -> None:
    assert ANSWERABLE <= CLUSTER_MUTATIONS


@pytest.mark.parametrize("version", _versions(30))
def test_create_acls_one_result_per_creation(version: int) -> None:
    m = _module(30, version)
    fields: dict[str, Any] = dict(
        resource_type=2, resource_name="t", resource_pattern_type=3, principal="User:x"
    )
    creation = build(m.AclCreation, **fields, host="*", operation=2, permission_type=3)
    answer = _answer(30, version, build(m.CreateAclsRequest, creations=(creation,) * 3))
    assert [r.error_code.value for r in answer.results] == [31, 31, 31]
    assert all(r.error_message == MESSAGE for r in answer.results)


@pytest.mark.parametrize("version", _versions(31))
def test_delete_acls_one_result_per_filter(version: int) -> None:
    m = _module(31, version)
    acl_filter = build(
        m.DeleteAclsFilter,
        resource_type_filter=1,
        resource_name_filter=None,
        pattern_type_filter=1,
        principal_filter=None,
        host_filter=None,
        operation=1,
        permission_type=1,
    )
    answer = _answer(31, version, build(m.DeleteAclsRequest, filters=(acl_filter,) * 2))
    assert [(r.error_code.value, r.matching_acls) for r in answer.filter_results] == [(31, ())] * 2


@pytest.mark.parametrize("version", _versions(51))
def test_alter_scram_one_result_per_user(version: int) -> None:
    m = _module(51, version)
    up = build(
        m.ScramCredentialUpsertion,
        name="admin",
        mechanism=1,
        iterations=4096,
        salt=b"s",
        salted_password=b"p",
    )
    gone = build(m.ScramCredentialDeletion, name="bob", mechanism=2)
    request = build(m.AlterUserScramCredentialsRequest, deletions=(gone,), upsertions=(up, up))
    answer = _answer(51, version, request)
    assert [(r.user, r.error_code.value) for r in answer.results] == [("bob", 31), ("admin", 31)]
    assert all(r.error_message == MESSAGE for r in answer.results)


@pytest.mark.parametrize("version", _versions(43))
def test_elect_leaders_top_level_and_per_partition(version: int) -> None:
    m = _module(43, version)
    topics = (build(m.TopicPartitions, topic="a", partitions=(0, 2)),)
    request = build(m.ElectLeadersRequest, election_type=0, topic_partitions=topics, timeout=30_000)
    answer = _answer(43, version, request)
    assert answer.error_code.value == 31
    (result,) = answer.replica_election_results
    assert [(p.partition_id, p.error_code.value) for p in result.partition_result] == [
        (0, 31),
        (2, 31),
    ]
    everything = build(
        m.ElectLeadersRequest, election_type=0, topic_partitions=None, timeout=30_000
    )
    assert _answer(43, version, everything).error_code.value == 31


@pytest.mark.parametrize("version", _versions(49))
def test_alter_client_quotas_one_result_per_entity(version: int) -> None:
    m = _module(49, version)
    entity = build(m.EntityData, entity_type="user", entity_name="alice")
    op = build(m.OpData, key="producer_byte_rate", value=1.0, remove=False)
    entry = build(m.EntryData, entity=(entity,), ops=(op,))
    answer = _answer(
        49, version, build(m.AlterClientQuotasRequest, entries=(entry,), validate_only=False)
    )
    ((result),) = answer.entries
    assert result.error_code.value == 31 and result.entity[0].entity_name == "alice"


@pytest.mark.parametrize("version", _versions(34))
def test_alter_replica_log_dirs_per_partition(version: int) -> None:
    m = _module(34, version)
    topic = build(m.AlterReplicaLogDirTopic, name="a", partitions=(1, 3))
    request = build(
        m.AlterReplicaLogDirsRequest,
        dirs=(build(m.AlterReplicaLogDir, path="/d", topics=(topic,)),),
    )
    (result,) = _answer(34, version, request).results
    assert [(p.partition_index, p.error_code.value) for p in result.partitions] == [
        (1, 31),
        (3, 31),
    ]


@pytest.mark.parametrize(
    ("key", "version"),
    [(k, v) for k in (38, 39, 40, 57, 64, 80, 81) for v in _versions(k)],
)
def test_top_level_error_everywhere_else(key: int, version: int) -> None:
    request = filled(request_class(key, version), ErrorCode(0), "")
    answer = _answer(key, version, request)
    assert answer.error_code.value == 31
    if _has_message(answer):
        assert answer.error_message == MESSAGE


def test_apis_without_an_answer_are_refused() -> None:
    for key in CLUSTER_MUTATIONS - ANSWERABLE:
        assert denial_response(key, proxy_range(key)[0], b"", MESSAGE) is None  # type: ignore[index]


def test_a_trailing_byte_still_gets_its_denial() -> None:
    # librdkafka's AlterUserScramCredentials v0 ends with one byte the broker ignores.
    m = _module(51, 0)
    gone = build(m.ScramCredentialDeletion, name="bob", mechanism=2)
    request = build(m.AlterUserScramCredentialsRequest, deletions=(gone,), upsertions=())
    body = denial_response(51, 0, encode(request) + b"\x00", MESSAGE)
    assert body is not None
    (result,) = decode_exact(response_class(51, 0), body).results
    assert (result.user, result.error_code.value) == ("bob", 31)


def test_a_body_that_is_not_the_request_raises() -> None:
    with pytest.raises(CodecError, match="AlterUserScramCredentials"):
        denial_response(51, 0, b"\x05", MESSAGE)


def _has_arrays(key: int, version: int) -> bool:
    hints = typing.get_type_hints(request_class(key, version))
    return any("tuple" in str(hint) for hint in hints.values())


@pytest.mark.parametrize(
    "key",
    [k for k in sorted(ANSWERABLE) if _has_arrays(k, (proxy_range(k) or (0, 0))[1])],
)
def test_a_hostile_array_count_is_refused_not_allocated(key: int) -> None:
    # kio allocates a declared array length before reading it: a 5-byte count of ~4 billion
    # aborted the whole proxy (found by bench/fuzz.py with UpdateFeatures v1).
    span = proxy_range(key)
    assert span is not None
    version = span[1]
    flexible_count = bytes([0xFF, 0xFF, 0xFF, 0xFF, 0x0F])
    legacy_count = b"\x7f\xff\xff\xff"
    for body in (flexible_count, legacy_count, b"\x00\x00\x75\x30" + flexible_count):
        with pytest.raises(CodecError):
            denial_response(key, version, body + b"\x00" * 8, "denied")
