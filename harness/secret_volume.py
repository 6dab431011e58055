"""A directory laid out as Kubernetes mounts a Secret, so tests can rotate it as the kubelet
does: each version in its own `..<stamp>` directory, `..data` a link to the current one, and
each file a link through `..data`. An update swaps `..data` in one rename."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

_versions = itertools.count(1)


class SecretVolume:
    """A Secret volume whose files are replaced together, atomically."""

    def __init__(self, directory: Path, files: dict[str, bytes]) -> None:
        """Mount the first version of `files` (name -> content) in `directory`."""
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.update(files)
        for name in files:
            (directory / name).symlink_to(Path("..data") / name)

    def path(self, name: str) -> Path:
        """The path a pod's config names (a link through ..data)."""
        return self.directory / name

    def update(self, files: dict[str, bytes]) -> None:
        """Write a new version and swap ..data to it, as the kubelet does."""
        version = self.directory / f"..version_{next(_versions)}"
        version.mkdir()
        for name, content in files.items():
            (version / name).write_bytes(content)
        swap = self.directory / "..data_tmp"
        swap.symlink_to(version.name)
        os.replace(swap, self.directory / "..data")
