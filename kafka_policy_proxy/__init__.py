"""kafka-policy-proxy: one import namespace for the whole product.

The folders stay at the top of the checkout (cli/, codec/, policy/, proxy/, pipeline/); each
is linked here, so that installed they are kafka_policy_proxy.cli, kafka_policy_proxy.codec
and so on, and never clash with another distribution's `policy` or `proxy`
(docs/architecture.md).
"""
