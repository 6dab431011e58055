"""Split a guarded batch request by topic, answer the denied part, merge with the broker's answer.

Duplicates, as a Kafka 4.1 broker treats them (ControllerApis, ConfigAdminManager,
ReplicationControlManager, KafkaApis.handleDeleteRecordsRequest):

- CreateTopics, CreatePartitions, DeleteTopics: every copy of a repeated name (or id) is
  refused with one INVALID_REQUEST "Duplicate topic name." result for the name.
- IncrementalAlterConfigs: every copy of a repeated (type, name) resource is refused, with
  one INVALID_REQUEST result per copy, in request order (ConfigAdminManager.preprocess).
- AlterConfigs (legacy): the broker computes the same verdict but a 4.1.1 broker never sends
  it, in any version: AlterConfigsResponse.errorCounts builds a map with Collectors.toMap,
  which throws on the repeated resource, and the response is dropped (checked against a
  real broker). So the codec answers repeated resources itself with that verdict and
  forwards the rest (AlterConfigs.refused_locally).
- AlterPartitionReassignments: no check; each copy is applied and answered in order.
- DeleteRecords: partitions are collapsed into a map (the last offset wins) and the answer
  has one entry per distinct topic.

So allowed duplicates are forwarded unchanged and the broker's results are mapped back by
key. If any copy of a topic is denied, every copy is denied (a copy must never slip
through), and the synthetic answer has the broker's cardinality: once per topic, or once
per copy where the broker answers every copy.
"""

from __future__ import annotations

import dataclasses
import datetime
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar

from kio.schema.errors import ErrorCode

from kafka_policy_proxy.codec.byte_ranges import array_layout
from kafka_policy_proxy.codec.entity_encoder import encode_entity
from kafka_policy_proxy.codec.kio_introspect import EntityTupleField, classify_field
from kafka_policy_proxy.codec.prescan import decode_untrusted
from kafka_policy_proxy.codec.registry import encode, known_versions, request_class, response_class
from kafka_policy_proxy.codec.topic_view import AnyTopicItem, ConfigResourceItem
from kafka_policy_proxy.codec.violations import has_error_message, violation

ZERO_THROTTLE = datetime.timedelta(0)


@dataclass(frozen=True, slots=True)
class Slot:
    """One position of the merged answer: a broker result looked up by key, or a synthetic one."""

    key: Hashable
    synthetic: Any = None


@dataclass(frozen=True, slots=True)
class Denial:
    """Why an entry is answered here: a policy violation by default, or another Kafka error.

    `name` is the topic's name where the client named it by id only and the proxy resolved
    it, so that the answer carries it as a broker's would.
    """

    message: str
    error_code: ErrorCode | None = None  # None: POLICY_VIOLATION, or the legacy code
    name: str | None = None


@dataclass(frozen=True, slots=True)
class Rewrite:
    """What the policy changed in an allowed entry, which is forwarded so rather than as sent.

    `partitions` is a CreateTopics count; `configs` are (name, value) pairs that replace the
    values sent, or that a create adds where it left the config out.
    """

    partitions: int | None = None
    configs: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class SplitPlan:
    """The outcome of a split: what to forward, and how to put the answer back together."""

    api_key: int
    api_version: int
    request: Any
    forward: Any | None
    # index -> message for every denied entry, duplicates of a denied topic included.
    denied: Mapping[int, str]
    slots: tuple[Slot, ...]
    # index -> reason for entries answered without the broker for protocol reasons, not policy.
    refused: Mapping[int, str]
    # The entries forwarded, by index in request order, and those the policy rewrote (index ->
    # the entry as rewritten): `forward` is the request with exactly these entries.
    kept: tuple[int, ...] = ()
    rewritten: Mapping[int, Any] = dataclasses.field(default_factory=dict)


# Picks (error code, message or None) for the class that holds a result's error fields.
ErrorChoice = Callable[[type[Any]], tuple[ErrorCode, str | None]]


_element_classes: dict[tuple[type[Any], str], type[Any]] = {}


def element_class(cls: type[Any], field_name: str) -> type[Any]:
    """The kio entity class of the elements of an array field, e.g. a response's results."""
    found = _element_classes.get((cls, field_name))
    if found is None:
        found = _element_classes[cls, field_name] = _find_element_class(cls, field_name)
    return found


