# The proxy image. scripts/build-image builds it as kafka-policy-proxy:<version in pyproject.toml>
# (with podman, buildah or docker; README.md, "Container image"). Build arguments:
#   BASE_IMAGE  python:3.11-slim, or any Debian 12+ image with python3 (3.11+) and python3-venv
#               (scripts/build-image --debian-base makes one with mmdebstrap, no registry needed)
#   WITH_JAVA   true installs Debian's default headless JRE (17 on Debian 12) and JPype, for
#               java_policy rules
#   VERSION     the image label only; scripts/build-image passes pyproject.toml's version
ARG BASE_IMAGE=python:3.11-slim

# The build stage: the sources are copied here only, so no layer of the image holds them.
FROM ${BASE_IMAGE} AS build
ARG WITH_JAVA=false
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/kafka-policy-proxy/bin:$PATH
WORKDIR /src
# Dependencies first, from pyproject.toml alone: a change to the code reuses this layer.
# pip trusts the CA bundle given as the build secret pip-cert, if any (scripts/build-image
# passes the host's PIP_CERT: TLS-inspecting proxies); it is mounted, never stored.
COPY pyproject.toml ./
RUN --mount=type=secret,id=pip-cert \
    if [ -s /run/secrets/pip-cert ]; then export PIP_CERT=/run/secrets/pip-cert; fi \
    && python3 -m venv /opt/kafka-policy-proxy \
    && python3 -c 'import sys, tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; \
java = p["optional-dependencies"]["java"] if sys.argv[1] == "true" else []; \
print("\n".join(p["dependencies"] + java))' "$WITH_JAVA" > requirements.txt \
    && pip install --quiet -r requirements.txt
# The rest of the context: .dockerignore lets through only the package (proxy, codec, policy,
# cli, pipeline, whose subcommands the command line registers; Spark itself is not installed),
# the kafka_policy_proxy/ links to them, followed when the wheel is built, README.md, LICENSE
# and examples/policy.yaml.
COPY . ./
RUN --mount=type=secret,id=pip-cert \
    if [ -s /run/secrets/pip-cert ]; then export PIP_CERT=/run/secrets/pip-cert; fi \
    && pip install --quiet --no-deps . && pip check

FROM ${BASE_IMAGE}
ARG WITH_JAVA=false
ARG VERSION=unknown
LABEL org.opencontainers.image.title="kafka-policy-proxy" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/kafka-policy-proxy/bin:$PATH
# default-jre-headless is JRE 17 on Debian 12 and 21 on Debian 13: both run Kafka's policy API.
# Its post-install script links manual pages into /usr/share/man/man1, which slim bases drop.
RUN if [ "$WITH_JAVA" = true ]; then \
        mkdir -p /usr/share/man/man1 \
        && apt-get update -qq \
        && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            default-jre-headless >/dev/null \
        && rm -rf /var/lib/apt/lists/*; \
    fi \
    && useradd --system --no-create-home --uid 10001 kpp
COPY --from=build /opt/kafka-policy-proxy /opt/kafka-policy-proxy
COPY LICENSE /usr/share/doc/kafka-policy-proxy/LICENSE

# A minimal config; every value can be overridden with KPP_* variables (KPP_UPSTREAM__...),
# or the whole file replaced with a bind mount. The admin listener binds 0.0.0.0 here
# (the proxy's own default is 127.0.0.1): Kubernetes probes and Prometheus reach it on the
# pod's address, not on the container's loopback.
COPY examples/policy.yaml /etc/kafka-policy-proxy/policy.yaml
RUN printf '%s\n' \
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
        > /etc/kafka-policy-proxy/proxy.yaml

USER kpp
WORKDIR /
# 9192 is the bootstrap listener; node id N is served on 9200 + N; 9191 serves /metrics,
# /healthz and /readyz.
EXPOSE 9191 9192 9201 9202 9203
# The port follows KPP_ADMIN__PORT when the environment moves the admin listener.
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s \
    CMD ["python3", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('KPP_ADMIN__PORT', '9191'), timeout=4)"]
# Kubernetes `args:` (and `docker run IMAGE ARGS`) replace CMD only: `args: ["run", "--config",
# "/config/proxy.yaml"]` or `["policy", "check", ...]` run as the same command.
ENTRYPOINT ["kafka-policy-proxy"]
CMD ["run", "--config", "/etc/kafka-policy-proxy/proxy.yaml"]
