"""The wheel as it ships: one top-level name, kafka_policy_proxy, and a command that runs.

Built from the checkout with pip, unpacked, and run from the unpacked files alone (the
checkout's own copy is out of reach), so what users install is what is tested here.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from harness.build_context import context_files, excluded, read_patterns

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_FOLDERS = ("cli", "codec", "pipeline", "policy", "proxy")
TOP_FILES = {"pyproject.toml", "README.md", "LICENSE"}


@pytest.fixture(scope="module")
def unpacked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The wheel built from this checkout, unpacked into a folder of its own."""
    out = tmp_path_factory.mktemp("wheel")
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = out.glob("kafka_policy_proxy-*.whl")
    target = out / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(target)
    yield target


def test_the_wheel_installs_one_top_level_name(unpacked: Path) -> None:
    names = {path.name for path in unpacked.iterdir() if not path.name.endswith(".dist-info")}
    assert names == {"kafka_policy_proxy"}, names
    shipped = {p.name for p in (unpacked / "kafka_policy_proxy").iterdir() if p.is_dir()}
    assert {"cli", "codec", "policy", "proxy", "pipeline"} <= shipped, shipped
    assert not (unpacked / "kafka_policy_proxy" / "harness").exists()
    assert (unpacked / "kafka_policy_proxy" / "policy" / "py.typed").is_file()


def test_the_unpacked_wheel_runs_the_command(unpacked: Path, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(unpacked)}
    ran = subprocess.run(
        [
            sys.executable,
            "-c",
            "import kafka_policy_proxy.policy.judge as judge, sys; print(judge.__file__); "
            "sys.argv = ['kafka-policy-proxy', '--help']; "
            "from kafka_policy_proxy.cli import main; main()",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,  # not the checkout, whose folders would be found first
        env=env,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    first = ran.stdout.splitlines()[0]
    assert first.startswith(str(unpacked)), first
    assert "snapshot" in ran.stdout and "pipeline" in ran.stdout, ran.stdout


def test_the_wheel_ships_the_apache_license(unpacked: Path) -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0"
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("                                 Apache License\n"), text[:200]
    assert "Version 2.0, January 2004" in text and "END OF TERMS AND CONDITIONS" in text
    (shipped,) = unpacked.glob("kafka_policy_proxy-*.dist-info/licenses/LICENSE")
    assert shipped.read_text() == text


def _copied_sources() -> list[str]:
    """What the Dockerfile's COPY lines take from the build context (not from a stage)."""
    sources = []
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        words = line.split()
        if words[:1] == ["COPY"] and not any(w.startswith("--from") for w in words):
            sources += [w for w in words[1:-1] if not w.startswith("--")]
    return sources


def test_the_build_context_is_the_package_and_nothing_else() -> None:
    files = context_files(ROOT)
    tops = {path.split("/")[0] for path in files}
    assert tops == set(PACKAGE_FOLDERS) | {"kafka_policy_proxy", "examples"} | TOP_FILES, tops
    assert {p for p in files if p.startswith("examples/")} == {"examples/policy.yaml"}
    assert not [p for p in files if "__pycache__" in p or p.endswith((".pyc", ".pyo"))]
    # The package is about a megabyte; a .venv, .kafka or logs/ would be hundreds.
    size = sum((ROOT / p).lstat().st_size for p in files)
    assert size < 5_000_000, size


def test_everything_the_dockerfile_copies_is_in_the_context() -> None:
    files = context_files(ROOT)
    for source in _copied_sources():
        if source == ".":
            continue
        assert source in files or any(p.startswith(source + "/") for p in files), source


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (".venv/lib/python3.11/site-packages/pyspark/__init__.py", True),
        (".kafka/cluster.json", True),
        ("logs/audit.jsonl", True),
        ("test-logs/kafka.log", True),
        ("kafka_policy_proxy.egg-info/PKG-INFO", True),
        (".git/HEAD", True),
        ("bench/results/run.json", True),
        ("proxy/__pycache__/config.cpython-311.pyc", True),
        ("examples/proxy.yaml", True),
        ("examples/policy.yaml", False),
        ("proxy/net/connection.py", False),
        ("kafka_policy_proxy/cli", False),
    ],
)
def test_dockerignore_matching(path: str, expected: bool) -> None:
    assert excluded(path, read_patterns(ROOT / ".dockerignore")) is expected


def test_the_image_is_tagged_with_the_package_version_everywhere() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    for compose in sorted(ROOT.glob("docker-compose*.yml")):
        services = yaml.safe_load(compose.read_text())["services"]
        images = {s["image"] for s in services.values() if "build" in s}
        assert images == {f"kafka-policy-proxy:{version}"}, (compose.name, images)
    # scripts/build-image reads the version from pyproject.toml rather than naming it.
    assert version not in (ROOT / "scripts" / "build-image").read_text()


# `pip install kafka-policy-proxy`, `pip install 'kafka-policy-proxy[java]'`, across a line break.
UNPUBLISHED = re.compile(r"pip\s+install\s+(?:-\S+\s+)*['\"]?kafka-policy-proxy\b")


def test_no_doc_or_message_installs_the_unpublished_package() -> None:
    texts = [ROOT / "README.md", *ROOT.glob("docs/**/*.md"), *ROOT.glob("examples/**/*.md")]
    for folder in (*PACKAGE_FOLDERS, "harness", "bench", "scripts"):
        texts += [p for p in (ROOT / folder).rglob("*") if p.is_file() and p.suffix in {"", ".py"}]
    found = [
        f"{path.relative_to(ROOT)}: {match.group(0)!r}"
        for path in texts
        for match in UNPUBLISHED.finditer(path.read_text(errors="replace"))
    ]
    assert not found, "kafka-policy-proxy is not on PyPI; say `pip install '.[extra]'`:\n" + (
        "\n".join(found)
    )
