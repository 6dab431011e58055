"""Kafka's broker-config to topic-config defaults: what a topic without overrides gets."""

from __future__ import annotations

from collections.abc import Mapping

from kafka_policy_proxy.policy.config_synonyms import TOPIC_CONFIG_SYNONYMS
from kafka_policy_proxy.policy.model import ConfigMap

# Topic configs no broker config sets: Kafka's LogConfig defaults (4.1), as a fresh topic shows.
TOPIC_ONLY_DEFAULTS: Mapping[str, str] = {
    "remote.storage.enable": "false",
    "remote.log.copy.disable": "false",
    "remote.log.delete.on.disable": "false",
    "leader.replication.throttled.replicas": "",
    "follower.replication.throttled.replicas": "",
}

# Broker configs the policy's create builder reads under their own names.
CREATE_DEFAULTS = ("num.partitions", "default.replication.factor")
# Every broker config the defaults are made of: all a read of them needs to ask for (a broker
# has some 250 configs; decoding them all costs milliseconds on every create).
DEFAULT_SOURCES = tuple(
    sorted(
        {broker for synonyms in TOPIC_CONFIG_SYNONYMS.values() for broker, _ in synonyms}
        | set(CREATE_DEFAULTS)
    )
)


def topic_defaults(broker_configs: Mapping[str, str | None]) -> ConfigMap:
    """Map a broker's DescribeConfigs entries to default topic configs (plus create defaults)."""
    defaults = dict(TOPIC_ONLY_DEFAULTS)
    for topic_config, synonyms in TOPIC_CONFIG_SYNONYMS.items():
        for broker_config, factor in synonyms:
            value = broker_configs.get(broker_config)
            if value is None:
                continue
            if factor != 1:
                value = str(int(value) * factor)
            if topic_config == "retention.ms" and int(value) < 0:
                value = "-1"  # as KafkaConfig.logRetentionTimeMillis: any negative is "forever"
            defaults[topic_config] = value
            break
    for name in CREATE_DEFAULTS:
        value = broker_configs.get(name)
        if value is not None:
            defaults[name] = value
    return ConfigMap(defaults)
