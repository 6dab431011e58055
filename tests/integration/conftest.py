"""Fixtures the enforcement modules share, one of each for the package."""

from tests.integration.enforcement_support import broker, clients, direct

__all__ = ["broker", "clients", "direct"]
