"""The container image, built here and run as a platform runs it (issue 32).

`scripts/build-image --debian-base` builds kafka-policy-proxy:<version> with podman, FROM a
Debian 12 root file system made by mmdebstrap (no image registry is reachable here), and the
container runs under runc on the host's network, configured by KPP_* variables only, in front
of a one-broker cluster of its own (ports 18500-18549, so that the build, about two minutes,
runs beside the shared cluster's modules rather than after them). A real client produces and
consumes through it and is refused a create the image's example policy denies; the broker is
read directly for both outcomes.
"""

from __future__ import annotations

import json
import resource
import shutil
import subprocess
import tarfile
import time
import tomllib
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from harness import REPO
from harness.build_context import context_files
from harness.local_kafka import LocalKafka

pytestmark = pytest.mark.integration

VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
BOOTSTRAP_PORT = 18500
NODE_PORT_BASE = 18501  # node 1 is served on 18502
ADMIN_PORT = 18510
CLUSTER_PORT_BASE = 18520  # a stride of 4: every listener kind of one broker in 18520-18547
TOOLS = {"podman": "podman", "runc": "runc", "mmdebstrap": "mmdebstrap"}
# podman asks runc for nofile and nproc limits of 1048576 (for a non-root user), above this
# host's hard limits, and without CAP_SYS_RESOURCE runc cannot raise them: "error setting
# rlimits ... operation not permitted". Limits at or below the hard ones start.
NOFILE = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
RUN = [
    "podman",
    "run",
    "--runtime",
    "runc",
    "--network",
    "host",
    "--ulimit",
    f"nofile={NOFILE}:{NOFILE}",
    "--ulimit",
    "nproc=32768:32768",
]
QUIET = {"log_level": 3}


def podman(
    *args: str, timeout: float = 120, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run podman; on failure the assertion carries its output."""
    done = subprocess.run(
        ["podman", *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0 or not check, f"podman {' '.join(args)}:\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def image() -> str:
    """kafka-policy-proxy:<version>, built by scripts/build-image as the README says."""
    missing = [package for tool, package in TOOLS.items() if shutil.which(tool) is None]
    if missing:
        pytest.fail(f"the image test needs: apt-get install -y {' '.join(missing)}")
    started = time.monotonic()
    built = subprocess.run(
        [str(REPO / "scripts" / "build-image"), "--debian-base"],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert built.returncode == 0, built.stderr[-5000:]
    print(f"image built in {time.monotonic() - started:.0f} s")
    tag = built.stdout.splitlines()[-1]
    assert tag == f"kafka-policy-proxy:{VERSION}"
    return tag


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafka]:
    """One broker of the test's own."""
    kafka = LocalKafka(
        tmp_path_factory.mktemp("image-kafka") / "cluster",
        brokers=1,
        port_base=CLUSTER_PORT_BASE,
        port_stride=4,
        light_jvm=True,
    )
    kafka.up(timeout=180)
    try:
        yield kafka
    finally:
        kafka.down()


@pytest.fixture(scope="module")
def container(image: str, cluster: LocalKafka) -> Iterator[str]:
    """The image's own command and config, moved onto the test's ports by KPP_* variables."""
    name = f"kpp-image-test-{uuid.uuid4().hex[:8]}"
    env = {
        "KPP_UPSTREAM__BOOTSTRAP_SERVERS": cluster.bootstrap_servers,
        "KPP_LISTENERS__ADVERTISED_HOST": "127.0.0.1",
        "KPP_LISTENERS__BOOTSTRAP_PORT": str(BOOTSTRAP_PORT),
        "KPP_LISTENERS__BROKER_PORT_BASE": str(NODE_PORT_BASE),
        "KPP_ADMIN__PORT": str(ADMIN_PORT),
    }
    flags = [part for key, value in env.items() for part in ("--env", f"{key}={value}")]
    # As the Kubernetes manifests run it: a read-only root file system, /tmp an empty volume.
    started = subprocess.run(
        [*RUN, "--detach", "--name", name, "--read-only", "--tmpfs", "/tmp", *flags, image],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert started.returncode == 0, started.stderr[-3000:]
    try:
        _wait_ready(name)
        yield name
    finally:
        podman("stop", "--time", "30", name, check=False)
        state = json.loads(podman("inspect", name).stdout)[0]["State"]
        logs = podman("logs", name, check=False)
        podman("rm", "--force", name, check=False)
        assert state["ExitCode"] == 0, (
            f"exit {state['ExitCode']} on SIGTERM:\n{logs.stderr[-3000:]}"
        )


def _wait_ready(name: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{ADMIN_PORT}/readyz", timeout=2):
                return
        except (urllib.error.URLError, OSError):
            running = podman("inspect", "--format", "{{.State.Running}}", name).stdout.strip()
            assert running == "true", podman("logs", name, check=False).stderr[-3000:]
            time.sleep(0.5)
    pytest.fail(f"not ready in {timeout} s:\n{podman('logs', name, check=False).stderr[-3000:]}")


def test_a_client_produces_and_consumes_through_the_container(
    container: str, cluster: LocalKafka
) -> None:
    topic = f"image.records-{uuid.uuid4().hex[:8]}"
    direct = AdminClient({"bootstrap.servers": cluster.bootstrap_servers, **QUIET})
    direct.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    proxy = f"127.0.0.1:{BOOTSTRAP_PORT}"
    producer = Producer({"bootstrap.servers": proxy, "acks": "all", **QUIET})
    sent = [f"record-{i}".encode() for i in range(10)]
    for value in sent:
        producer.produce(topic, value)
    assert producer.flush(30) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": proxy,
            "group.id": f"image-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            **QUIET,
        }
    )
    consumer.subscribe([topic])
    received: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(received) < len(sent) and time.monotonic() < deadline:
        message = consumer.poll(1.0)
        if message is not None and message.error() is None:
            received.append(message.value())
    consumer.close()
    assert received == sent
    # The broker itself holds the ten records.
    reader = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "x", **QUIET})
    assert reader.get_watermark_offsets(TopicPartition(topic, 0), timeout=30) == (0, len(sent))
    reader.close()


