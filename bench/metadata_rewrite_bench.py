"""Metadata address rewrite for 100 topics x 10 partitions: splice vs full re-encode.

Usage: python -m bench.metadata_rewrite_bench [--runs N]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import timeit

from harness.messages import metadata_response
from kafka_policy_proxy.codec.addresses import find_addresses
from kafka_policy_proxy.codec.registry import decode_exact, encode, response_class

VERSION = 12


def endpoint(node: int) -> tuple[str, int]:
    """The proxy address of a node."""
    return "proxy.local", 9200 + node


def main() -> None:
    """Time both ways of rewriting and print a Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    body = encode(metadata_response(VERSION, topics=100, partitions=10))
    cls = response_class(3, VERSION)

    def splice() -> bytes:
        found = find_addresses(3, VERSION, body)
        assert found is not None
        return found.rewrite(endpoint)

    def full() -> bytes:
        response = decode_exact(cls, body)
        brokers = tuple(
            dataclasses.replace(b, host="proxy.local", port=9200 + b.node_id)
            for b in response.brokers
        )
        return encode(dataclasses.replace(response, brokers=brokers))

    assert splice() == full()
    rows = []
    for name, fn, number in (
        ("splice (what the proxy does)", splice, 2000),
        ("full decode + re-encode", full, 50),
    ):
        runs = [timeit.timeit(fn, number=number) / number * 1e6 for _ in range(args.runs)]
        rows.append((name, statistics.median(runs)))
    print(f"Metadata v{VERSION} response, 100 topics x 10 partitions, {len(body):,} bytes")
    print("| rewrite | median per response |")
    print("|---|---|")
    for name, micros in rows:
        print(f"| {name} | {micros:,.1f} µs |")


if __name__ == "__main__":
    main()
