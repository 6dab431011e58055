"""One interface over three real admin clients, so that a test can run each guarded API with each.

`JavaAdmin` drives the Java AdminClient (tests/integration/java/AdminOps.java, one JVM),
`ConfluentAdmin` confluent-kafka (librdkafka) and `KafkaPythonAdmin` kafka-python. Every batch
call returns one `TopicOutcome` per topic, in request order, with the error normalized to Kafka's
own error name (`POLICY_VIOLATION`, `TOPIC_ALREADY_EXISTS`, ...) and the client's text in
`message`. `BrokerView` reads the cluster straight from a broker, for assertions that must not
go through a proxy.
"""

from tests.integration.admin_clients.clients import admin_clients, close_all
from tests.integration.admin_clients.confluent_admin import BrokerView, ConfluentAdmin
from tests.integration.admin_clients.interface import AdminHarness
from tests.integration.admin_clients.java_admin import JavaAdmin
from tests.integration.admin_clients.kafka_python_admin import KafkaPythonAdmin
from tests.integration.admin_clients.model import (
    CLIENT_NAMES,
    AdminHarnessError,
    ConfigOp,
    ConfigValue,
    NewTopicSpec,
    NotSupportedByClient,
    PartitionIncrease,
    Sasl,
    TopicInfo,
    TopicOutcome,
    error_name,
    fold_per_topic,
)

__all__ = [
    "CLIENT_NAMES",
    "AdminHarness",
    "AdminHarnessError",
    "BrokerView",
    "ConfigOp",
    "ConfigValue",
    "ConfluentAdmin",
    "JavaAdmin",
    "KafkaPythonAdmin",
    "NewTopicSpec",
    "NotSupportedByClient",
    "PartitionIncrease",
    "Sasl",
    "TopicInfo",
    "TopicOutcome",
    "admin_clients",
    "close_all",
    "error_name",
    "fold_per_topic",
]
