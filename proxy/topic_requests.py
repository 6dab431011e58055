"""Policy enforcement: each topic of a guarded admin request, and each auto-creation, is judged."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from codec.errors import api_name
from codec.guarded import GUARDED_API_KEYS, SplitPlan, guarded_api
from codec.header import RequestHeader, request_body_offset
from codec.metadata_request import decode_metadata_request, metadata_topics, without_auto_create
from codec.registry import encode
from codec.topic_view import (
    AlterConfigsItem,
    AnyTopicItem,
    CreatePartitionsItem,
    CreateTopicItem,
    DeleteRecordsItem,
    DeleteTopicItem,
    IncrementalAlterConfigsItem,
    ReassignmentItem,
)
from policy.builders import (
    alter_configs_request,
    create_partitions_request,
    create_request,
    delete_records_request,
    delete_topic_request,
    incremental_alter_configs_request,
    reassignment_request,
    resolve,
)
from policy.cluster import InMemoryCluster
from policy.engine import CompiledPolicy
from policy.model import Action as PolicyAction
from policy.model import Decision, Fact, Mode, Principal, TopicRequest, Violation
from proxy.addresses import AddressRewriter
from proxy.audit import AuditLog, decision_event, outcome
from proxy.cluster_state import ClusterStateReader, ClusterStateUnavailable
from proxy.connection import Action, ClientConnection, Forward, Reply, framed

log = structlog.get_logger("proxy.enforcement")

METADATA = 3
CLUSTER_STATE_RULE = "cluster-state"
_EMPTY_CLUSTER = InMemoryCluster()


@dataclass(frozen=True, slots=True)
class Verdict:
    """A request as the policy saw it, and the policy's decision (None: left to the broker)."""

    request: TopicRequest
    decision: Decision | None


def topic_request(item: AnyTopicItem, principal: Principal, validate_only: bool) -> TopicRequest:
    """Map the codec's view of one topic onto the policy's request builders."""
    match item:
        case CreateTopicItem():
            return create_request(
                item.topic,
                item.num_partitions,
                item.replication_factor,
                item.assignments,
                item.configs,
                principal=principal,
                validate_only=validate_only,
            )
        case AlterConfigsItem():
            return alter_configs_request(
                item.topic, item.configs, principal=principal, validate_only=validate_only
            )
        case IncrementalAlterConfigsItem():
            return incremental_alter_configs_request(
                item.topic, item.ops, principal=principal, validate_only=validate_only
            )
        case CreatePartitionsItem():
            return create_partitions_request(
                item.topic,
                item.count,
                item.assignments,
                principal=principal,
                validate_only=validate_only,
            )
        case ReassignmentItem():
            return reassignment_request(item.topic, item.partitions, principal=principal)
        case DeleteTopicItem():
            return delete_topic_request(
                item.topic,
                None if item.topic_id is None else str(item.topic_id),
                principal=principal,
            )
        case DeleteRecordsItem():
            return delete_records_request(item.topic, item.offsets, principal=principal)
    raise TypeError(f"no policy request for {type(item).__name__}")


class Judge:
    """Fetches the cluster facts a policy needs, evaluates each topic, and audits every decision."""

    def __init__(
        self,
        policy: Callable[[], CompiledPolicy | None],
        cluster: ClusterStateReader,
        audit: AuditLog,
    ) -> None:
        self.policy = policy
        self.cluster = cluster
        self._audit = audit

    async def judge(
        self, policy: CompiledPolicy, requests: Sequence[TopicRequest]
    ) -> list[Verdict]:
        """Evaluate each request; if the cluster state cannot be read, deny them all."""
        facts: set[Fact] = set()
        names: set[str] = set()
        ids: set[str] = set()
        for request in requests:
            needed = policy.needs(request)
            if request.topic is None:
                needed |= {Fact.TOPIC_STATE}  # a delete by topic id needs the topic's name
            facts |= needed
            if Fact.TOPIC_STATE in needed:
                if request.topic is not None:
                    names.add(request.topic)
                elif request.topic_id is not None:
                    ids.add(request.topic_id)
        cluster = _EMPTY_CLUSTER
        if facts:
            try:
                cluster = await self.cluster.snapshot(frozenset(facts), names, ids)
            except ClusterStateUnavailable as exc:
                message = (
                    f"[{CLUSTER_STATE_RULE}] the proxy cannot read the cluster state ({exc}); "
                    "denied because the policy cannot be checked"
                )
                return [_deny_all(request, message) for request in requests]
        verdicts = []
        for request in requests:
            resolved = resolve(request, cluster, facts) if facts else request
            if not resolved.name:
                # An unknown topic id goes to the broker unchanged, so it answers as it would.
                verdicts.append(Verdict(resolved, None))
            elif (
                resolved.current is None
                and resolved.action is not PolicyAction.CREATE
                and Fact.TOPIC_STATE in policy.needs(resolved)
            ):
                # The rules need the topic's current state and the cluster does not show it
                # (yet): judging without it could let a change through, so deny.
                message = (
                    f"[{CLUSTER_STATE_RULE}] topic {resolved.name!r} is not in the cluster "
                    "metadata the proxy read; denied because the policy needs its current state"
                )
                verdicts.append(_deny_all(resolved, message))
            else:
                verdicts.append(Verdict(resolved, policy.evaluate(resolved, cluster)))
        return verdicts

    def record(
        self, conn: ClientConnection, header: RequestHeader, verdicts: Sequence[Verdict]
    ) -> None:
        """One audit event per decision; denials also go to the application log."""
        for verdict in verdicts:
            decision, request = verdict.decision, verdict.request
            if decision is None:
                continue
            result = outcome(decision)
            if result != "allowed":
                log.info(
                    f"policy {result}",
                    conn=conn.id,
                    principal=request.principal.name,
                    topic=decision.topic,
                    action=request.action.value,
                    reasons=[v.message for v in decision.violations],
                )
            if self._audit.enabled:
                self._audit.emit(
                    decision_event(
                        request,
                        decision,
                        conn=conn.id,
                        client=conn.client_address,
                        api=api_name(header.api_key),
                        api_key=header.api_key,
                        api_version=header.api_version,
                    )
                )