def _find_element_class(cls: type[Any], field_name: str) -> type[Any]:
    for f in dataclasses.fields(cls):
        if f.name == field_name:
            kind = classify_field(f)
            if isinstance(kind, EntityTupleField):
                return kind.type_
    raise TypeError(f"{cls.__name__}.{field_name} is not an array of entities")


def build(cls: type[Any], **values: Any) -> Any:
    """Instantiate a kio entity, dropping the values its version has no field for."""
    return cls(**{k: v for k, v in values.items() if k in _field_names(cls)})


_field_name_sets: dict[type[Any], frozenset[str]] = {}


def _field_names(cls: type[Any]) -> frozenset[str]:
    names = _field_name_sets.get(cls)
    if names is None:
        names = _field_name_sets[cls] = frozenset(f.name for f in dataclasses.fields(cls))
    return names


class GuardedApi(ABC):
    """Decode, view, split and merge for one guarded admin API, across all kio versions."""

    api_key: ClassVar[int]
    results_field: ClassVar[str]
    entries_field: ClassVar[str] = "topics"
    # True where the broker answers every copy of a repeated entry, False where it answers once.
    answers_each_copy: ClassVar[bool]

    def versions(self) -> range:
        """The request versions this codec supports (all that kio knows)."""
        bounds = known_versions(self.api_key)
        assert bounds is not None
        return range(bounds[0], bounds[1] + 1)

    def decode_request(self, api_version: int, body: bytes) -> Any:
        """Decode a request body (no header) of this API version; raises CodecError."""
        return decode_untrusted(request_class(self.api_key, api_version), body)

    def decode_response(self, api_version: int, body: bytes) -> Any:
        """Decode a response body (no header) of this API version; raises CodecError."""
        return decode_untrusted(response_class(self.api_key, api_version), body)

    def topic_items(self, request: Any) -> list[AnyTopicItem]:
        """Per-topic views in request order; non-topic resources are left out."""
        items = []
        for index, entry in enumerate(self.entries(request)):
            item = self.item(request, index, entry)
            if item is not None:
                items.append(item)
        return items

    def split(
        self,
        request: Any,
        denied: Mapping[int, str | Denial],
        legacy_error_code: int = -1,
        rewrites: Mapping[int, Rewrite] | None = None,
    ) -> SplitPlan:
        """Remove the denied topics (and their duplicates) and prepare their synthetic results.

        A plain message denies an entry as a policy violation; a `Denial` may name another code.
        `rewrites` changes allowed entries (by index) before they are forwarded.
        """
        version = int(request.__version__)
        entries = self.entries(request)
        bad = sorted(i for i in denied if not 0 <= i < len(entries))
        if bad:
            raise ValueError(f"denied indexes {bad} are not entries of this request")
        keys = [self.key(entry) for entry in entries]
        denials: dict[Hashable, Denial] = {}
        for index in sorted(denied):
            reason = denied[index]
            denials.setdefault(keys[index], Denial(reason) if isinstance(reason, str) else reason)
        expanded = {i: denials[k] for i, k in enumerate(keys) if k in denials}
        refused = {
            i: reason for i, reason in self.refused_locally(keys).items() if i not in expanded
        }
        rewrites = rewrites or {}
        if not expanded and not refused:
            none: Mapping[int, str] = MappingProxyType({})
            slots = tuple(Slot(key) for key in keys)
            everything = tuple(range(len(entries)))
            rewritten = self._entries_rewritten(entries, everything, rewrites)
            forward = self._rewritten(request, entries, everything, rewritten)
            return SplitPlan(
                self.api_key, version, request, forward, none, slots, none, everything, rewritten
            )

        def deny(denial: Denial) -> ErrorChoice:
            if denial.error_code is None:
                return lambda holder: violation(holder, denial.message, legacy_error_code)
            code = denial.error_code
            return lambda holder: (code, denial.message if has_error_message(holder) else None)

        def refuse(reason: str) -> ErrorChoice:
            return lambda holder: (
                ErrorCode.invalid_request,
                reason if has_error_message(holder) else None,
            )

        answered = {i: deny(d) for i, d in expanded.items()}
        answered.update((i, refuse(r)) for i, r in refused.items())
        copies: dict[Hashable, list[int]] = {}
        for index in answered:
            copies.setdefault(keys[index], []).append(index)
        result_cls = element_class(response_class(self.api_key, version), self.results_field)
        slot_list: list[Slot] = []
        for index, (entry, key) in enumerate(zip(entries, keys, strict=True)):
            error = answered.get(index)
            if error is None:
                slot_list.append(Slot(key))
            elif self.answers_each_copy:
                group = [self.resolved(entry, expanded.get(index))]
                slot_list.append(Slot(key, self.synthetic(result_cls, group, error)))
            elif copies[key][0] == index:
                group = [self.resolved(entries[i], expanded.get(i)) for i in copies[key]]
                slot_list.append(Slot(key, self.synthetic(result_cls, group, error)))

        kept = tuple(i for i in range(len(entries)) if i not in answered)
        rewritten = self._entries_rewritten(entries, kept, rewrites)
        return SplitPlan(
            api_key=self.api_key,
            api_version=version,
            request=request,
            forward=self._rewritten(request, entries, kept, rewritten, reduced=True)
            if kept
            else None,
            denied=MappingProxyType({i: d.message for i, d in expanded.items()}),
            slots=tuple(slot_list),
            refused=MappingProxyType(refused),
            kept=kept,
            rewritten=rewritten,
        )

    def _entries_rewritten(
        self, entries: Sequence[Any], kept: Sequence[int], rewrites: Mapping[int, Rewrite]
    ) -> Mapping[int, Any]:
        """The kept entries the policy rewrote, as rewritten (index -> entry)."""
        return MappingProxyType(
            {i: self.rewrite(entries[i], rewrites[i]) for i in kept if i in rewrites}
        )

    def _rewritten(
        self,
        request: Any,
        entries: Sequence[Any],
        kept: Sequence[int],
        rewritten: Mapping[int, Any],
        reduced: bool = False,
    ) -> Any:
        """The request to forward: the kept entries, each rewritten where the policy said so."""
        if not reduced and not rewritten:
            return request
        return self.with_entries(request, tuple(rewritten.get(i, entries[i]) for i in kept))

    def forward_body(self, plan: SplitPlan, data: bytes, offset: int) -> bytes:
        """The body of `plan.forward`, for the request whose body is data[offset:].

        The kept entries' own bytes (each rewritten one encoded by kio) between the request's
        other fields, where those bytes are exactly kio's encoding of what was decoded and
        judged (`codec/byte_ranges.py`); otherwise kio's encoding of the whole of
        `plan.forward`. Both are the same bytes: tests/unit/codec/test_byte_ranges.py.
        """
        if plan.forward is None:
            raise ValueError("nothing of this request is forwarded")
        cls = request_class(self.api_key, plan.api_version)
        field = self.entries_field_of(plan.request)
        layout = array_layout(cls, field, data, offset)
        if layout is None or len(layout.elements) != len(self.entries(plan.request)):
            return encode(plan.forward)
        spans, rewritten = layout.elements, plan.rewritten
        view = memoryview(data)
        parts = [
            encode_entity(rewritten[i]) if i in rewritten else view[spans[i][0] : spans[i][1]]
            for i in plan.kept
        ]
        return layout.with_elements(parts)

    def merge_body(self, plan: SplitPlan, body: bytes) -> bytes:
        """The client's response body from the broker's (`body`): as `merge` builds it, but
        with the broker's results passed on as their own bytes, not decoded and re-encoded;
        `merge` itself where the answer cannot be walked (it then raises CodecError)."""
        cls = response_class(self.api_key, plan.api_version)
        capture = _key_fields(cls, self.results_field, self.result_key_fields)
        layout = array_layout(cls, self.results_field, body, capture=capture, exact=False)
        if layout is None:
            return self.merge(plan, self.decode_response(plan.api_version, body))
        keys = [self.result_keys(_Fields(fields)) for fields in layout.keys]
        spans, view = layout.elements, memoryview(body)
        parts = [
            view[spans[item][0] : spans[item][1]] if isinstance(item, int) else encode_entity(item)
            for item in _arranged(plan.slots, keys)
        ]
        return layout.with_elements(parts)

    def merge(self, plan: SplitPlan, broker_response: Any | None) -> bytes:
        """The client's response body: broker results and synthetic ones in request order."""
        expected = response_class(self.api_key, plan.api_version)
        if broker_response is None:
            if plan.forward is not None:
                raise ValueError("a request was forwarded, so its broker response is needed")
            results: Sequence[Any] = ()
        else:
            if type(broker_response) is not expected:
                raise ValueError(
                    f"broker response is {type(broker_response).__name__} "
                    f"v{broker_response.__version__}, expected v{plan.api_version}"
                )
            results = getattr(broker_response, self.results_field)

        keys = [self.result_keys(result) for result in results]
        merged = [
            results[item] if isinstance(item, int) else item for item in _arranged(plan.slots, keys)
        ]
        if broker_response is None:
            response = self.empty_response(expected, plan.request, tuple(merged))
        else:
            response = dataclasses.replace(broker_response, **{self.results_field: tuple(merged)})
        return encode(response)

    # Per-API hooks.

    # The fields of a broker result that `result_keys` reads (those its version has).
    result_key_fields: ClassVar[tuple[str, ...]] = ("name",)

    def entries_field_of(self, request: Any) -> str:
        """The name of the request's per-topic (or per-resource) array."""
        return self.entries_field

    def entries(self, request: Any) -> Sequence[Any]:
        """The request's per-topic (or per-resource) array."""
        return getattr(request, self.entries_field_of(request))  # type: ignore[no-any-return]

    def with_entries(self, request: Any, entries: tuple[Any, ...]) -> Any:
        """The same request with a reduced array; every other field (validate_only...) kept."""
        return dataclasses.replace(request, **{self.entries_field_of(request): entries})

    @abstractmethod
    def item(self, request: Any, index: int, entry: Any) -> AnyTopicItem | None:
        """The per-topic view of one entry, or None for a non-topic resource."""

    def resource_items(self, request: Any) -> list[ConfigResourceItem]:
        """The entries that are config resources other than topics (none but for config APIs)."""
        return []

    def changes_broker_configs(self, request: Any) -> bool:
        """Whether the request changes a broker's (or the cluster-wide default) configs."""
        return False

    @abstractmethod
    def key(self, entry: Any) -> Hashable:
        """What identifies an entry for duplicates and for finding its result."""

    @abstractmethod
    def result_keys(self, result: Any) -> tuple[Hashable, ...]:
        """The keys under which a broker result can answer an entry."""

    def resolved(self, entry: Any, denial: Denial | None) -> Any:
        """The entry as its answer names it: with the resolved name where it had only an id."""
        return entry

    def refused_locally(self, keys: Sequence[Hashable]) -> dict[int, str]:
        """Entries to answer with INVALID_REQUEST without the broker (index -> reason)."""
        return {}

    def rewrite(self, entry: Any, rewrite: Rewrite) -> Any:
        """The entry as the policy's overrides change it; only creates and config changes can."""
        raise ValueError(f"API key {self.api_key} entries cannot be rewritten")

    @abstractmethod
    def synthetic(self, result_cls: type[Any], copies: list[Any], error: ErrorChoice) -> Any:
        """The result for an entry answered here (all its copies, where the broker answers once)."""

    def empty_response(
        self, response_cls: type[Any], request: Any, results: tuple[Any, ...]
    ) -> Any:
        """A response built from synthetic results alone, when nothing was forwarded."""
        return build(response_cls, throttle_time=ZERO_THROTTLE, **{self.results_field: results})


