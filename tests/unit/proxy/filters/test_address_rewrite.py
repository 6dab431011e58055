"""The address filter: a client is only ever handed the proxy's listeners, never a broker's."""

from __future__ import annotations

import importlib
import inspect

from harness.messages import build
from kafka_policy_proxy.codec.registry import decode_exact, encode, response_class
from kafka_policy_proxy.proxy.filters.address_rewrite import AddressRewriteFilter
from kafka_policy_proxy.proxy.filters.api import Forward
from tests.unit.proxy.contexts import context, settle


class Listeners:
    """The server's side: proxy endpoints per node, bound on demand."""

    def __init__(self) -> None:
        self.known: dict[int, tuple[str, int]] = {}
        self.ensured: list[dict[int, tuple[str, int]]] = []

    def endpoint(self, node_id: int) -> tuple[str, int]:
        return "proxy.example", 9200 + node_id

    def ready(self, nodes: dict[int, tuple[str, int]]) -> bool:
        return all(self.known.get(n) == a for n, a in nodes.items())

    async def ensure(self, nodes: dict[int, tuple[str, int]]) -> None:
        self.ensured.append(nodes)
        self.known.update(nodes)


def metadata_response(version: int, brokers: dict[int, tuple[str, int]]) -> bytes:
    m = importlib.import_module(response_class(3, version).__module__)
    return encode(
        build(
            m.MetadataResponse,
            throttle_time=0,
            brokers=tuple(
                build(m.MetadataResponseBroker, node_id=n, host=h, port=p, rack=None)
                for n, (h, p) in brokers.items()
            ),
            cluster_id="c1",
            controller_id=1,
            topics=(),
            error_code=0,
            cluster_authorized_operations=0,
        )
    )


def addresses(version: int, body: bytes) -> dict[int, tuple[str, int]]:
    response = decode_exact(response_class(3, version), body)
    return {int(b.node_id): (b.host, int(b.port)) for b in response.brokers}


async def test_a_new_broker_gets_a_listener_before_the_client_hears_of_it() -> None:
    listeners = Listeners()
    verdict = AddressRewriteFilter(listeners).on_request(context(3, 12))
    assert isinstance(verdict, Forward) and verdict.hook is not None
    result = verdict.hook(metadata_response(12, {1: ("b1.internal", 9092)}))
    assert inspect.isawaitable(result)
    body = await settle(result)
    assert listeners.ensured == [{1: ("b1.internal", 9092)}]
    assert isinstance(body, bytes)
    assert addresses(12, body) == {1: ("proxy.example", 9201)}


async def test_known_brokers_are_rewritten_at_once() -> None:
    listeners = Listeners()
    listeners.known = {1: ("b1.internal", 9092), 2: ("b2.internal", 9092)}
    verdict = AddressRewriteFilter(listeners).on_request(context(3, 9))
    assert isinstance(verdict, Forward) and verdict.hook is not None
    body = verdict.hook(metadata_response(9, dict(listeners.known)))
    assert isinstance(body, bytes)
    assert addresses(9, body) == {1: ("proxy.example", 9201), 2: ("proxy.example", 9202)}
    assert listeners.ensured == []
