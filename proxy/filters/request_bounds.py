"""Request bounds: a guarded request's entries are counted before anything decodes them.

Decoding, pre-scanning and judging cost one object or more per entry, so a small frame of
many tiny entries (a 1 MiB DeleteTopics of a million empty names) would cost far more than
its size. This filter runs before the topic policy filter and reads the counts first
(`codec/entry_counts.py`): topics or resources per request up to
`limits.max_entries_per_request`, and array elements in all (partitions, configs, replicas
included) up to 10 times that. A request over a bound, but within 4 times it, is decoded (a
bounded cost) and every entry is answered INVALID_REQUEST, naming the limit; beyond 4 times,
no answer fits in proportion, so the connection is closed. Neither is ever forwarded.

The cluster mutation APIs whose denial answers every entry (ACLs, log dirs, leader elections,
quotas, SCRAM credentials, features: `codec/admin_denials.py`) are bounded alike, before the
admin API filter would decode them to answer a denial. A Metadata request is decoded by the
auto-create guard: one naming more topics than the element bound (consumers name many, but
not tens of thousands) closes the connection, as no answer in proportion fits.
"""

from __future__ import annotations

import structlog
from kio.schema.errors import ErrorCode

from kafka_policy_proxy.codec.admin_denials import denial_response
from kafka_policy_proxy.codec.entry_counts import top_level_count
from kafka_policy_proxy.codec.errors import api_name
from kafka_policy_proxy.codec.guarded import GUARDED_API_KEYS, Denial, guarded_api
from kafka_policy_proxy.codec.prescan import count_elements
from kafka_policy_proxy.codec.registry import request_class
from kafka_policy_proxy.proxy.filters.api import (
    Answer,
    Close,
    Filter,
    Forward,
    RequestContext,
    Verdict,
)
from kafka_policy_proxy.proxy.metrics import OVERSIZED_REQUESTS

log = structlog.get_logger("proxy.enforcement")

LIMIT_KEY = "limits.max_entries_per_request"
# Array elements at every depth, per entry allowed: a topic's partitions, a resource's configs.
ELEMENTS_PER_ENTRY = 10
# Over this many times a bound, even an all-denied answer costs too much: the connection closes.
ANSWERABLE_FACTOR = 4
# CreateAcls, DeleteAcls, AlterReplicaLogDirs, ElectLeaders, AlterClientQuotas,
# AlterUserScramCredentials, UpdateFeatures: an array of entries after fixed-size fields only.
BOUNDED_ADMIN_KEYS = frozenset({30, 31, 34, 43, 49, 51, 57})
METADATA = 3


class RequestBoundsFilter(Filter):
    """Answers or closes a request with too many entries; forwards the rest untouched."""

    api_keys = GUARDED_API_KEYS | BOUNDED_ADMIN_KEYS | {METADATA}

    def __init__(self, max_entries: int) -> None:
        self._max_entries = max_entries
        self._max_elements = ELEMENTS_PER_ENTRY * max_entries

    def on_request(self, ctx: RequestContext) -> Verdict:
        """Count the request's entries; within the bounds it goes on to the next filter."""
        cls = request_class(ctx.api_key, ctx.api_version)
        offset = ctx.body_offset()
        entries = top_level_count(cls, ctx.frame, offset)
        if ctx.api_key == METADATA:
            if entries > self._max_elements:
                return self._close(ctx, f"{entries} topics", self._elements_bound())
            return Forward()
        if entries > ANSWERABLE_FACTOR * self._max_entries:
            return self._close(ctx, f"{entries} entries", f"{LIMIT_KEY} is {self._max_entries}")
        elements = None
        # Every element takes a byte at least: a body this short cannot exceed the bound.
        if len(ctx.frame) - offset > self._max_elements:
            elements = count_elements(
                cls, ctx.frame, offset, ANSWERABLE_FACTOR * self._max_elements
            )
            if elements is None:
                over = f"more than {ANSWERABLE_FACTOR * self._max_elements} array elements"
                return self._close(ctx, over, self._elements_bound())
        if entries > self._max_entries:
            reason = f"{entries} entries; {LIMIT_KEY} is {self._max_entries}"
        elif elements is not None and elements > self._max_elements:
            reason = f"{elements} array elements; {self._elements_bound()}"
        else:
            return Forward()
        return self._answer(ctx, offset, reason)

    def _elements_bound(self) -> str:
        return f"the bound is {ELEMENTS_PER_ENTRY} x {LIMIT_KEY} = {self._max_elements}"

    def _answer(self, ctx: RequestContext, offset: int, reason: str) -> Answer:
        """Every entry refused, in an answer the size of the request (which is bounded)."""
        message = f"request too large: {reason}"
        api = guarded_api(ctx.api_key)
        if api is None:
            body = denial_response(
                ctx.api_key, ctx.api_version, ctx.frame[offset:], message, ErrorCode.invalid_request
            )
            assert body is not None  # every BOUNDED_ADMIN_KEYS API has a denial builder
        else:
            request = api.decode_request(ctx.api_version, ctx.frame[offset:])
            denial = Denial(message, ErrorCode.invalid_request)
            body = api.merge(
                api.split(request, dict.fromkeys(range(len(api.entries(request))), denial)), None
            )
        name = api_name(ctx.api_key)
        log.warning("oversized request refused", conn=ctx.connection_id, api=name, reason=reason)
        OVERSIZED_REQUESTS.labels(api=name, result="answered").inc()
        return Answer(body)

    def _close(self, ctx: RequestContext, found: str, bound: str) -> Close:
        name = api_name(ctx.api_key)
        detail = f"{name} with {found} ({bound}; closed over {ANSWERABLE_FACTOR}x)"
        log.warning(
            "oversized request: connection closed",
            conn=ctx.connection_id,
            client=ctx.client_address,
            detail=detail,
        )
        OVERSIZED_REQUESTS.labels(api=name, result="closed").inc()
        return Close("request too large", detail)
