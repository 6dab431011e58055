"""Broker policy classes (CreateTopicPolicy, AlterConfigPolicy) run in-process through JPype.

The JVM starts the first time a policy loads a `java_policy` rule. Each load gets its own
class loader over the rule's jar and classpath, so a reload picks up a new jar and closing
the policy lets the old classes go.

The RequestMetadata objects are built as a Kafka 4.1 controller builds them
(ReplicationControlManager.createTopic, ConfigurationControlManager.validateAlterConfig):
- a create with an explicit assignment passes null partitions and replication factor and the
  assignment; otherwise the counts with -1 resolved to the broker defaults and no assignment;
- a create with configs is first shown to the AlterConfigPolicy, with every config it sets;
- a config change shows the AlterConfigPolicy only the keys whose value changes, with the new
  value (null where the change removes it); AlterConfigs' implicit removals are left out.
Where the broker refuses a request before asking its policy (a null config value, zero
partitions or replication factor), the policy is not asked either: the broker's error stands.
"""

from __future__ import annotations

import glob
import hashlib
import logging
import os
import shlex
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from kafka_policy_proxy.policy.checks import ALTER_CONFIGS, CREATE, Check, Verbatim
from kafka_policy_proxy.policy.cluster import ClusterState
from kafka_policy_proxy.policy.model import ConfigOp, ConfigSource, Fact, TopicRequest
from kafka_policy_proxy.policy.rules import JavaConfigValue, JavaPolicySpec, Rule

logger = logging.getLogger(__name__)

JVM_OPTIONS_ENV = "KAFKA_POLICY_PROXY_JVM_OPTIONS"
# Policies are small; the JVM shares the proxy's memory budget.
DEFAULT_JVM_OPTIONS = "-Xmx256m -Xss1m"
CREATE_POLICY = "org.apache.kafka.server.policy.CreateTopicPolicy"
ALTER_POLICY = "org.apache.kafka.server.policy.AlterConfigPolicy"
VIOLATION = "org.apache.kafka.common.errors.PolicyViolationException"
INTERFACES = {"create": CREATE_POLICY, "alter_config": ALTER_POLICY}


class JavaPolicyError(Exception):
    """A java_policy rule could not be loaded; `key` names the setting to fix."""

    def __init__(self, message: str, key: str) -> None:
        super().__init__(message)
        self.key = key


def _jpype() -> Any:
    """The jpype module with a started JVM."""
    try:
        import jpype
    except ImportError:
        raise JavaPolicyError(
            "Java policies need JPype: pip install '.[java]' in a clone of kafka-policy-proxy, "
            "or the image built with scripts/build-image --with-java",
            "java_policy",
        ) from None
    if not jpype.isJVMStarted():
        options = shlex.split(os.environ.get(JVM_OPTIONS_ENV, DEFAULT_JVM_OPTIONS))
        try:
            # -Xrs: SIGHUP (reload) and SIGTERM (drain) stay the proxy's, not the JVM's.
            jpype.startJVM("-Xrs", *options, convertStrings=False)
        except (OSError, RuntimeError) as exc:
            raise JavaPolicyError(
                f"cannot start a JVM ({exc}); install a JDK 17+ or set JAVA_HOME", "java_policy"
            ) from None
    return jpype


def resolve_paths(spec: JavaPolicySpec, base_dir: Path | None) -> list[Path]:
    """The jar then the classpath entries, relative to `base_dir`, globs expanded."""
    base = base_dir or Path.cwd()
    found = [base / spec.jar]
    if not found[0].is_file():
        raise JavaPolicyError(f"{found[0]}: no such jar", "java_policy.jar")
    for entry in spec.classpath:
        matches = sorted(glob.glob(str(base / entry)))
        if not matches:
            raise JavaPolicyError(f"{base / entry}: no such file", "java_policy.classpath")
        found += [Path(m) for m in matches]
    return found


def jar_digest(spec: JavaPolicySpec, base_dir: Path | None) -> str:
    """A hash of the policy jar's bytes, so that a new jar is a new policy revision."""
    path = (base_dir or Path.cwd()) / spec.jar
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return "missing"


