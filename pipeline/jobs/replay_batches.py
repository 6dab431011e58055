"""One Arrow batch of recorded requests judged again, each distinct request once.

`BatchJudge.judge` takes a batch's typed requests (`pipeline.sources.typed_requests`, read
column by column, never through JSON) and, for the rows without them (a lake written before
the typed columns, a request the typed columns cannot hold exactly), the request's JSON text,
which `Replayer.replay` reads as it always did.

Identical requests are judged once. The key is everything the judgement depends on: every
field the request is built from (or its whole text), the event's `in_use` text, and the event's
time as far as it can change a decision. The judge reads the time only to decide which of the
candidate's exceptions are in force (`now < expires`), so the key holds how many expiries the
time is at or past: all times with the same count judge alike (and a candidate without
exceptions judges alike at any time). A client's address is left out of the key unless the
candidate has plugins or Java policies: the built-in rules, exceptions and budgets never read
it (clients connect from ever new ports, so keeping it would make nearly every request
distinct), and no message names it. The candidate and the snapshot are the same for every
row. The cache lives as long as the task's batches (bounded: it starts over when full), and
counts its lookups and hits: each row says whether it was a hit.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Hashable
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]

from kafka_policy_proxy.pipeline.jobs.replayer import Replayer, Row, error_row
from kafka_policy_proxy.policy.admin_apis import AdminRequest
from kafka_policy_proxy.policy.broker_configs import BrokerConfigRequest
from kafka_policy_proxy.policy.decision_reader import (
    RecordedRequest,
    Refusal,
    RequestReader,
    Summarised,
)
from kafka_policy_proxy.policy.engine import CompiledPolicy

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICRO = timedelta(microseconds=1)
CACHE_SIZE = 65_536
_Key = tuple[Hashable, ...]


def reads_address(policy: CompiledPolicy) -> bool:
    """Whether a client's address can change the policy's decisions: only code it loads (a
    plugin, a Java policy) sees it."""
    document = policy.document
    return bool(document.plugins) or any(r.java_policy for r in document.rules)


def moment_key(policy: CompiledPolicy) -> Callable[[int | None], Hashable]:
    """A time in epoch microseconds -> what of it can change the policy's decisions: how
    many of its exceptions' expiries it is at or past (none has any effect without a time)."""
    try:
        expiries = sorted((e.expires - EPOCH) // _MICRO for e in policy.exceptions.items)
    except TypeError:  # an expiry without a time zone: the judge refuses it at every time
        return lambda micros: micros
    if not expiries:
        return lambda micros: micros is None
    return lambda micros: None if micros is None else bisect_right(expiries, micros)


class BatchJudge:
    """Judges batches of recorded requests with one `Replayer`, each distinct request once."""

    def __init__(self, replayer: Replayer, size: int = CACHE_SIZE) -> None:
        """`size`: how many decisions the cache holds at most (0: none, every row judged)."""
        self.replayer = replayer
        self._size = size
        self._cache: dict[_Key, Row] = {}
        self._moment = moment_key(replayer.policy)
        self._address = reads_address(replayer.policy)
        self.lookups = 0
        self.hits = 0

    def judge(
        self,
        typed: pa.StructArray | None,
        texts: pa.Array,
        micros: pa.Array | None = None,
        in_use: pa.Array | None = None,
    ) -> tuple[list[Row], list[bool]]:
        """Each row's new decision (a `Replayer` row) and whether the cache had it."""
        count = len(texts)
        times: list[int | None] = [None] * count if micros is None else micros.to_pylist()
        used: list[str | None] = [None] * count if in_use is None else in_use.to_pylist()
        keys, builders = _keys(typed, texts.to_pylist(), self.replayer, self._address)
        moment, cache, judge = self._moment, self._cache, self.replayer.judge
        rows: list[Row] = []
        hits: list[bool] = []
        for key, build, us, facts in zip(keys, builders, times, used, strict=True):
            full = (*key, facts, moment(us))
            row = cache.get(full)
            hits.append(row is not None)
            if row is None:
                if len(cache) >= self._size:
                    cache.clear()  # a new working set: start over rather than track recency
                try:
                    request = build()
                except Exception as exc:  # what the text reader refuses: an error row
                    row = error_row(exc)
                else:
                    time = None if us is None else EPOCH + timedelta(microseconds=us)
                    row = judge(request, time, facts)
                if self._size:
                    cache[full] = row
            rows.append(row)
        self.lookups += count
        self.hits += sum(hits)
        return rows, hits


_Builder = Callable[[], RecordedRequest]


def _keys(
    typed: pa.StructArray | None, texts: list[str | None], replayer: Replayer, address: bool
) -> tuple[list[_Key], list[_Builder]]:
    """Per row: the request's key and how to build it, from the typed columns or the text."""
    count = len(texts)
    keys: list[_Key | None] = [None] * count
    builders: list[_Builder | None] = [None] * count
    if typed is not None and typed.null_count < count:
        topic, *others = typed.flatten()
        if topic.null_count < count:
            _topic_keys(topic, replayer, keys, builders, address)
        for shape, (name, read) in zip(others, _SHAPES.items(), strict=True):
            if shape.null_count < count:
                for at, fields in enumerate(shape.to_pylist()):
                    if fields is not None:
                        seen = fields if address or "principal" not in fields else _blind(fields)
                        keys[at] = (name, *_frozen(seen))
                        builders[at] = partial(read, fields)
    for at, text in enumerate(texts):
        if keys[at] is None:
            keys[at] = ("text", text)
            builders[at] = partial(_from_text, replayer.reader, text)
    return keys, builders  # type: ignore[return-value]


def _topic_keys(
    topic: pa.StructArray,
    replayer: Replayer,
    keys: list[_Key | None],
    builders: list[_Builder | None],
    address: bool,
) -> None:
    columns = topic.flatten()
    names, ids, actions, kinds = (c.to_pylist() for c in columns[:4])
    people, clients, addresses = (c.to_pylist() for c in columns[4].flatten())
    seen = addresses if address else [""] * len(addresses)
    validate, requested, current, offsets = (c.to_pylist() for c in columns[5:])
    read = replayer.reader.topic
    for at, ok in enumerate(topic.is_valid().to_pylist()):
        if ok:
            spots = offsets[at]
            spots = tuple(map(tuple, spots)) if spots else ()
            head = (names[at], ids[at], actions[at], kinds[at])
            tail = (validate[at], requested[at], current[at], spots)
            keys[at] = ("topic", *head, people[at], clients[at], seen[at], *tail)
            fields = (*head, (people[at], clients[at], addresses[at]), *tail)
            builders[at] = partial(read, fields)


def _from_text(reader: RequestReader, text: str | None) -> RecordedRequest:
    if text is None:
        raise ValueError("the event has no request")
    return reader.read(text)


def _blind(fields: dict[str, Any]) -> dict[str, Any]:
    """The fields with the principal's address left out."""
    principal = fields["principal"]
    return fields if principal is None else {**fields, "principal": {**principal, "address": ""}}


def _frozen(fields: dict[str, Any]) -> tuple[Hashable, ...]:
    """A typed shape's fields as a key: structs and lists of them as tuples."""
    return tuple(
        tuple(tuple(v.values()) if isinstance(v, dict) else v for v in value)
        if isinstance(value, list)
        else tuple(value.values())
        if isinstance(value, dict)
        else value
        for value in fields.values()
    )


def _admin(fields: dict[str, Any]) -> RecordedRequest:
    return AdminRequest.from_dict(fields)


def _config(fields: dict[str, Any]) -> RecordedRequest:
    return BrokerConfigRequest.from_dict(fields)


def _refusal(fields: dict[str, Any]) -> RecordedRequest:
    return Refusal(fields["api"], fields["sasl_state"])


def _summary(fields: dict[str, Any]) -> RecordedRequest:
    return Summarised(fields["api"], fields["topics"])


# The shapes after `topic`, in TYPED_REQUEST's order, each built as its text reads.
_SHAPES = {"admin": _admin, "config": _config, "refusal": _refusal, "summary": _summary}
