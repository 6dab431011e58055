"""The memory limits of issue 31: their defaults, how they follow a smaller frame limit, and
errors that name the key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kafka_policy_proxy.proxy.config import ConfigError, LimitsConfig, load_config

MIB = 1 << 20


def write(tmp_path: Path, limits: dict[str, object]) -> Path:
    path = tmp_path / "proxy.yaml"
    path.write_text(
        yaml.safe_dump({"upstream": {"bootstrap_servers": ["kafka:9092"]}, "limits": limits})
    )
    return path


def test_defaults_protect_a_small_deployment() -> None:
    limits = LimitsConfig()
    assert limits.max_judged_request_bytes == 8 * MIB
    assert limits.max_connection_buffered_bytes == 16 * MIB


def test_defaults_follow_a_smaller_frame_limit() -> None:
    limits = LimitsConfig(max_frame_bytes=4 * MIB, max_buffered_bytes=8 * MIB)
    assert limits.max_judged_request_bytes == 4 * MIB
    assert limits.max_connection_buffered_bytes == 16 * MIB
    limits = LimitsConfig(max_judged_request_bytes=32 * MIB)
    assert limits.max_connection_buffered_bytes == 32 * MIB


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        (
            {"max_frame_bytes": 4 * MIB, "max_judged_request_bytes": 5 * MIB},
            r"limits.max_judged_request_bytes \(5242880\) must be at most "
            r"limits.max_frame_bytes \(4194304\)",
        ),
        (
            {"max_judged_request_bytes": 8 * MIB, "max_connection_buffered_bytes": 4 * MIB},
            r"limits.max_connection_buffered_bytes \(4194304\) must be at least "
            r"limits.max_judged_request_bytes \(8388608\)",
        ),
        ({"max_judged_request_bytes": 10}, "limits.max_judged_request_bytes:"),
        ({"max_connection_buffered_bytes": -1}, "limits.max_connection_buffered_bytes:"),
    ],
)
def test_a_bad_memory_limit_is_refused_by_name(
    tmp_path: Path, limits: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(write(tmp_path, limits))
