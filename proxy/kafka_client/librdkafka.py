"""ClientSecurity as confluent-kafka (librdkafka) settings: the audit topic's producer.

Certificates go as PEM strings (ssl.ca.pem, ssl.certificate.pem, ssl.key.pem): a PKCS#12
store was converted when it was read, since librdkafka reads PKCS#12 keystores only, and no
truststores.
"""

from __future__ import annotations

from kafka_policy_proxy.proxy.kafka_client.oauth import oauth_librdkafka
from kafka_policy_proxy.proxy.kafka_client.security import ClientSecurity


def librdkafka_config(security: ClientSecurity) -> dict[str, str]:
    """The security settings of a librdkafka client for `security`."""
    config = {"security.protocol": security.protocol}
    tls = security.tls
    if tls is not None:
        config["ssl.endpoint.identification.algorithm"] = "https" if tls.check_hostname else "none"
        if tls.ca_pem is not None:
            config["ssl.ca.pem"] = tls.ca_pem
        if tls.cert_chain_pem is not None and tls.key_pem is not None:
            config["ssl.certificate.pem"] = tls.cert_chain_pem
            config["ssl.key.pem"] = tls.key_pem
    if security.oauth is not None:
        config |= oauth_librdkafka(security.oauth)
    elif security.sasl_mechanism is not None:
        assert security.sasl_username is not None and security.sasl_password is not None
        config |= {
            "sasl.mechanisms": security.sasl_mechanism,
            "sasl.username": security.sasl_username,
            "sasl.password": security.sasl_password,
        }
    return config
