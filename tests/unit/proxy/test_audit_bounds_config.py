"""The audit section's bounds (issue 31): defaults that protect a small deployment, and a bad
value refused naming its key."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from kafka_policy_proxy.proxy.config import AuditConfig, ConfigError, load_config

UPSTREAM = {"bootstrap_servers": ["kafka:9092"]}


def write(tmp_path: Path, audit: dict[str, object]) -> Path:
    path = tmp_path / "proxy.yaml"
    path.write_text(yaml.safe_dump({"upstream": UPSTREAM, "audit": audit}))
    return path


def test_the_defaults_bound_one_request_one_principal_and_the_disk() -> None:
    audit = AuditConfig()
    assert audit.max_records_per_request == 100 and audit.summary_sample == 20
    assert audit.min_retention_s == 3600
    assert audit.principal_budget_bytes_per_minute == 10 * 1024 * 1024
    assert audit.max_total_bytes is None  # max_bytes x (backups + 2) = 700 MiB


def test_closed_takes_the_file_alone(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, {"on_failure": "closed", "file": "/tmp/a.jsonl"}))
    assert config.audit.on_failure == "closed"


@pytest.mark.parametrize(
    ("audit", "message"),
    [
        ({"max_records_per_request": 0}, "audit.max_records_per_request"),
        ({"principal_budget_bytes_per_minute": -1}, "audit.principal_budget_bytes_per_minute"),
        ({"min_retention_s": -1}, "audit.min_retention_s"),
        (
            {"max_bytes": 1 << 20, "backups": 5, "max_total_bytes": 5 << 20},
            "max_total_bytes must hold max_bytes x (backups + 1) = 6291456 bytes",
        ),
    ],
)
def test_a_bad_value_names_its_key(tmp_path: Path, audit: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(write(tmp_path, audit))
