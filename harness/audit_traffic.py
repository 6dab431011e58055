"""Audit traffic shaped like a shared cluster's: bench data for the pipeline (issue 34).

The population (harness/audit_population.py) sends requests over days, more by day than by
night and less at the weekend. Every request is judged by the one judge against a cluster
that evolves as it goes: an allowed create makes the topic exist (a second create of it is
never sent), an allowed delete removes it, an allowed alter changes it. Each decision becomes
the record the proxy would write, with its own time-ordered decision id.

Judging millions of requests one by one would take hours, and most repeat exactly: the same
app's auto-create attempt, the same CI validation. So a judgement is kept for a repeat of
the same requests (their address aside: no rule reads it) while none of the facts it can read
has changed: the set of topic names, the partition counts (cluster limits, budgets), the
named topics' states, any topic's configs if a retention-bytes budget counts them, and which
exceptions are in force. Judging again then gives the same verdicts; `Traffic(...,
memo=False)` judges every request, and the tests hold the two to the same records.

`harness/audit_data.write_bulk` stays as the other data set: a pool of distinct events
re-stamped (the worst case for the pipeline's aggregates).
"""

from __future__ import annotations

import json
import math
import random
import re
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from itertools import accumulate
from pathlib import Path
from typing import Any

from harness.audit_data import API, DEFAULTS
from harness.audit_population import DAY_MS, RETENTIONS, Kind, Population, Principal, TopicSpec
from harness.audit_population import build as build_population
from harness.evolving_cluster import EvolvingCluster, spread
from kafka_policy_proxy.policy.builders import (
    create_partitions_request,
    create_request,
    delete_records_request,
    delete_topic_request,
    incremental_alter_configs_request,
    reassignment_request,
)
from kafka_policy_proxy.policy.cluster import InMemoryCluster
from kafka_policy_proxy.policy.decision_ids import decision_id_at
from kafka_policy_proxy.policy.decision_log import Stamp, decision_record
from kafka_policy_proxy.policy.engine import CompiledPolicy
from kafka_policy_proxy.policy.judge import ClusterFacts, judge
from kafka_policy_proxy.policy.model import Action, ConfigMap, TopicRequest, TopicState
from kafka_policy_proxy.policy.model import Principal as Who

# A Monday: the first days are working days, the weekend comes later.
START = datetime(2026, 10, 5, tzinfo=UTC)
BROKERS = 6
# Kafka's own broker defaults: an auto-created topic gets one partition.
CLUSTER_DEFAULTS = DEFAULTS | {"num.partitions": "1", "default.replication.factor": "3"}
METADATA = ("Metadata", 3, 12)
# Requests of each kind, relative (records per request differ: a CI run validates a repo).
MIX = {
    Kind.APP: 26.0,
    Kind.CI: 1.4,
    Kind.GITOPS: 0.9,
    Kind.STREAMS: 1.5,
    Kind.OPERATOR: 0.08,
    Kind.LOADER: 0.05,
}
# An API (name, key, version) and the topic requests of one call of it.
Api = tuple[str, int, int]
Call = tuple[Api, list[TopicRequest]]
_FIELD = re.compile(r'"@@(\w)@@"')


@dataclass(frozen=True)
class Shape:
    """What to generate: how many events over how many days, from how large a population."""

    events: int = 1_000_000
    topics: int = 1_800
    principals: int = 120
    days: float = 7.5  # the last day is partial
    existing: float = 0.8  # topics there from the start; the rest are created once each
    seed: int = 1
    start: datetime = START


@dataclass
class _Connection:
    conn: int
    address: str
    proxy: str
    uses: int


