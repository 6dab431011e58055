"""Fixtures shared by the pipeline tests and the integration tests that feed them real data, and
how `make test` shares the tests between its two workers (pytest-xdist, `--dist loadscope`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

# The real cluster and proxies, shared by tests/integration/ and tests/security/.
pytest_plugins = ["tests.integration.cluster_fixtures"]

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Under `make test` (two xdist workers, --dist loadscope) each module runs whole on one worker,
# and every module on the shared cluster (fixed ports, started once per worker) on the same
# one. These modules start clusters of their own, on ports of their own, and run beside it.
SHARED_CLUSTER = ("tests/integration/", "tests/security/")
OWN_CLUSTERS = frozenset(
    {
        "tests/integration/test_audit_topic.py",
        "tests/integration/test_client_properties.py",
        "tests/integration/test_image.py",
        "tests/integration/test_local_kafka.py",
        "tests/integration/test_oauthbearer.py",
        "tests/integration/test_soak.py",
        "tests/security/test_streams_heartbeat.py",
    }
)


def work_unit(nodeid: str) -> str:
    """The unit one worker runs whole: the shared cluster's modules together, else a module."""
    module = nodeid.split("::", maxsplit=1)[0]
    if module.startswith(SHARED_CLUSTER) and module not in OWN_CLUSTERS:
        return "the shared cluster"
    return module


# Units that take minutes whatever their test count: handed out first, so that no long unit
# starts when the other worker is nearly done (xdist's default order, by test count, left
# the one-test soak to the end).
LONG_FIRST = (
    "tests/integration/test_soak.py",
    "tests/integration/test_image.py",  # builds the image: about two minutes
    "tests/integration/test_audit_topic.py",
    "tests/integration/test_oauthbearer.py",  # about three minutes, half of it Spark
    "tests/integration/test_client_properties.py",  # 1-2.5 minutes, Spark the most of it
    "tests/security/test_streams_heartbeat.py",
    "tests/integration/test_local_kafka.py",
    "tests/unit/pipeline/",  # a Spark session per worker
    "tests/unit/cli/test_pipeline_command.py",
)


def _start_rank(nodeid: str) -> int:
    """When a test's unit should be handed out: the shared cluster, then LONG_FIRST in order."""
    unit = work_unit(nodeid)
    if unit == "the shared cluster":
        return 0
    for rank, prefix in enumerate(LONG_FIRST, start=1):
        if unit.startswith(prefix):
            return rank
    return len(LONG_FIRST) + 1


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Order the tests by when their unit should start (stable: other orders hold within)."""
    items.sort(key=lambda item: _start_rank(item.nodeid))


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """loadscope with work_unit as its scope, its units handed out in collection order."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    config.option.loadscopereorder = False

    class ByWorkUnit(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return ByWorkUnit(config, log)


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One local[2] Spark session for the whole test run, as the issue's jobs are run."""
    from kafka_policy_proxy.pipeline.session import spark_session

    session = spark_session("local[2]", app_name="kafka-policy-proxy-tests")
    yield session
    session.stop()
