"""`python -m kafka_policy_proxy`: the same command as `kafka-policy-proxy`."""

from kafka_policy_proxy.cli import main

main()