@dataclass(frozen=True, slots=True)
class _Fields:
    """A broker result's key fields, read from its bytes, as `result_keys` reads them."""

    fields: Mapping[str, Any]

    def __getattr__(self, name: str) -> Any:
        try:
            return self.fields[name]
        except KeyError:
            raise AttributeError(name) from None


def _key_fields(cls: type[Any], field_name: str, wanted: tuple[str, ...]) -> tuple[str, ...]:
    """Those of `wanted` that the results of this response version have."""
    return tuple(name for name in wanted if name in _field_names(element_class(cls, field_name)))


def _arranged(slots: Sequence[Slot], keys: Sequence[tuple[Hashable, ...]]) -> list[Any]:
    """The answer's results in request order: for each slot its synthetic result, or the
    position of the first unused broker result with its key; then every broker result that
    matched no slot, by position (the client still gets what the broker added)."""
    by_key: dict[Hashable, deque[int]] = {}
    for position, result_keys in enumerate(keys):
        for key in result_keys:
            by_key.setdefault(key, deque()).append(position)
    used = [False] * len(keys)
    arranged: list[Any] = []
    for slot in slots:
        if slot.synthetic is not None:
            arranged.append(slot.synthetic)
            continue
        queue = by_key.get(slot.key)
        while queue:
            position = queue.popleft()
            if not used[position]:
                used[position] = True
                arranged.append(position)
                break
    arranged.extend(position for position in range(len(keys)) if not used[position])
    return arranged
