"""`kafka-policy-proxy config show|schema`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from kafka_policy_proxy.cli import main
from kafka_policy_proxy.proxy.config import ProxyConfig

SECRET = "hunter2-very-secret"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exited:
        main(list(argv))
    out, err = capsys.readouterr()
    return int(exited.value.code or 0), out, err


def shown(out: str) -> dict[str, str]:
    """Each `key: value  # source` line of `config show`, by dotted key, as 'value # source'."""
    lines: dict[str, str] = {}
    path: list[str] = []
    for line in out.splitlines():
        depth = (len(line) - len(line.lstrip())) // 2
        key, _, rest = line.strip().partition(":")
        del path[depth:]
        if not rest:
            path.append(key)
        else:
            lines[".".join([*path, key])] = rest.strip()
    return lines


def test_show_names_file_env_and_default_sources(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "proxy.yaml"
    config.write_text(
        "upstream:\n  bootstrap_servers: [kafka-1:9092, kafka-2:9092]\n"
        "listeners:\n  bootstrap_port: 9300\n"
    )
    monkeypatch.setenv("KPP_LISTENERS__BOOTSTRAP_PORT", "9400")
    monkeypatch.setenv("KPP_LOGGING__LEVEL", "debug")
    code, out, _ = run(capsys, "config", "show", "--config", str(config))
    assert code == 0
    values = shown(out)
    assert values["upstream.bootstrap_servers"] == "['kafka-1:9092', 'kafka-2:9092']  # file"
    assert values["listeners.bootstrap_port"] == "9400  # env KPP_LISTENERS__BOOTSTRAP_PORT"
    assert values["logging.level"] == "debug  # env KPP_LOGGING__LEVEL"
    assert values["limits.max_connections"] == "4000  # default"
    assert values["cluster_state.sasl"] == "null  # default"
    # The output is YAML that reads back as the effective config.
    assert yaml.safe_load(out)["listeners"]["bootstrap_port"] == 9400


def test_show_masks_secrets_and_names_a_secret_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = tmp_path / "password"
    secret.write_text(SECRET + "\n")
    config = tmp_path / "proxy.yaml"
    config.write_text(
        "upstream: {bootstrap_servers: kafka:9092}\n"
        "cluster_state:\n  sasl:\n    mechanism: PLAIN\n    username: admin\n"
        f"    password_file: {secret}\n"
    )
    code, out, _ = run(capsys, "config", "show", "--config", str(config))
    assert code == 0
    assert SECRET not in out
    values = shown(out)
    assert values["cluster_state.sasl.password"] == "'********'  # password_file"
    assert values["cluster_state.sasl.password_file"] == f"{secret}  # file"


def test_show_masks_an_inline_secret_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KPP_UPSTREAM__BOOTSTRAP_SERVERS", "kafka:9092")
    monkeypatch.setenv(
        "KPP_CLUSTER_STATE__SASL",
        json.dumps({"mechanism": "PLAIN", "username": "admin", "password": SECRET}),
    )
    code, out, _ = run(capsys, "config", "show")
    assert code == 0
    assert SECRET not in out
    values = shown(out)
    assert values["cluster_state.sasl.password"] == "'********'  # env KPP_CLUSTER_STATE__SASL"


def test_show_refuses_a_bad_config_with_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "proxy.yaml"
    config.write_text(
        "upstream: {bootstrap_servers: kafka:9092}\n"
        f"cluster_state: {{sasl: {{mechanism: PLAIN, username: a, password: [{SECRET}]}}}}\n"
    )
    code, out, err = run(capsys, "config", "show", "--config", str(config))
    assert (code, out) == (2, "")
    assert "cluster_state.sasl.password: Input should be a valid string" in err
    assert SECRET not in err


def test_schema_is_json_covering_every_section(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "config", "schema")
    assert code == 0
    schema = json.loads(out)
    assert set(schema["properties"]) == set(ProxyConfig.model_fields)
    assert schema["required"] == ["upstream"]
    sasl = schema["$defs"]["SaslConfig"]
    assert "password" not in sasl["required"]
    assert sasl["properties"]["password"]["writeOnly"] is True
    assert {"required": ["password_file"]} in sasl["allOf"][0]["oneOf"]
