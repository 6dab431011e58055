"""Config secrets: SecretStr inline or read from a `<name>_file`, never echoed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kafka_policy_proxy.proxy.config import ConfigError, load_config

SECRET = "hunter2-very-secret"


def write(tmp_path: Path, sasl: dict[str, Any]) -> Path:
    path = tmp_path / "proxy.yaml"
    config = {"upstream": {"bootstrap_servers": "kafka:9092"}, "cluster_state": {"sasl": sasl}}
    path.write_text(yaml.safe_dump(config))
    return path


def sasl(**keys: Any) -> dict[str, Any]:
    return {"mechanism": "PLAIN", "username": "admin", **keys}


def test_an_inline_password_is_a_secret(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, sasl(password=SECRET)))
    assert config.cluster_state.sasl is not None
    assert config.cluster_state.sasl.password.get_secret_value() == SECRET
    assert SECRET not in repr(config)
    assert SECRET not in str(config)


@pytest.mark.parametrize(
    ("content", "expected"), [("s3\n", "s3"), ("s3", "s3"), ("s3\n\n", "s3\n")]
)
def test_password_file_drops_one_trailing_newline(
    tmp_path: Path, content: str, expected: str
) -> None:
    secret = tmp_path / "password"
    secret.write_text(content)
    config = load_config(write(tmp_path, sasl(password_file=str(secret))))
    assert config.cluster_state.sasl is not None
    assert config.cluster_state.sasl.password.get_secret_value() == expected
    assert config.cluster_state.sasl.password_file == secret


def test_password_file_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = tmp_path / "password"
    secret.write_text(SECRET)
    for name, value in {
        "KPP_UPSTREAM__BOOTSTRAP_SERVERS": "kafka:9092",
        "KPP_CLUSTER_STATE__SASL__MECHANISM": "SCRAM-SHA-512",
        "KPP_CLUSTER_STATE__SASL__USERNAME": "admin",
        "KPP_CLUSTER_STATE__SASL__PASSWORD_FILE": str(secret),
    }.items():
        monkeypatch.setenv(name, value)
    sasl_config = load_config(None).cluster_state.sasl
    assert sasl_config is not None
    assert sasl_config.password.get_secret_value() == SECRET


def test_password_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KPP_CLUSTER_STATE__SASL__PASSWORD", SECRET)
    sasl_config = load_config(write(tmp_path, sasl())).cluster_state.sasl
    assert sasl_config is not None
    assert sasl_config.password.get_secret_value() == SECRET


@pytest.mark.parametrize("keys", [{}, {"password": SECRET, "password_file": "/dev/null"}])
def test_exactly_one_of_password_and_password_file(tmp_path: Path, keys: dict[str, Any]) -> None:
    with pytest.raises(ConfigError) as refused:
        load_config(write(tmp_path, sasl(**keys)))
    assert "cluster_state.sasl: Value error, set exactly one of password and password_file" in str(
        refused.value
    )
    assert SECRET not in str(refused.value)


def test_an_unreadable_password_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    with pytest.raises(
        ConfigError, match=rf"cluster_state.sasl: .*password_file: cannot read {missing}"
    ):
        load_config(write(tmp_path, sasl(password_file=str(missing))))


@pytest.mark.parametrize("bad", [[SECRET], {"value": SECRET}, 12345678])
def test_a_bad_secret_value_is_not_echoed(tmp_path: Path, bad: Any) -> None:
    with pytest.raises(ConfigError) as refused:
        load_config(write(tmp_path, sasl(password=bad)))
    message = str(refused.value)
    assert "cluster_state.sasl.password: Input should be a valid string" in message
    assert str(bad if not isinstance(bad, list | dict) else SECRET) not in message
    # Nor in a traceback: the ValidationError, which quotes its input, is not chained.
    assert refused.value.__cause__ is None and refused.value.__suppress_context__


def test_another_error_in_the_section_does_not_echo_the_secret(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="mechanism: Input should be") as refused:
        load_config(write(tmp_path, sasl(password=SECRET, mechanism="GSSAPI")))
    assert SECRET not in str(refused.value)
