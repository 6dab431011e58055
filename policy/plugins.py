"""Python plugins: a base class per lifecycle action, loaded by dotted path."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from kafka_policy_proxy.policy.cluster import ClusterState
from kafka_policy_proxy.policy.model import Action, TopicRequest


class PolicyViolation(Exception):
    """Raised by a plugin to deny a topic; the message is reported as is."""


class PluginLoadError(Exception):
    """A plugin's dotted path did not name a PolicyPlugin subclass, or its constructor failed.

    `index` is the plugin's position in the policy's `plugins` list, when known; `path` the
    policy key to name instead, for a rule that loads code (a java_policy).
    """

    def __init__(
        self, message: str, index: int | None = None, path: tuple[str | int, ...] | None = None
    ) -> None:
        super().__init__(message)
        self.index = index
        self.path = path


class PolicyPlugin:
    """Base class for plugins: override the validate_* methods you need; each may raise
    `PolicyViolation(message)`. Anything else raised denies the topic (fail closed)."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.config = config

    def validate_create_topic(self, request: TopicRequest, cluster: ClusterState) -> None:
        """Check a topic creation (CreateTopics or auto-creation)."""

    def validate_alter_topic(self, request: TopicRequest, cluster: ClusterState) -> None:
        """Check a config change, partition increase or reassignment (`request.alter_kind`)."""

    def validate_delete_topic(self, request: TopicRequest, cluster: ClusterState) -> None:
        """Check a topic deletion."""

    def validate_delete_records(self, request: TopicRequest, cluster: ClusterState) -> None:
        """Check a DeleteRecords request (`request.record_offsets`)."""

    def close(self) -> None:
        """Release resources; called when the policy is closed."""


def dispatch(plugin: PolicyPlugin, request: TopicRequest, cluster: ClusterState) -> None:
    """Call the plugin method for the request's action."""
    action = request.action
    if action is Action.CREATE:
        plugin.validate_create_topic(request, cluster)
    elif action is Action.ALTER:
        plugin.validate_alter_topic(request, cluster)
    elif action is Action.DELETE:
        plugin.validate_delete_topic(request, cluster)
    else:
        plugin.validate_delete_records(request, cluster)


def load_plugin(path: str, config: Mapping[str, Any]) -> PolicyPlugin:
    """Import `package.module.Class` (or `package.module:Class`) and construct it."""
    module_name, sep, attr = path.partition(":")
    if not sep:
        module_name, _, attr = path.rpartition(".")
    if not module_name or not attr:
        raise PluginLoadError(f"{path!r} is not a dotted path to a class")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise PluginLoadError(f"cannot import {module_name!r}: {exc}") from exc
    cls = getattr(module, attr, None)
    if not (isinstance(cls, type) and issubclass(cls, PolicyPlugin)):
        raise PluginLoadError(f"{path!r} is not a subclass of policy.plugins.PolicyPlugin")
    try:
        return cls(config)
    except Exception as exc:
        raise PluginLoadError(f"{path!r} failed to start: {type(exc).__name__}: {exc}") from exc