def _config_text(value: JavaConfigValue) -> str:
    # configure() gets strings, as the broker passes its server.properties.
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class JavaPolicy:
    """One java_policy rule: a class loader and an instance per interface, as the broker has."""

    def __init__(self, rule: str, spec: JavaPolicySpec, base_dir: Path | None) -> None:
        self.rule = rule
        self.spec = spec
        jpype = _jpype()
        self._jpype = jpype
        paths = resolve_paths(spec, base_dir)
        url = jpype.JClass("java.net.URL")
        urls = jpype.JArray(url)([url(p.resolve().as_uri()) for p in paths])
        parent = jpype.JClass("java.lang.ClassLoader").getPlatformClassLoader()
        self._loader = jpype.JClass("java.net.URLClassLoader")(f"policy-{rule}", urls, parent)
        self._instances: dict[str, Any] = {}
        self._closed = False
        try:
            self._start()
            self._classes()
        except BaseException:
            self.close()
            raise

    def _class(self, name: str, key: str) -> Any:
        try:
            return self._jpype.JClass("java.lang.Class").forName(name, True, self._loader)
        except self._jpype.JException as exc:
            where = "java_policy.classpath" if name.startswith("org.apache.kafka.") else key
            hint = " (add the broker's kafka-clients jar)" if where.endswith("classpath") else ""
            raise JavaPolicyError(f"cannot load {name}: {exc}{hint}", where) from None

    def _start(self) -> None:
        spec = self.spec
        # Kafka's own classes first: without them the policy class cannot link either.
        self._violation = self._class(VIOLATION, "java_policy.classpath")
        interfaces = {i: self._class(INTERFACES[i], "java_policy.classpath") for i in INTERFACES}
        policy_class = self._class(spec.class_, "java_policy.class")
        config = self._jpype.JClass("java.util.HashMap")()
        for key, value in spec.config.items():
            config.put(key, _config_text(value))
        for interface in dict.fromkeys(spec.applies_to):
            if not interfaces[interface].isAssignableFrom(policy_class):
                raise JavaPolicyError(
                    f"{spec.class_} does not implement {INTERFACES[interface]}",
                    "java_policy.applies_to",
                )
            # The broker builds one instance per interface, each configured once.
            try:
                instance = policy_class.getDeclaredConstructor().newInstance()
                instance.configure(config)
            except self._jpype.JException as exc:
                raise JavaPolicyError(
                    f"{spec.class_} failed to start: {exc}", "java_policy.class"
                ) from None
            self._instances[interface] = instance

    def checks(self) -> list[Check]:
        """The rule's checks: creates and topic config changes, each reading what it needs."""
        found = []
        if self._instances:
            found.append(
                Check(frozenset({CREATE}), self._check_create, frozenset({Fact.BROKER_DEFAULTS}))
            )
        if "alter_config" in self._instances:
            found.append(
                Check(frozenset({ALTER_CONFIGS}), self._check_alter, frozenset({Fact.TOPIC_STATE}))
            )
        return found

    # -- checks ---------------------------------------------------------------------------

    def _closed_message(self, request: TopicRequest) -> str:
        return (
            f"topic {request.name!r}: the Java policy {self.spec.class_} was closed "
            "(a reload replaced it); denied"
        )

    def _check_create(self, request: TopicRequest, cluster: ClusterState) -> str | None:
        if self._closed:
            return self._closed_message(request)
        req = request.requested
        configs: dict[str, str | None] = {c.name: c.value for c in req.changes}
        if any(value is None for value in configs.values()):
            return None  # the broker answers INVALID_CONFIG before any policy
        if "alter_config" in self._instances and configs:
            denied = self._call(
                request, "alter_config", lambda: self._alter_metadata(request.name, configs)
            )
            if denied is not None:
                return denied
        if "create" not in self._instances:
            return None
        if req.generated_assignment:
            if req.partitions == 0 or req.replication_factor == 0:
                return None  # INVALID_PARTITIONS / INVALID_REPLICATION_FACTOR first
            if req.partitions is None or req.replication_factor is None:
                return (
                    f"topic {request.name!r}: the broker defaults for partitions or replication "
                    "factor are unknown, so the Java policy cannot be asked; denied"
                )
        return self._call(request, "create", lambda: self._create_metadata(request, configs))

    def _check_alter(self, request: TopicRequest, cluster: ClusterState) -> str | None:
        if self._closed:
            return self._closed_message(request)
        altered = altered_configs(request)
        return self._call(
            request, "alter_config", lambda: self._alter_metadata(request.name, altered)
        )

    def _call(
        self, request: TopicRequest, interface: str, metadata: Callable[[], Any]
    ) -> str | None:
        jpype = self._jpype
        try:
            self._instances[interface].validate(metadata())
        except jpype.JException as exc:
            if self._violation.isInstance(exc):
                message = exc.getMessage()
                return Verbatim("" if message is None else str(message))
            logger.error(
                "java policy %s (rule %r) failed on topic %r (%s); denying\n%s",
                self.spec.class_,
                self.rule,
                request.name,
                request.action.value,
                exc.stacktrace(),
            )
            return (
                f"topic {request.name!r}: the Java policy {self.spec.class_} failed "
                f"({exc.getClass().getName()}: {exc.getMessage()}); denied"
            )
        return None

    # -- RequestMetadata ------------------------------------------------------------------

    def _classes(self) -> None:
        """Look the Java classes up once: JClass lookups cost more than the policy call."""
        jpype = self._jpype

        def kafka(name: str) -> Any:
            return jpype.JClass(name, loader=self._loader)

        self._integer = jpype.JClass("java.lang.Integer")
        self._short = jpype.JClass("java.lang.Short")
        self._hash_map = jpype.JClass("java.util.HashMap")
        self._array_list = jpype.JClass("java.util.ArrayList")
        self._unmodifiable = jpype.JClass("java.util.Collections").unmodifiableMap
        self._create_request = kafka(CREATE_POLICY + "$RequestMetadata")
        self._alter_request = kafka(ALTER_POLICY + "$RequestMetadata")
        self._resource = kafka("org.apache.kafka.common.config.ConfigResource")
        self._topic_type = kafka("org.apache.kafka.common.config.ConfigResource$Type").TOPIC

    def _create_metadata(self, request: TopicRequest, configs: Mapping[str, str | None]) -> Any:
        req = request.requested
        integer = self._integer
        if not req.generated_assignment:
            assignments = self._hash_map()
            for partition, replicas in req.assignment:
                brokers = self._array_list()
                for broker in replicas:
                    brokers.add(integer.valueOf(broker))
                assignments.put(integer.valueOf(partition), brokers)
            return self._create_request(
                request.name, None, None, assignments, self._unmodifiable(self._map(configs))
            )
        assert req.partitions is not None and req.replication_factor is not None
        short = self._short.valueOf(self._jpype.JShort(req.replication_factor))
        return self._create_request(
            request.name,
            integer.valueOf(req.partitions),
            short,
            None,
            self._unmodifiable(self._map(configs)),
        )

    def _alter_metadata(self, topic: str, configs: Mapping[str, str | None]) -> Any:
        resource = self._resource(self._topic_type, topic)
        return self._alter_request(resource, self._map(configs))

    def _map(self, values: Mapping[str, str | None]) -> Any:
        result = self._hash_map()
        for key, value in values.items():
            result.put(key, value)
        return result

    def close(self) -> None:
        """Close each instance, then the class loader; errors are logged."""
        self._closed = True
        if not self._jpype.isJVMStarted():
            self._instances.clear()
            return  # at exit, after JPype shut the JVM down: nothing is left to close
        for interface, instance in self._instances.items():
            try:
                instance.close()
            except Exception:
                logger.exception("java policy %s (%s) failed to close", self.spec.class_, interface)
        self._instances.clear()
        try:
            self._loader.close()
        except Exception:
            logger.exception("the class loader of java policy %s failed to close", self.spec.class_)