class Traffic:
    """The records of `shape.events` decisions, as JSON lines, in time order."""

    def __init__(self, policy: CompiledPolicy, shape: Shape, *, memo: bool = True) -> None:
        self.policy = policy
        self.shape = shape
        self.population: Population = build_population(
            shape.topics, shape.principals, shape.existing, shape.seed
        )
        self.cluster = EvolvingCluster(
            (_state(s, n) for n, s in enumerate(self.population.specs) if not s.due),
            BROKERS,
            CLUSTER_DEFAULTS,
        )
        self.rng = random.Random(shape.seed * 7919 + 1)
        self.memo: dict[tuple[Any, ...], tuple[list[str], list[TopicRequest]]] | None
        self.memo = {} if memo else None
        self.judged = 0
        self._facts_seen: tuple[int, ...] = ()
        self.attempts: dict[str, int] = {}
        self.deleted: set[str] = set()
        self._connections: dict[str, _Connection] = {}
        self._conn_ids = iter(range(1, 1 << 62))
        self._expiries = sorted(e.expires for e in policy.exceptions.items)
        # Only a retention-bytes budget reads other topics' configs.
        self._reads_configs = any(b.spec.max_retention_bytes for b in policy.budgets)
        self._kinds = [k for k in MIX if self.population.by_kind.get(k)]
        self._kind_weights = list(accumulate(MIX[k] for k in self._kinds))
        self._weights = {
            k: list(accumulate(p.weight for p in members))
            for k, members in self.population.by_kind.items()
        }
        self._clock = _Clock(shape, self.rng)

    def lines(self) -> Iterator[str]:
        """Every record, as the JSON line the proxy's audit log would hold."""
        count = self.shape.events
        done = 0
        while done < count:
            now_us = self._clock.at(done)
            kind = self.rng.choices(self._kinds, cum_weights=self._kind_weights)[0]
            for line in self._requests(kind, now_us / self._clock.span_us):
                yield line
                done += 1
                if done == count:
                    return

    def snapshot(self) -> InMemoryCluster:
        """The cluster as the traffic left it."""
        return self.cluster.snapshot()

    def _requests(self, kind: Kind, u: float) -> Iterator[str]:
        principal = self._pick(kind)
        made = getattr(self, f"_{kind.value}")(principal, u)
        if not made:
            return
        connection = self._connect(principal)
        now_us = self._clock.at_least()
        for api, requests in made:
            for template in self._judge(api, requests, now_us):
                yield self._filled(template, connection)

    def _pick(self, kind: Kind) -> Principal:
        members = self.population.by_kind[kind]
        return self.rng.choices(members, cum_weights=self._weights[kind])[0]

    def _connect(self, principal: Principal) -> _Connection:
        """An application keeps its connection for a while; every other kind connects anew."""
        connection = self._connections.get(principal.name)
        if connection is None or connection.uses <= 0:
            host = self.rng.choice(principal.hosts)
            uses = int(self.rng.expovariate(1 / 300)) if principal.kind is Kind.APP else 0
            conn = next(self._conn_ids)
            address = f"{host}:{self.rng.randint(32768, 60999)}"
            connection = _Connection(conn, address, f"proxy-{conn % 3 + 1}", uses)
            self._connections[principal.name] = connection
        connection.uses -= 1
        return connection

    def _judge(self, api: Api, requests: list[TopicRequest], now_us: int) -> list[str]:
        """The records' templates; judged again only if the cluster or exceptions changed."""
        now = datetime.fromtimestamp(now_us / 1e6, UTC)
        cluster = self.cluster
        key = (
            api,
            tuple(requests),
            cluster.names_version,
            cluster.partitions_version,
            cluster.configs_version if self._reads_configs else 0,
            tuple(cluster.topic_version(r.name) for r in requests),
            bisect_right(self._expiries, now),
        )
        if self.memo is not None and key[2:5] != self._facts_seen:
            self.memo.clear()  # judged on facts that are gone: none of it can be asked again
            self._facts_seen = key[2:5]
        kept = self.memo.get(key) if self.memo is not None else None
        if kept is None:
            self.judged += 1
            verdicts = judge(self.policy, requests, ClusterFacts(self.cluster), now=now)
            templates, applied = [], []
            for verdict in verdicts:
                decision = verdict.decision
                if decision is None:
                    continue
                stamp = Stamp(
                    "@@t@@", "@@d@@", self.policy.revision, "bench", "@@p@@", 0, "@@a@@", *api
                )
                record = decision_record(
                    verdict.original or verdict.request, decision, stamp, verdict.request
                )
                templates.append(_template(record))
                if decision.allowed and not verdict.request.validate_only:
                    applied.append(verdict.request)
            kept = (templates, applied)
            if self.memo is not None:
                self.memo[key] = kept
        templates, applied = kept
        for request in applied:
            if self.cluster.apply(request) and request.action is Action.DELETE:
                self.deleted.add(request.name)
        self._count_attempts(requests, templates)
        return templates

    def _count_attempts(self, requests: list[TopicRequest], templates: list[str]) -> None:
        """A denied create of a broken spec counts towards its owners fixing it."""
        for request, template in zip(requests, templates, strict=False):
            if not request.validate_only and '"decision":"denied"' in template:
                self.attempts[request.name] = self.attempts.get(request.name, 0) + 1

    def _filled(self, template: str, connection: _Connection) -> str:
        time, decision_id = self._clock.stamp()
        return template.format(
            t=time, d=decision_id, p=connection.proxy, c=connection.conn, a=connection.address
        )

    # What each kind sends: [(api, the requests of one API call)], or nothing.

    def _app(self, p: Principal, u: float) -> list[Call]:
        missing = [n for n in p.wanted if self.cluster.topic(n) is None]
        who = _who(p)
        return [(METADATA, [_auto(n, who) for n in missing])] if missing else []

    def _ci(self, p: Principal, u: float) -> list[Call]:
        specs = [self._current(s) for s in p.repo if s.due <= u and s.name not in self.deleted]
        who = _who(p)
        requests = [_create(s, who, validate_only=True) for s in specs]
        return [(API["create"], requests)] if requests else []

    def _gitops(self, p: Principal, u: float) -> list[Call]:
        who = _who(p)
        made = []
        due = [
            self._current(s)
            for s in p.repo
            if s.creator is Kind.GITOPS and 0 < s.due <= u and self._to_create(s)
        ]
        if due:
            made.append((API["create"], [_create(s, who) for s in due]))
        if self.rng.random() < 0.05:  # someone edited a retention in the repo
            spec = self.rng.choice(p.repo)
            retention = self.rng.choice((*RETENTIONS, 45 * DAY_MS))
            spec.configs = (("retention.ms", str(retention)), *spec.configs[1:])
        start = self.rng.randrange(len(p.repo))
        window = [s for s in p.repo[start : start + 25] if self._exists(s)]
        alters = [_alter(s.name, s.configs, who) for s in window]
        if alters:
            made.append((API["configs"], alters))
        return made

    def _streams(self, p: Principal, u: float) -> list[Call]:
        who = _who(p)
        missing = [t for _, topics in p.apps for t in topics if t.due <= u and self._to_create(t)]
        return [(API["create"], [_create(t, who, rf=-1) for t in missing])] if missing else []

    def _loader(self, p: Principal, u: float) -> list[Call]:
        who = _who(p)
        due = [s for s in p.repo if s.due <= u and s.name not in self.deleted]
        return [(API["create"], [_create(s, who, validate_only=self._exists(s)) for s in due])]

    def _operator(self, p: Principal, u: float) -> list[Call]:
        who, rng = _who(p), self.rng
        due = [s for s in self.population.specs if s.creator is Kind.OPERATOR and 0 < s.due <= u]
        due = [s for s in due if self._to_create(s)]
        if due and rng.random() < 0.5:
            return [(API["create"], [_create(self._current(due[0]), who)])]
        action = rng.choices(
            ("configs", "partitions", "reassignment", "delete", "delete_records", "protected"),
            (50, 25, 10, 8, 4, 3),
        )[0]
        domain = {"delete": "sandbox", "protected": "payments", "delete_records": "logs"}
        topic = self._existing(domain.get(action))
        if topic is None:
            return []
        if action == "configs":
            value = str(rng.choice((*RETENTIONS, 90 * DAY_MS)))
            request = _alter(topic.name, (("retention.ms", value),), who)
        elif action == "partitions":
            more = topic.partitions + rng.choice((3, 6, 12, 30))
            request = create_partitions_request(topic.name, more, principal=who)
        elif action == "reassignment":
            request = reassignment_request(topic.name, [(0, [1, 2, 3])], principal=who)
        elif action == "delete_records":
            request = delete_records_request(topic.name, [(0, -1)], principal=who)
        else:
            request = delete_topic_request(topic.name, principal=who)
            action = "delete"
        return [(API[action], [request])]

    def _existing(self, domain: str | None) -> TopicState | None:
        specs = self.population.specs
        for _ in range(20):
            spec = specs[self.rng.randrange(len(specs))]
            if (domain is None or spec.domain == domain) and spec.domain != "shipping":
                state = self.cluster.topic(spec.name)
                if state is not None:
                    return state
        return None

    def _current(self, spec: TopicSpec) -> TopicSpec:
        """The spec as its owners have it now: broken until fixed after enough denials."""
        broken = spec.broken
        if broken is not None and self.attempts.get(broken.name, 0) < spec.fix_after:
            return broken
        return spec

    def _to_create(self, spec: TopicSpec) -> bool:
        """Missing, and never deleted (its owners dropped it from their specs then)."""
        return spec.name not in self.deleted and not self._exists(spec)

    def _exists(self, spec: TopicSpec) -> bool:
        return self.cluster.topic(spec.name) is not None


