"""What codec/kio_introspect.py relies on in kio's private introspection, on known schema fields.

A kio upgrade that changes any of it fails here first, naming the kio version, rather than as
a wrong pre-scan or strategy somewhere else.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
import sys
from typing import Any

import pytest
from kio.schema.api_versions.v3.response import ApiVersionsResponse, SupportedFeatureKey
from kio.schema.describe_topic_partitions.v0.response import (
    Cursor,
    DescribeTopicPartitionsResponse,
)
from kio.schema.metadata.v12.response import MetadataResponsePartition
from kio.schema.types import BrokerId

from kafka_policy_proxy.codec.kio_introspect import (
    KIO_VERSION,
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    is_optional,
)

BROKEN = f"kio {KIO_VERSION} changed what codec/kio_introspect.py relies on (written for 0.6.5)"


def field(cls: type[Any], name: str) -> dataclasses.Field[Any]:
    """The dataclass field `name` of a kio entity."""
    return next(f for f in dataclasses.fields(cls) if f.name == name)


def test_an_array_of_entities_is_classified_with_its_element_class() -> None:
    kind = classify_field(field(ApiVersionsResponse, "supported_features"))
    assert isinstance(kind, EntityTupleField), f"{BROKEN}: entity array is {kind!r}"
    assert kind.type_ is SupportedFeatureKey, f"{BROKEN}: element class is {kind.type_!r}"
    assert kind.is_array, f"{BROKEN}: EntityTupleField.is_array is false"


def test_a_nullable_entity_is_classified_as_one_entity() -> None:
    cursor = field(DescribeTopicPartitionsResponse, "next_cursor")
    kind = classify_field(cursor)
    assert isinstance(kind, EntityField), f"{BROKEN}: nullable entity is {kind!r}"
    assert kind.type_ is Cursor, f"{BROKEN}: entity class is {kind.type_!r}"
    assert not kind.is_array, f"{BROKEN}: EntityField.is_array is true"
    assert is_optional(cursor), f"{BROKEN}: is_optional misses a nullable entity"


def test_an_array_of_primitives_keeps_its_kafka_type() -> None:
    replicas = field(MetadataResponsePartition, "replica_nodes")
    kind = classify_field(replicas)
    assert isinstance(kind, PrimitiveTupleField), f"{BROKEN}: primitive array is {kind!r}"
    assert kind.type_ is BrokerId, f"{BROKEN}: element type is {kind.type_!r}"
    assert kind.is_array, f"{BROKEN}: PrimitiveTupleField.is_array is false"
    assert not is_optional(replicas), f"{BROKEN}: is_optional on a non-nullable array"
    # The pre-scan reads the wire type from the field's metadata.
    assert replicas.metadata.get("kafka_type") == "int32", f"{BROKEN}: kafka_type metadata"


def test_a_plain_field_is_neither_array_nor_entity() -> None:
    kind = classify_field(field(MetadataResponsePartition, "partition_index"))
    assert not isinstance(kind, EntityField | EntityTupleField | PrimitiveTupleField), (
        f"{BROKEN}: a plain int32 is {kind!r}"
    )
    assert not kind.is_array, f"{BROKEN}: a plain field's is_array is true"


def test_tags_are_read_from_tagged_fields_only() -> None:
    assert get_field_tag(field(ApiVersionsResponse, "supported_features")) == 0, BROKEN
    assert get_field_tag(field(ApiVersionsResponse, "finalized_features_epoch")) == 1, BROKEN
    assert get_field_tag(field(ApiVersionsResponse, "api_keys")) is None, BROKEN


def test_a_kio_without_the_private_module_fails_on_import_naming_the_version(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "kio.serial._introspect", None)  # as if kio dropped it
    # A fresh import of the adapter; monkeypatch puts the loaded one back afterwards.
    monkeypatch.delitem(sys.modules, "kafka_policy_proxy.codec.kio_introspect")
    with pytest.raises(ImportError, match=rf"kio {re.escape(KIO_VERSION)} no longer provides"):
        importlib.import_module("kafka_policy_proxy.codec.kio_introspect")
    # The failed import left nothing behind.
    assert "kafka_policy_proxy.codec.kio_introspect" not in sys.modules
