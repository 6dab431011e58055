"""The development harness: the local Kafka cluster, the throwaway CA and wire helpers.

Tests and benchmarks import it; no product module does, and it is not in the wheel.
"""