class _Clock:
    """Record times: a diurnal rate (business hours, quieter weekends) over the span; ids
    time-ordered as UUIDv7s minted by one process (a counter within a millisecond)."""

    def __init__(self, shape: Shape, rng: random.Random) -> None:
        self.rng = rng
        self.start_us = int(shape.start.timestamp() * 1e6)
        minutes = int(shape.days * 1440)
        self.span_us = minutes * 60_000_000
        rates = [_rate(shape.start + timedelta(minutes=m)) for m in range(minutes)]
        scale = shape.events / sum(rates)
        self.cumulative = list(accumulate(r * scale for r in rates))
        self.last_us = 0
        self.last_ms = -1
        self.counter = 0
        self._second = -1
        self._prefix = ""

    def at(self, index: int) -> int:
        """The time of record `index` (microseconds into the span), never before the last."""
        minute = bisect_right(self.cumulative, index)
        low = self.cumulative[minute - 1] if minute else 0.0
        high = self.cumulative[min(minute, len(self.cumulative) - 1)]
        fraction = (index - low) / (high - low) if high > low else 0.0
        at = int((minute + min(fraction, 1.0)) * 60_000_000)
        self.last_us = max(at, self.last_us)
        return self.last_us

    def at_least(self) -> int:
        """The time of the request being made (its records follow it closely)."""
        return self.start_us + self.last_us

    def stamp(self) -> tuple[str, str]:
        """The next record's time (200 µs after the one before at the least) and id."""
        self.last_us += 200
        moment = self.start_us + self.last_us
        second, micros = divmod(moment, 1_000_000)
        if second != self._second:
            when = datetime.fromtimestamp(second, UTC)
            self._second, self._prefix = second, when.strftime("%Y-%m-%dT%H:%M:%S")
        ms = moment // 1000
        if ms != self.last_ms:
            self.last_ms, self.counter = ms, self.rng.getrandbits(41)
        else:
            self.counter += 1
        decision_id = decision_id_at(ms, self.counter, self.rng.getrandbits(32))
        return f"{self._prefix}.{micros:06d}Z", decision_id


