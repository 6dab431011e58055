"""The YAML docs/operations.md shows for certificate rotation and SNI routing, verbatim: each
block is in the doc, each proxy config loads, and the Service is valid for the Kubernetes API."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from harness.helm_chart import KUBE_VERSION
from harness.kube_schema import validate
from kafka_policy_proxy.proxy.config import load_config

OPERATIONS = Path(__file__).parents[3] / "docs" / "operations.md"

# Keep equal to the blocks marked [snippet N] in docs/operations.md.
SNIPPETS = {
    1: """\
# [snippet 1]
listeners:
  tls:
    cert_file: /etc/kafka-policy-proxy/tls/tls.crt   # a cert-manager Secret, mounted
    key_file: /etc/kafka-policy-proxy/tls/tls.key
    reload_interval_s: 5                              # the default; 0 = SIGHUP only
upstream:
  bootstrap_servers: [kafka-1.example.com:9093]
  tls:
    ca_file: /etc/kafka-policy-proxy/upstream/ca.crt
    cert_file: /etc/kafka-policy-proxy/upstream/tls.crt
    key_file: /etc/kafka-policy-proxy/upstream/tls.key
    reload_interval_s: 5
""",
    2: """\
# [snippet 2]
listeners:
  tls:
    cert_file: /etc/kafka-policy-proxy/tls/tls.crt   # must cover every name below
    key_file: /etc/kafka-policy-proxy/tls/tls.key
  sni:
    bootstrap_address: bootstrap.kafka.example.com:9292
    advertised_broker_address_pattern: broker-$(nodeId).kafka.example.com
upstream:
  bootstrap_servers: [kafka-1.internal:9092]
""",
    3: """\
# [snippet 3]
apiVersion: v1
kind: Service
metadata:
  name: kafka-policy-proxy-sni
spec:
  type: LoadBalancer
  selector:
    app.kubernetes.io/name: kafka-policy-proxy
  ports:
    - name: kafka-sni
      port: 9292
      targetPort: 9292
""",
}


@pytest.mark.parametrize("number", sorted(SNIPPETS))
def test_each_snippet_is_a_block_of_the_doc(number: int) -> None:
    assert f"```yaml\n{SNIPPETS[number]}```\n" in OPERATIONS.read_text(), (
        f"docs/operations.md has no ```yaml block equal to [snippet {number}]: keep them equal"
    )


@pytest.mark.parametrize("number", [1, 2])
def test_the_documented_proxy_configs_load(number: int, tmp_path: Path) -> None:
    path = tmp_path / "proxy.yaml"
    path.write_text(SNIPPETS[number])
    config = load_config(path)
    assert config.listeners.tls is not None
    if number == 1:
        assert config.upstream.tls is not None
        assert config.listeners.tls.reload_interval_s == config.upstream.tls.reload_interval_s == 5
    else:
        assert config.listeners.sni is not None
        assert config.listeners.sni.port == 9292
        assert config.listeners.sni.broker_address(2) == ("broker-2.kafka.example.com", 9292)


def test_the_documented_service_is_valid_for_kubernetes() -> None:
    service = yaml.safe_load(SNIPPETS[3])
    assert validate(service, KUBE_VERSION) == []
    assert [p["port"] for p in service["spec"]["ports"]] == [9292]  # the SNI port alone
