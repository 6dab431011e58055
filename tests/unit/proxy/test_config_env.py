"""Settings from KPP_* environment variables: the text is read as the setting's type."""

from __future__ import annotations

import pytest

from kafka_policy_proxy.proxy.config import ConfigError, load_config


@pytest.fixture(autouse=True)
def upstream(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KPP_UPSTREAM__BOOTSTRAP_SERVERS", "kafka:9092")


@pytest.mark.parametrize(("text", "code"), [("44", 44), ("-1", -1), (" 44 ", 44)])
def test_legacy_error_code_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, text: str, code: int
) -> None:
    monkeypatch.setenv("KPP_POLICY__LEGACY_ERROR_CODE", text)
    assert load_config(None).policy.legacy_error_code == code


@pytest.mark.parametrize("text", ["7", "POLICY_VIOLATION", ""])
def test_a_legacy_error_code_other_than_minus_1_or_44_is_refused(
    monkeypatch: pytest.MonkeyPatch, text: str
) -> None:
    monkeypatch.setenv("KPP_POLICY__LEGACY_ERROR_CODE", text)
    with pytest.raises(ConfigError, match=r"policy\.legacy_error_code: Input should be -1 or 44"):
        load_config(None)


def test_other_typed_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, text in {
        "KPP_LISTENERS__BOOTSTRAP_PORT": "19192",
        "KPP_POLICY__WATCH": "false",
        "KPP_CLUSTER_STATE__TTL_S": "0.5",
        "KPP_LOGGING__LEVEL": "debug",
        "KPP_AUDIT__BACKUPS": "0",
    }.items():
        monkeypatch.setenv(name, text)
    config = load_config(None)
    assert config.listeners.bootstrap_port == 19192
    assert config.policy.watch is False
    assert config.cluster_state.ttl_s == 0.5
    assert config.logging.level == "debug"
    assert config.audit.backups == 0