def _rate(moment: datetime) -> float:
    """Relative request rate: a peak in the afternoon (UTC), a fifth of it at night."""
    hour = moment.hour + moment.minute / 60
    day = 0.2 + math.exp(-(((hour - 14) / 4) ** 2))
    return day * (0.35 if moment.weekday() >= 5 else 1.0)


def _template(record: dict[str, Any]) -> str:
    """The record's JSON line with fields for str.format: time, id, proxy, conn, address."""
    record["conn"] = "@@c@@"  # the address is the principal's already (`_who`)
    text = json.dumps(record, separators=(",", ":"))
    text = text.replace("{", "{{").replace("}", "}}")
    return _FIELD.sub(lambda m: f'"{{{m[1]}}}"' if m[1] != "c" else "{c}", text) + "\n"


def _who(p: Principal) -> Who:
    """The principal as the judge sees it; the address is filled in per connection."""
    return Who(p.name, p.client_id, "@@a@@")


# Requests are built once per distinct content: repeats are the bulk of the traffic.
@lru_cache(maxsize=1 << 16)
def _auto(name: str, who: Who) -> TopicRequest:
    """A topic a Metadata request would auto-create (the broker's defaults)."""
    return create_request(name, principal=who)


@lru_cache(maxsize=1 << 16)
def _alter(name: str, configs: tuple[tuple[str, str], ...], who: Who) -> TopicRequest:
    """IncrementalAlterConfigs setting `configs`."""
    changes = [(k, "SET", v) for k, v in configs]
    return incremental_alter_configs_request(name, changes, principal=who)


def _create(
    spec: TopicSpec, who: Who, *, validate_only: bool = False, rf: int | None = None
) -> TopicRequest:
    """CreateTopics of the spec (`rf` -1: the broker default, as Streams asks)."""
    replication = spec.replication if rf is None else rf
    return _created(
        spec.name, spec.partitions, replication, spec.configs, who=who, only=validate_only
    )


@lru_cache(maxsize=1 << 16)
def _created(
    name: str,
    partitions: int,
    rf: int,
    configs: tuple[tuple[str, str], ...],
    *,
    who: Who,
    only: bool,
) -> TopicRequest:
    return create_request(name, partitions, rf, configs=configs, principal=who, validate_only=only)


def _state(spec: TopicSpec, number: int) -> TopicState:
    """A topic there from the start: the broker defaults with its declared configs."""
    return TopicState(
        name=spec.name,
        topic_id=f"{number:08x}-0000-4000-8000-{number:012x}",
        partitions=spec.partitions,
        replication_factor=spec.replication,
        assignment=spread(spec.partitions, spec.replication, BROKERS),
        configs=ConfigMap(DEFAULTS | dict(spec.configs)),
    )


def write_traffic(
    directory: Path, policy: CompiledPolicy, shape: Shape, *, files: int = 100
) -> Traffic:
    """`shape.events` records in `files` files, like rotated logs; returns the traffic (its
    cluster as left, its judgement count)."""
    traffic = Traffic(policy, shape)
    directory.mkdir(parents=True, exist_ok=True)
    per_file = -(-shape.events // files)
    lines = traffic.lines()
    for f in range(files):
        with (directory / f"audit-{f:04d}.jsonl").open("w", encoding="utf-8") as out:
            batch = []
            for _, line in zip(range(per_file), lines, strict=False):
                batch.append(line)
                if len(batch) == 10_000:
                    out.write("".join(batch))
                    batch.clear()
            out.write("".join(batch))
    return traffic