def test_a_create_the_example_policy_denies_gets_policy_violation(
    container: str, cluster: LocalKafka
) -> None:
    topic = f"Image_Bad_{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{BOOTSTRAP_PORT}", **QUIET})
    with pytest.raises(KafkaException) as denied:
        admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(30)
    error = denied.value.args[0]
    assert error.code() == KafkaError.POLICY_VIOLATION, error
    assert "[topic-naming]" in error.str(), error
    # The proxy answers a denied create itself: the broker has never heard of the topic.
    direct = AdminClient({"bootstrap.servers": cluster.bootstrap_servers, **QUIET})
    assert topic not in direct.list_topics(timeout=30).topics


def test_the_healthcheck_passes_inside_the_running_container(container: str) -> None:
    assert podman("healthcheck", "run", container, check=False).returncode == 0


def test_the_container_runs_as_kpp_without_the_sources(container: str) -> None:
    shown = podman("exec", container, "sh", "-c", "id -u; ls /src 2>&1; ls /usr/share/doc/*")
    assert shown.stdout.splitlines()[0] == "10001", shown.stdout
    assert "No such file" in shown.stdout, shown.stdout
    assert "kafka-policy-proxy" in shown.stdout, shown.stdout


def test_arguments_replace_the_default_command(image: str) -> None:
    # What Kubernetes `args:` do: the entrypoint stays, CMD (run --config ...) is replaced.
    checked = subprocess.run(
        [*RUN, "--rm", image, "policy", "check", "/etc/kafka-policy-proxy/policy.yaml"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert checked.returncode == 0, checked.stderr[-3000:]
    assert "/etc/kafka-policy-proxy/policy.yaml: OK" in checked.stdout, checked.stdout
    config = json.loads(podman("image", "inspect", image).stdout)[0]["Config"]
    assert config["Entrypoint"] == ["kafka-policy-proxy"]
    assert config["Cmd"] == ["run", "--config", "/etc/kafka-policy-proxy/proxy.yaml"]
    assert config["Labels"]["org.opencontainers.image.version"] == VERSION


def test_the_builder_sends_what_dockerignore_lets_through(tmp_path: Path) -> None:
    # A scratch image of the context alone, as podman itself filters it, then its file list.
    (tmp_path / "Containerfile").write_text("FROM scratch\nCOPY . /context/\n")
    tag = f"localhost/kpp-context-{uuid.uuid4().hex[:8]}"
    podman("build", "--quiet", "--file", str(tmp_path / "Containerfile"), "--tag", tag, str(REPO))
    made = podman("create", tag, "none").stdout.strip()
    try:
        podman("export", "--output", str(tmp_path / "context.tar"), made)
    finally:
        podman("rm", made, check=False)
        podman("rmi", tag, check=False)
    with tarfile.open(tmp_path / "context.tar") as archive:
        sent = {
            m.name.removeprefix("./").removeprefix("context/")
            for m in archive.getmembers()
            if m.name.removeprefix("./").startswith("context/") and not m.isdir()
        }
    assert sent == context_files(REPO)


def test_version_prints_the_package_version(image: str) -> None:
    shown = subprocess.run(
        [*RUN, "--rm", image, "--version"], capture_output=True, text=True, timeout=120, check=False
    )
    assert shown.returncode == 0, shown.stderr[-3000:]
    assert shown.stdout.split() == ["kafka-policy-proxy", VERSION], shown.stdout


def test_the_tls_compose_files_certs_service_makes_its_ca(image: str, tmp_path: Path) -> None:
    # docker-compose.tls.yml's `certs` service, run as it is written: its user, directory,
    # entrypoint and the checkout's harness/ mounted, writing into a volume.
    compose = yaml.safe_load((REPO / "docker-compose.tls.yml").read_text())
    certs = compose["services"]["certs"]
    assert certs["image"] == image
    mounts = {"./harness": str(REPO / "harness"), "certs": str(tmp_path)}
    volumes = []
    for volume in certs["volumes"]:
        source, target, *mode = volume.split(":")
        volumes += ["--volume", ":".join([mounts[source], target, *mode])]
    made = subprocess.run(
        [
            *RUN,
            "--rm",
            "--user",
            certs["user"],
            "--workdir",
            certs["working_dir"],
            *volumes,
            "--entrypoint",
            certs["entrypoint"][0],
            image,
            *certs["entrypoint"][1:],
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert made.returncode == 0, made.stderr[-3000:]
    assert (tmp_path / "ca.pem").is_file() and (tmp_path / "broker.keystore.pem").is_file()
