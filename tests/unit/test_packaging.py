"""The wheel as it ships: one top-level name, kafka_policy_proxy, and a command that runs.

Built from the checkout with pip, unpacked, and run from the unpacked files alone (the
checkout's own copy is out of reach), so what users install is what is tested here.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


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
