"""listeners.oauthbearer_principal_claim: the JWT claim a relayed OAUTHBEARER client is known by."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from kio.schema.errors import ErrorCode
from kio.schema.sasl_authenticate import v2 as auth_v2
from kio.schema.sasl_handshake import v1 as handshake_v1

from kafka_policy_proxy.codec.oauthbearer_client import initial_response
from kafka_policy_proxy.codec.registry import encode
from kafka_policy_proxy.proxy.config import ConfigError, load_config
from kafka_policy_proxy.proxy.filters.api import Forward, WithPrincipal
from kafka_policy_proxy.proxy.filters.principal_capture import PrincipalCaptureFilter
from tests.unit.proxy.contexts import context, settle
from tests.unit.proxy.enforcement_fakes import Records

UPSTREAM = {"bootstrap_servers": ["kafka:9092"]}
# {"alg":"none"} . {"sub":"uid-42","azp":"billing-svc"} . sig
TOKEN = "eyJhbGciOiJub25lIn0.eyJzdWIiOiJ1aWQtNDIiLCJhenAiOiJiaWxsaW5nLXN2YyJ9.c2ln"


def write(tmp_path: Path, listeners: dict[str, object]) -> Path:
    path = tmp_path / "proxy.yaml"
    path.write_text(yaml.safe_dump({"upstream": UPSTREAM, "listeners": listeners}))
    return path


def test_the_principal_claim_defaults_to_sub_as_in_kafka(tmp_path: Path) -> None:
    assert load_config(write(tmp_path, {})).listeners.oauthbearer_principal_claim == "sub"
    config = load_config(write(tmp_path, {"oauthbearer_principal_claim": "azp"}))
    assert config.listeners.oauthbearer_principal_claim == "azp"


@pytest.mark.parametrize("claim", ["", "two words"])
def test_a_claim_that_cannot_name_one_is_refused_by_key(tmp_path: Path, claim: str) -> None:
    with pytest.raises(ConfigError, match=r"listeners\.oauthbearer_principal_claim"):
        load_config(write(tmp_path, {"oauthbearer_principal_claim": claim}))


@pytest.mark.parametrize(
    ("claim", "principal"), [("sub", "User:uid-42"), ("azp", "User:billing-svc")]
)
async def test_the_principal_comes_from_the_configured_claim(
    tmp_path: Path, claim: str, principal: str
) -> None:
    capture = PrincipalCaptureFilter(lambda: None, Records(tmp_path).recorder, claim)
    shake = handshake_v1.SaslHandshakeRequest(mechanism="OAUTHBEARER")
    verdict = capture.on_request(context(17, 1, shake, connection_id=1))
    assert isinstance(verdict, Forward) and verdict.hook is not None
    verdict.hook(
        encode(
            handshake_v1.SaslHandshakeResponse(
                error_code=ErrorCode.none, mechanisms=("OAUTHBEARER",)
            )
        )
    )
    request = auth_v2.SaslAuthenticateRequest(auth_bytes=initial_response(TOKEN))
    verdict = capture.on_request(context(36, 2, request, connection_id=1))
    assert isinstance(verdict, Forward) and verdict.hook is not None
    response = auth_v2.SaslAuthenticateResponse(
        error_code=ErrorCode.none, error_message=None, auth_bytes=b"", session_lifetime=timedelta(0)
    )
    result = await settle(verdict.hook(encode(response)))
    assert isinstance(result, WithPrincipal)
    assert result.principal == principal
