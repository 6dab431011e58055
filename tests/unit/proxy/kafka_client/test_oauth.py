"""OAUTHBEARER settings from Kafka client properties, their refusals and librdkafka mapping."""

from __future__ import annotations

import pytest

from kafka_policy_proxy.proxy.kafka_client.oauth import (
    RefreshRules,
    oauth_librdkafka,
    oauth_settings,
)

MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
URL = "https://idp.example.com/oauth2/token"
BASE = {
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "OAUTHBEARER",
    "sasl.oauthbearer.token.endpoint.url": URL,
    "sasl.login.callback.handler.class": (
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
    ),
}


def jaas(options: str) -> dict[str, str]:
    return BASE | {"sasl.jaas.config": f"{MODULE} required {options};"}


def test_the_jaas_options_give_the_client_credentials_scope_and_extensions() -> None:
    settings = oauth_settings(
        jaas(
            'clientId="proxy" clientSecret="s3cr=t" scope="kafka" extension_logicalCluster="lkc-1"'
        )
    )
    assert (settings.token_endpoint_url, settings.client_id, settings.client_secret) == (
        URL,
        "proxy",
        "s3cr=t",
    )
    assert settings.scope == "kafka"
    assert dict(settings.extensions) == {"logicalCluster": "lkc-1"}
    assert "s3cr=t" not in repr(settings)
    assert settings.refresh == RefreshRules()


def test_kafka_41s_properties_win_over_the_jaas_options() -> None:
    props = jaas('clientId="old" clientSecret="old-secret"') | {
        "sasl.oauthbearer.client.credentials.client.id": "new",
        "sasl.oauthbearer.client.credentials.client.secret": "new-secret",
        "sasl.oauthbearer.scope": "kafka.admin",
    }
    settings = oauth_settings(props)
    assert (settings.client_id, settings.client_secret, settings.scope) == (
        "new",
        "new-secret",
        "kafka.admin",
    )


def test_without_a_jaas_config_the_properties_are_enough() -> None:
    props = BASE | {
        "sasl.oauthbearer.client.credentials.client.id": "id",
        "sasl.oauthbearer.client.credentials.client.secret": "secret",
    }
    assert oauth_settings(props).scope is None


@pytest.mark.parametrize(
    ("props", "key"),
    [
        (
            jaas('clientId="a" clientSecret="b"') | {"sasl.oauthbearer.token.endpoint.url": ""},
            "sasl.oauthbearer.token.endpoint.url",
        ),
        (
            jaas('clientId="a" clientSecret="b"')
            | {"sasl.oauthbearer.token.endpoint.url": "file:/tmp/token.jwt"},
            "sasl.oauthbearer.token.endpoint.url",
        ),
        (jaas('clientSecret="b"'), "sasl.oauthbearer.client.credentials.client.id"),
        (jaas('clientId="a"'), "sasl.oauthbearer.client.credentials.client.secret"),
        (
            BASE
            | {
                "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule "
                'required username="a" password="b";'
            },
            "sasl.jaas.config",
        ),
        (jaas('clientId="a" clientSecret="b" extension_auth="x"'), "sasl.jaas.config"),
        (jaas('clientId="a" clientSecret="b" extension_bad-key="x"'), "sasl.jaas.config"),
        (
            jaas('clientId="a" clientSecret="b"')
            | {"sasl.login.callback.handler.class": "com.example.MyHandler"},
            "sasl.login.callback.handler.class",
        ),
        (
            jaas('clientId="a" clientSecret="b"')
            | {
                "sasl.oauthbearer.jwt.retriever.class": (
                    "org.apache.kafka.common.security.oauthbearer.JwtBearerJwtRetriever"
                )
            },
            "sasl.oauthbearer.jwt.retriever.class",
        ),
        (
            jaas('clientId="a" clientSecret="b"')
            | {"sasl.oauthbearer.assertion.file": "/tmp/assertion.jwt"},
            "sasl.oauthbearer.assertion.file",
        ),
        (
            jaas('clientId="a" clientSecret="b"') | {"sasl.login.refresh.window.factor": "0.3"},
            "sasl.login.refresh.window.factor",
        ),
        (
            jaas('clientId="a" clientSecret="b"') | {"sasl.login.refresh.buffer.seconds": "ten"},
            "sasl.login.refresh.buffer.seconds",
        ),
        (
            jaas('clientId="a" clientSecret="b"')
            | {"sasl.login.retry.backoff.ms": "500", "sasl.login.retry.backoff.max.ms": "100"},
            "sasl.login.retry.backoff.max.ms",
        ),
    ],
)
def test_a_setting_the_proxy_cannot_honour_is_refused_by_name(
    props: dict[str, str], key: str
) -> None:
    with pytest.raises(ValueError, match=f"^{key}: "):
        oauth_settings(props)


def test_kafkas_refresh_settings_are_read_in_its_units() -> None:
    settings = oauth_settings(
        jaas('clientId="a" clientSecret="b"')
        | {
            "sasl.login.refresh.window.factor": "0.6",
            "sasl.login.refresh.window.jitter": "0",
            "sasl.login.refresh.min.period.seconds": "5",
            "sasl.login.refresh.buffer.seconds": "10",
            "sasl.login.retry.backoff.ms": "200",
            "sasl.login.retry.backoff.max.ms": "4000",
            "sasl.login.connect.timeout.ms": "3000",
            "sasl.login.read.timeout.ms": "7000",
        }
    )
    assert settings.refresh == RefreshRules(0.6, 0.0, 5.0, 10.0, 0.2, 4.0, 7.0)


def test_refresh_time_follows_kafkas_window_minimum_and_buffer() -> None:
    rules = RefreshRules()  # 0.8 + up to 0.05 jitter, 60 s minimum, 300 s buffer
    # A one-hour token: 80% (+ jitter) of its lifetime, well before the buffer.
    assert rules.refresh_at(0, 3600, 0, rand=0.0) == pytest.approx(2880)
    assert rules.refresh_at(0, 3600, 0, rand=1.0) == pytest.approx(3060)
    # A ten-minute token: 80% is 480 s, inside the 300 s buffer, so it moves up to 300 s.
    assert rules.refresh_at(0, 600, 0, rand=0.0) == pytest.approx(300)
    # A 20 s token: minimum and buffer exceed its lifetime, so Kafka ignores both.
    assert rules.refresh_at(100, 120, 100, rand=0.0) == pytest.approx(116)


def test_librdkafka_gets_the_same_login() -> None:
    settings = oauth_settings(
        jaas('clientId="proxy" clientSecret="pw" scope="kafka" extension_a="1" extension_b="2"')
    )
    assert oauth_librdkafka(settings) == {
        "sasl.mechanism": "OAUTHBEARER",
        "sasl.oauthbearer.method": "oidc",
        "sasl.oauthbearer.token.endpoint.url": URL,
        "sasl.oauthbearer.client.id": "proxy",
        "sasl.oauthbearer.client.secret": "pw",
        "sasl.oauthbearer.scope": "kafka",
        "sasl.oauthbearer.extensions": "a=1,b=2",
    }