def altered_configs(request: TopicRequest) -> dict[str, str | None]:
    """The configs a change really alters (name -> new value, None where removed), as the
    controller hands them to an AlterConfigPolicy: keys set to their current value are left
    out, and so are AlterConfigs' implicit removals (KAFKA-14195). Where the topic's own
    configs are unknown, every named key counts as altered."""
    current = request.current
    req = request.requested
    own = None
    if current is not None and current.overrides is not None:
        own = {key: current.configs.get(key) for key in current.overrides}
    incremental = req.config_source is ConfigSource.INCREMENTAL
    altered: dict[str, str | None] = {}
    for change in req.changes:
        value = change.value
        if incremental and change.op is ConfigOp.DELETE:
            value = None
        elif incremental and change.op is not ConfigOp.SET:
            value = req.configs.get(change.name)  # APPEND/SUBTRACT: the list it leaves
        if own is not None and value == own.get(change.name):
            altered.pop(change.name, None)
        else:
            altered[change.name] = value
    return altered


def java_checks(rule: Rule, base_dir: Path | None) -> tuple[list[Check], JavaPolicy]:
    """Load a java_policy rule; its checks and the loaded policy (to close)."""
    assert rule.java_policy is not None
    policy = JavaPolicy(rule.name, rule.java_policy, base_dir)
    return policy.checks(), policy
