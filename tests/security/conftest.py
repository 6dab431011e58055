"""Fixtures shared by the security tests' modules: the broker-config attacks' SASL proxy, one
for the package, and the configs they restore."""

from tests.security.broker_configs_support import broker_configs_proxy, restored

__all__ = ["broker_configs_proxy", "restored"]
