"""Fixtures shared by the pipeline tests and the integration tests that feed them real data, and
how `make test` shares the tests between its two workers (pytest-xdist, `--dist loadgroup`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

# The real cluster and proxies, shared by tests/integration/ and tests/security/.
pytest_plugins = ["tests.integration.cluster_fixtures"]

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Every module that uses the shared cluster runs on one worker: the cluster's ports are fixed.
SHARED_CLUSTER = "kafka"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Keep each module on one worker (its module fixtures start once), and every module on
    the shared cluster together, so that one worker starts it."""
    on_cluster = {
        item.nodeid.split("::")[0] for item in items if SHARED_CLUSTER in item.fixturenames
    }
    for item in items:
        module = item.nodeid.split("::")[0]
        group = "the shared cluster" if module in on_cluster else module
        item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One local[2] Spark session for the whole test run, as the issue's jobs are run."""
    from kafka_policy_proxy.pipeline.session import spark_session

    session = spark_session("local[2]", app_name="kafka-policy-proxy-tests")
    yield session
    session.stop()
