"""Find and rewrite the broker addresses carried by responses, so clients only see the proxy."""

from __future__ import annotations

import dataclasses
import importlib
import io
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

from kio.serial import entity_reader, entity_writer
from kio.serial.errors import SerialError
from kio.serial.readers import compact_array_reader, legacy_array_reader
from kio.serial.writers import compact_array_writer, legacy_array_writer

from kafka_policy_proxy.codec.errors import CodecError
from kafka_policy_proxy.codec.registry import decode_exact, encode, is_flexible, response_class

METADATA = 3
FIND_COORDINATOR = 10
DESCRIBE_CLUSTER = 60
SHARE_FETCH = 78
SHARE_ACKNOWLEDGE = 79
# Responses that name brokers by host and port. Produce v10+ and Fetch v16+ carry KIP-951
# endpoints too; the proxy caps those APIs below them instead (see codec/api_versions.py).
ADDRESS_APIS = frozenset(
    {METADATA, FIND_COORDINATOR, DESCRIBE_CLUSTER, SHARE_FETCH, SHARE_ACKNOWLEDGE}
)

Endpoint = Callable[[int], tuple[str, int]]


@dataclass(frozen=True, slots=True)
class BrokerAddresses:
    """The broker addresses found in one response, and how to re-render it with others."""

    nodes: dict[int, tuple[str, int]]
    _render: Callable[[Endpoint], bytes]

    def rewrite(self, endpoint: Endpoint) -> bytes:
        """Return the response body with every broker address replaced by endpoint(node_id)."""
        return self._render(endpoint)


def find_addresses(api_key: int, api_version: int, body: bytes) -> BrokerAddresses | None:
    """Return the broker addresses in a response body, or None if this API carries none."""
    if api_key == METADATA:
        return _metadata(api_version, body)
    if api_key not in ADDRESS_APIS:
        return None
    response = decode_exact(response_class(api_key, api_version), body)
    if api_key == FIND_COORDINATOR:
        return _find_coordinator(response)
    if api_key == DESCRIBE_CLUSTER:
        return _node_list(response, "brokers", "broker_id")
    return _node_list(response, "node_endpoints", "node_id")


@cache
def _metadata_broker_codec(api_version: int) -> tuple[Any, Any]:
    cls = response_class(METADATA, api_version)
    broker_cls = importlib.import_module(cls.__module__).MetadataResponseBroker
    if is_flexible(METADATA, api_version):
        return (
            compact_array_reader(entity_reader(broker_cls)),
            compact_array_writer(entity_writer(broker_cls)),
        )
    return (
        legacy_array_reader(entity_reader(broker_cls)),
        legacy_array_writer(entity_writer(broker_cls)),
    )


def _metadata(api_version: int, body: bytes) -> BrokerAddresses:
    # Only the brokers array is decoded; the (possibly large) topic list is spliced back as is.
    reader, writer = _metadata_broker_codec(api_version)
    start = 4 if api_version >= 3 else 0
    try:
        brokers, size = reader(body, start)
    except (SerialError, ValueError, UnicodeDecodeError) as exc:
        raise CodecError(METADATA, api_version, f"brokers: {type(exc).__name__}: {exc}") from exc
    end = start + size
    if end > len(body):
        raise CodecError(METADATA, api_version, "brokers array runs past the end of the frame")
    brokers = brokers or ()
    nodes = {int(b.node_id): (b.host, int(b.port)) for b in brokers}

    def render(endpoint: Endpoint) -> bytes:
        out = io.BytesIO()
        writer(out, tuple(_moved(b, endpoint(int(b.node_id))) for b in brokers))
        # One copy of the topics, however many (a view until the join).
        with memoryview(body) as view:
            return b"".join((view[:start], out.getbuffer(), view[end:]))

    return BrokerAddresses(nodes, render)


def _moved(entity: Any, address: tuple[str, int]) -> Any:
    host, port = address
    return dataclasses.replace(entity, host=host, port=type(entity.port)(port))


def _find_coordinator(response: Any) -> BrokerAddresses:
    if hasattr(response, "coordinators"):
        found = [c for c in response.coordinators if c.node_id >= 0]
        nodes = {int(c.node_id): (c.host, int(c.port)) for c in found}

        def render_v4(endpoint: Endpoint) -> bytes:
            coordinators = tuple(
                _moved(c, endpoint(int(c.node_id))) if c.node_id >= 0 else c
                for c in response.coordinators
            )
            return encode(dataclasses.replace(response, coordinators=coordinators))

        return BrokerAddresses(nodes, render_v4)

    if response.node_id < 0:
        return BrokerAddresses({}, lambda _endpoint: encode(response))

    def render_v0(endpoint: Endpoint) -> bytes:
        return encode(_moved(response, endpoint(int(response.node_id))))

    return BrokerAddresses({int(response.node_id): (response.host, int(response.port))}, render_v0)


def _node_list(response: Any, field: str, id_field: str) -> BrokerAddresses:
    entries = getattr(response, field)
    nodes = {int(getattr(e, id_field)): (e.host, int(e.port)) for e in entries}

    def render(endpoint: Endpoint) -> bytes:
        moved = tuple(_moved(e, endpoint(int(getattr(e, id_field)))) for e in entries)
        return encode(dataclasses.replace(response, **{field: moved}))

    return BrokerAddresses(nodes, render)
