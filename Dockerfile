# The proxy image: `docker build -t kafka-policy-proxy .` (docker-compose.yml builds it too).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Only what the package needs, so edits to tests or scripts do not invalidate this layer.
WORKDIR /src
COPY pyproject.toml README.md ./
COPY proxy ./proxy
COPY codec ./codec
COPY policy ./policy
COPY cli ./cli
# The namespace package: links to the folders above, followed when the wheel is built.
COPY kafka_policy_proxy ./kafka_policy_proxy
# The command line registers the pipeline's subcommands; Spark itself is not installed, nor
# a JVM for java_policy rules (docs/operations.md says how to add one).
COPY pipeline ./pipeline
RUN pip install . \
    && cd / && rm -rf /src

# A minimal config; every value can be overridden with KPP_* variables (KPP_UPSTREAM__...),
# or the whole file replaced with a bind mount.
COPY examples/policy.yaml /etc/kafka-policy-proxy/policy.yaml
RUN mkdir -p /etc/kafka-policy-proxy \
    && printf '%s\n' \
        'listeners:' \
        '  bind_host: 0.0.0.0' \
        '  advertised_host: localhost' \
        '  bootstrap_port: 9192' \
        '  broker_port_base: 9200' \
        'upstream:' \
        '  bootstrap_servers: ["kafka-1:9092"]' \
        'policy:' \
        '  file: /etc/kafka-policy-proxy/policy.yaml' \
        'admin:' \
        '  bind_host: 0.0.0.0' \
        '  port: 9191' \
        > /etc/kafka-policy-proxy/proxy.yaml \
    && useradd --system --no-create-home --uid 10001 kpp

USER kpp
WORKDIR /
# 9192 is the bootstrap listener; node id N is served on 9200 + N; 9191 serves /metrics,
# /healthz and /readyz.
EXPOSE 9191 9192 9201 9202 9203
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:9191/healthz', timeout=4)"]
ENTRYPOINT ["kafka-policy-proxy", "run", "--config", "/etc/kafka-policy-proxy/proxy.yaml"]
