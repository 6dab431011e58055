"""`kafka-policy-proxy --version`, through the installed console script."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_version_prints_the_version_in_pyproject(tmp_path: Path) -> None:
    script = Path(sys.executable).parent / "kafka-policy-proxy"
    assert script.exists(), f"{script}: missing; install the project: pip install -e ."
    ran = subprocess.run(
        [str(script), "--version"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,  # not the checkout: what is installed answers
    )
    assert ran.returncode == 0, ran.stderr
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert ran.stdout.strip() == f"kafka-policy-proxy {pyproject['project']['version']}"
