"""Every broker address in Metadata, FindCoordinator, DescribeCluster and share responses moves."""

import dataclasses
import importlib
from typing import Any

import pytest

from harness.messages import build, metadata_response
from kafka_policy_proxy.codec.addresses import find_addresses
from kafka_policy_proxy.codec.registry import decode_exact, encode, response_class


def _module(api_key: int, version: int) -> Any:
    return importlib.import_module(response_class(api_key, version).__module__)


def _proxy(node: int) -> tuple[str, int]:
    return "proxy.local", 9200 + node


@pytest.mark.parametrize("version", range(4, 14))
def test_metadata_splice_matches_a_full_reencode(version: int) -> None:
    response = metadata_response(version)
    found = find_addresses(3, version, encode(response))
    assert found is not None
    assert found.nodes == {n: (f"broker-{n}.internal", 9092) for n in (1, 2, 3)}
    rewritten = decode_exact(response_class(3, version), found.rewrite(_proxy))
    assert [(b.node_id, b.host, b.port) for b in rewritten.brokers] == [
        (n, "proxy.local", 9200 + n) for n in (1, 2, 3)
    ]
    moved = tuple(
        dataclasses.replace(b, host="proxy.local", port=9200 + b.node_id) for b in response.brokers
    )
    assert rewritten == dataclasses.replace(response, brokers=moved)


@pytest.mark.parametrize("version", range(0, 7))
def test_find_coordinator_every_version(version: int) -> None:
    m = _module(10, version)
    if hasattr(m, "Coordinator"):
        coordinators = (
            build(
                m.Coordinator,
                key="g1",
                node_id=2,
                host="broker-2.internal",
                port=9092,
                error_code=0,
                error_message=None,
            ),
            build(
                m.Coordinator,
                key="g2",
                node_id=-1,
                host="",
                port=-1,
                error_code=15,
                error_message="not available",
            ),
        )
        response = build(m.FindCoordinatorResponse, throttle_time=0, coordinators=coordinators)
    else:
        response = build(
            m.FindCoordinatorResponse,
            throttle_time=0,
            error_code=0,
            error_message=None,
            node_id=2,
            host="broker-2.internal",
            port=9092,
        )
    found = find_addresses(10, version, encode(response))
    assert found is not None and found.nodes == {2: ("broker-2.internal", 9092)}
    out = decode_exact(response_class(10, version), found.rewrite(_proxy))
    entries = out.coordinators if hasattr(m, "Coordinator") else (out,)
    assert (entries[0].host, entries[0].port) == ("proxy.local", 9202)
    # The coordinator that was not found keeps its empty address.
    assert all("internal" not in e.host for e in entries)


@pytest.mark.parametrize("version", range(0, 3))
def test_describe_cluster(version: int) -> None:
    m = _module(60, version)
    brokers = tuple(
        build(
            m.DescribeClusterBroker,
            broker_id=n,
            host=f"10.0.0.{n}",
            port=9092,
            rack=None,
            is_fenced=False,
        )
        for n in (1, 2)
    )
    response = build(
        m.DescribeClusterResponse,
        throttle_time=0,
        error_code=0,
        error_message=None,
        endpoint_type=1,
        cluster_id="c",
        controller_id=1,
        brokers=brokers,
        cluster_authorized_operations=0,
    )
    found = find_addresses(60, version, encode(response))
    assert found is not None and set(found.nodes) == {1, 2}
    out = decode_exact(response_class(60, version), found.rewrite(_proxy))
    assert [(b.host, b.port) for b in out.brokers] == [("proxy.local", 9201), ("proxy.local", 9202)]


@pytest.mark.parametrize(
    ("api_key", "name"), [(78, "ShareFetchResponse"), (79, "ShareAcknowledgeResponse")]
)
def test_share_api_node_endpoints(api_key: int, name: str) -> None:
    m = _module(api_key, 1)
    endpoints = (build(m.NodeEndpoint, node_id=3, host="broker-3.internal", port=9092),)
    response = build(
        getattr(m, name),
        throttle_time=0,
        error_code=0,
        error_message=None,
        acquisition_lock_timeout=0,
        responses=(),
        node_endpoints=endpoints,
    )
    found = find_addresses(api_key, 1, encode(response))
    assert found is not None and found.nodes == {3: ("broker-3.internal", 9092)}
    out = decode_exact(response_class(api_key, 1), found.rewrite(_proxy))
    assert [(e.host, e.port) for e in out.node_endpoints] == [("proxy.local", 9203)]


def test_apis_without_addresses_are_left_alone() -> None:
    assert find_addresses(19, 7, b"whatever") is None