def _deny_all(request: TopicRequest, message: str) -> Verdict:
    violation = Violation(CLUSTER_STATE_RULE, message, Mode.ENFORCE)
    return Verdict(request, Decision(request.name, request.action, False, (violation,)))


def _principal(conn: ClientConnection, header: RequestHeader) -> Principal:
    return Principal(conn.principal, header.client_id or "", conn.client_address)


class GuardedApiEnforcer:
    """Answers the denied topics of a guarded admin request and forwards the rest."""

    api_keys = GUARDED_API_KEYS

    def __init__(self, judge: Judge, legacy_error_code: int) -> None:
        self._judge = judge
        self._legacy_error_code = legacy_error_code

    def on_request(
        self, conn: ClientConnection, header: RequestHeader, frame: bytes
    ) -> Awaitable[Action]:
        """Judge the request's topics before anything reaches the broker."""
        return self._enforce(conn, header, frame)

    async def _enforce(self, conn: ClientConnection, header: RequestHeader, frame: bytes) -> Action:
        api = guarded_api(header.api_key)
        assert api is not None
        offset = request_body_offset(frame, header)
        # A guarded request that cannot be decoded raises CodecError: never forwarded unchecked.
        request = api.decode_request(header.api_version, frame[offset:])
        items = api.topic_items(request)
        policy = self._judge.policy()
        validate_only = bool(getattr(request, "validate_only", False))
        if policy is None or not items:
            return Forward(frame, self._invalidating(items, validate_only, None, None))
        principal = _principal(conn, header)
        verdicts = await self._judge.judge(
            policy, [topic_request(item, principal, validate_only) for item in items]
        )
        self._judge.record(conn, header, verdicts)
        denied = {
            item.index: verdict.decision.message
            for item, verdict in zip(items, verdicts, strict=True)
            if verdict.decision is not None and not verdict.decision.allowed
        }
        plan = api.split(request, denied, self._legacy_error_code)
        passed = [item for item in items if item.index not in plan.denied]
        if plan.forward is None:
            return Reply(api.merge(plan, None))
        if plan.forward is request:
            return Forward(frame, self._invalidating(passed, validate_only, None, None))
        reduced = framed(frame[4:offset], encode(plan.forward))
        return Forward(reduced, self._invalidating(passed, validate_only, plan, header))

    def _invalidating(
        self,
        items: Collection[AnyTopicItem],
        validate_only: bool,
        plan: SplitPlan | None,
        header: RequestHeader | None,
    ) -> Callable[[bytes], bytes]:
        cluster = self._judge.cluster

        def after(body: bytes) -> bytes:
            if not validate_only:
                # The broker may have changed these topics: the next decision must re-read them.
                for item in items:
                    if item.topic is not None:
                        cluster.invalidate(item.topic)
            if plan is None or header is None:
                return body
            api = guarded_api(header.api_key)
            assert api is not None
            return api.merge(plan, api.decode_response(header.api_version, body))

        return after


class AutoCreateGuard:
    """Metadata requests: a denied auto-creation reaches the broker with auto-creation off."""

    api_keys = frozenset({METADATA})

    def __init__(self, judge: Judge, rewriter: AddressRewriter) -> None:
        self._judge = judge
        self._rewriter = rewriter

    def on_request(
        self, conn: ClientConnection, header: RequestHeader, frame: bytes
    ) -> Action | Awaitable[Action]:
        """Forward with addresses rewritten; judge first if the request could create topics."""
        transform = self._rewriter.transform(header.api_key, header.api_version)
        policy = self._judge.policy()
        if policy is None:
            return Forward(frame, transform)
        offset = request_body_offset(frame, header)
        request = decode_metadata_request(header.api_version, frame[offset:])
        topics = metadata_topics(request)
        if not topics.allow_auto_topic_creation or not topics.names:
            return Forward(frame, transform)
        return self._guard(
            conn, header, frame, offset=offset, request=request, names=topics.names, policy=policy
        )

    async def _guard(
        self,
        conn: ClientConnection,
        header: RequestHeader,
        frame: bytes,
        *,
        offset: int,
        request: Any,
        names: Sequence[str],
        policy: CompiledPolicy,
    ) -> Action:
        transform = self._rewriter.transform(header.api_key, header.api_version)
        try:
            cluster = await self._judge.cluster.snapshot(frozenset({Fact.TOPIC_STATE}), names)
        except ClusterStateUnavailable as exc:
            log.warning("auto-creation turned off: cluster state unavailable", detail=str(exc))
            return Forward(self._without_auto_create(frame, offset, request), transform)
        missing = [name for name in dict.fromkeys(names) if cluster.topic(name) is None]
        if not missing:
            return Forward(frame, transform)
        principal = _principal(conn, header)
        verdicts = await self._judge.judge(
            policy, [create_request(name, principal=principal) for name in missing]
        )
        self._judge.record(conn, header, verdicts)
        if all(v.decision is None or v.decision.allowed for v in verdicts):
            return Forward(frame, transform)
        return Forward(self._without_auto_create(frame, offset, request), transform)

    @staticmethod
    def _without_auto_create(frame: bytes, offset: int, request: Any) -> bytes:
        return framed(frame[4:offset], encode(without_auto_create(request)))
