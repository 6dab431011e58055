"""A topic's state after a config change the broker accepted, where the request determines it.

The cluster-state cache keeps this instead of dropping the topic, so the next decision on it
costs no round trip. Where the outcome depends on something the proxy may not know (a config
deleted or dropped reverts to a default; a list appended to), there is no state: the topic is
dropped from the cache and read again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from kafka_policy_proxy.policy.model import (
    Action,
    AlterKind,
    ConfigMap,
    ConfigOp,
    ConfigSource,
    Override,
    TopicRequest,
    TopicState,
)
from kafka_policy_proxy.policy.overrides import PARTITIONS


def state_after(request: TopicRequest, overrides: Sequence[Override]) -> TopicState | None:
    """The topic once the broker applied this allowed config change; None if it cannot be told."""
    current = request.current
    if (
        request.action is not Action.ALTER
        or request.alter_kind is not AlterKind.CONFIGS
        or request.validate_only
        or current is None
        or current.overrides is None
    ):
        return None
    changes = request.requested.changes
    if any(c.op is not ConfigOp.SET or c.value is None for c in changes):
        return None
    values: dict[str, str | None] = {c.name: c.value for c in changes}
    # What a rule rewrote is what the broker was sent.
    values.update((o.target, o.after) for o in overrides if o.target != PARTITIONS)
    if request.requested.config_source is ConfigSource.REPLACE:
        # AlterConfigs replaces every override: one it leaves out reverts to its default.
        if not current.overrides <= values.keys():
            return None
        set_here = frozenset(values)
    else:
        set_here = current.overrides | values.keys()
    return replace(current, configs=ConfigMap({**current.configs, **values}), overrides=set_here)
