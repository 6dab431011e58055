"""Fixtures shared by the pipeline tests and the integration tests that feed them real data."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

# The real cluster and proxies, shared by tests/integration/ and tests/security/.
pytest_plugins = ["tests.integration.cluster_fixtures"]

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One local[2] Spark session for the whole test run, as the issue's jobs are run."""
    from pipeline.session import spark_session

    session = spark_session("local[2]", app_name="kafka-policy-proxy-tests")
    yield session
    session.stop()
