"""Denial responses for cluster and security mutation APIs, built with kio's response classes.

Each answer mirrors the request's entries (one result per ACL creation, per SCRAM user, per
quota entity, per partition), each carrying the error code and, where the version has one,
the message. An API without a builder here is refused (the connection closed) when denied.
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib
import typing
from collections.abc import Callable
from types import ModuleType
from typing import Any

from kio.schema.errors import ErrorCode

from kafka_policy_proxy.codec.prescan import decode_untrusted
from kafka_policy_proxy.codec.registry import encode, request_class, response_class

CLUSTER_AUTHORIZATION_FAILED = ErrorCode(31)
_EPOCH = datetime.datetime.fromtimestamp(0, datetime.UTC)


_hint_cache: dict[type[Any], dict[str, Any]] = {}


def _hints(cls: type[Any]) -> dict[str, Any]:
    hints = _hint_cache.get(cls)
    if hints is None:
        hints = _hint_cache[cls] = typing.get_type_hints(cls)
    return hints


def filled(cls: type[Any], error: ErrorCode, message: str, **given: Any) -> Any:
    """An instance of a kio entity: `given`, the error, and zero values for everything else."""
    hints = _hints(cls)
    values: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        name, hint = field.name, hints[field.name]
        if name in given:
            values[name] = given[name]
        elif name == "error_code":
            values[name] = error
        elif name == "error_message":
            values[name] = message
        elif field.default is not dataclasses.MISSING:
            values[name] = field.default
        elif type(None) in typing.get_args(hint):
            values[name] = None
        elif hint is str:
            values[name] = ""
        elif hint is bytes:
            values[name] = b""
        elif typing.get_origin(hint) is tuple:
            values[name] = ()
        elif isinstance(hint, type) and issubclass(hint, datetime.timedelta):
            values[name] = datetime.timedelta(0)
        elif isinstance(hint, type) and issubclass(hint, datetime.datetime):
            values[name] = _EPOCH
        elif isinstance(hint, type) and dataclasses.is_dataclass(hint):
            values[name] = filled(hint, error, message)
        else:
            values[name] = hint(0)
    return cls(**values)


Build = Callable[[ModuleType, Any, ErrorCode, str], Any]


def _create_acls(m: ModuleType, request: Any, error: ErrorCode, message: str) -> Any:
    results = tuple(filled(m.AclCreationResult, error, message) for _ in request.creations)
    return filled(m.CreateAclsResponse, error, message, results=results)


def _delete_acls(m: ModuleType, request: Any, error: ErrorCode, message: str) -> Any:
    results = tuple(filled(m.DeleteAclsFilterResult, error, message) for _ in request.filters)
    return filled(m.DeleteAclsResponse, error, message, filter_results=results)


def _alter_replica_log_dirs(m: ModuleType, request: Any, error: ErrorCode, message: str) -> Any:
    results = tuple(
        m.AlterReplicaLogDirTopicResult(
            topic_name=topic.name,
            partitions=tuple(
                m.AlterReplicaLogDirPartitionResult(partition_index=p, error_code=error)
                for p in topic.partitions
            ),
        )
        for log_dir in request.dirs
        for topic in log_dir.topics
    )
    return filled(m.AlterReplicaLogDirsResponse, error, message, results=results)


def _elect_leaders(m: ModuleType, request: Any, error: ErrorCode, message: str) -> Any:
    results = tuple(
        m.ReplicaElectionResult(
            topic=topic.topic,
            partition_result=tuple(
                filled(m.PartitionResult, error, message, partition_id=p) for p in topic.partitions
            ),
        )
        for topic in request.topic_partitions or ()
    )
    return filled(m.ElectLeadersResponse, error, message, replica_election_results=results)


def _alter_client_quotas(m: ModuleType, request: Any, error: ErrorCode, message: str) -> Any:
    entries = tuple(
        filled(
            m.EntryData,
            error,
            message,
            entity=tuple(
                m.EntityData(entity_type=e.entity_type, entity_name=e.entity_name)
                for e in entry.entity
            ),
        )
        for entry in request.entries
    )
    return filled(m.AlterClientQuotasResponse, error, message, entries=entries)


def _alter_user_scram(m: ModuleType, request: Any, error: ErrorCode, message: str) -> Any:
    # One result per user, as the broker answers (the client maps results by user).
    users = dict.fromkeys(c.name for c in (*request.deletions, *request.upsertions))
    results = tuple(
        filled(m.AlterUserScramCredentialsResult, error, message, user=u) for u in users
    )
    return filled(m.AlterUserScramCredentialsResponse, error, message, results=results)


def _update_features(m: ModuleType, request: Any, error: ErrorCode, message: str) -> Any:
    extra: dict[str, Any] = {}
    if hasattr(m, "UpdatableFeatureResult"):
        extra["results"] = tuple(
            filled(m.UpdatableFeatureResult, error, message, feature=f.feature)
            for f in request.feature_updates
        )
    return filled(m.UpdateFeaturesResponse, error, message, **extra)


def _top_level(name: str) -> Build:
    def build(m: ModuleType, request: Any, error: ErrorCode, message: str) -> Any:
        return filled(getattr(m, name), error, message)

    return build


_BUILDERS: dict[int, Build] = {
    30: _create_acls,
    31: _delete_acls,
    34: _alter_replica_log_dirs,
    38: _top_level("CreateDelegationTokenResponse"),
    39: _top_level("RenewDelegationTokenResponse"),
    40: _top_level("ExpireDelegationTokenResponse"),
    43: _elect_leaders,
    49: _alter_client_quotas,
    51: _alter_user_scram,
    57: _update_features,
    64: _top_level("UnregisterBrokerResponse"),
    80: _top_level("AddRaftVoterResponse"),
    81: _top_level("RemoveRaftVoterResponse"),
}
ANSWERABLE = frozenset(_BUILDERS)


def _request(cls: type[Any], body: bytes) -> Any:
    """The request, pre-scanned (kio allocates a declared array length before reading it, so a
    hostile count aborts the process) and with trailing bytes allowed: librdkafka's
    AlterUserScramCredentials v0 ends with one that brokers ignore. Safe here because a denied
    request is never forwarded."""
    return decode_untrusted(cls, body, trailing_ok=True)


def denial_response(
    api_key: int,
    api_version: int,
    body: bytes,
    message: str,
    error: ErrorCode = CLUSTER_AUTHORIZATION_FAILED,
) -> bytes | None:
    """The response body denying this request (body after the header), or None if unanswerable."""
    build = _BUILDERS.get(api_key)
    if build is None:
        return None
    request = _request(request_class(api_key, api_version), body)
    module = importlib.import_module(response_class(api_key, api_version).__module__)
    return encode(build(module, request, error, message))
