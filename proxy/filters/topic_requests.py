"""The wire-to-policy mapping: the codec's view of one topic (or other config resource) as the
policy's request."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kafka_policy_proxy.codec.topic_view import (
    AlterConfigsItem,
    AnyTopicItem,
    ConfigResourceItem,
    CreatePartitionsItem,
    CreateTopicItem,
    DeleteRecordsItem,
    DeleteTopicItem,
    IncrementalAlterConfigsItem,
    ReassignmentItem,
)
from kafka_policy_proxy.policy.broker_configs import BrokerConfigRequest, ConfigResource
from kafka_policy_proxy.policy.builders import (
    alter_configs_request,
    create_partitions_request,
    create_request,
    delete_records_request,
    delete_topic_request,
    incremental_alter_configs_request,
    reassignment_request,
)
from kafka_policy_proxy.policy.model import ConfigChange, ConfigOp, Principal, TopicRequest
from kafka_policy_proxy.proxy.cluster.live_facts import LiveFacts
from kafka_policy_proxy.proxy.filters.api import RequestContext


def policy_principal(ctx: RequestContext) -> Principal:
    """Who sent the request, as the policy sees it."""
    return Principal(ctx.principal, ctx.client_id or "", ctx.client_address)


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


# Kafka's ConfigResource types other than TOPIC; a broker with no name is the cluster default.
_CONFIG_RESOURCES = {
    4: ConfigResource.BROKER,
    8: ConfigResource.BROKER_LOGGER,
    16: ConfigResource.CLIENT_METRICS,
    32: ConfigResource.GROUP,
}


def config_resource_request(
    item: ConfigResourceItem, principal: Principal, validate_only: bool
) -> BrokerConfigRequest | None:
    """The policy's request for a non-topic config resource; None for a type Kafka lacks."""
    resource = _CONFIG_RESOURCES.get(item.resource_type)
    if resource is None:
        return None
    if resource is ConfigResource.BROKER and not item.name:
        resource = ConfigResource.CLUSTER_DEFAULT
    return BrokerConfigRequest(
        resource=resource,
        name=item.name,
        principal=principal,
        changes=tuple(ConfigChange(name, ConfigOp(op), value) for name, op, value in item.ops),
        replace=item.replace,
        validate_only=validate_only,
    )


def forgetting(facts: LiveFacts, names: Sequence[str]) -> Callable[[bytes], bytes]:
    """A response hook: the broker may have just created these topics, so forget them."""

    def after(body: bytes) -> bytes:
        for name in names:
            facts.invalidate(name)
        return body

    return after
