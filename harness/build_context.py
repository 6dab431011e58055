"""What an image build's context holds: the files a `.dockerignore` lets through.

The rules of Docker's and Buildah's matcher (moby's patternmatcher): `#` lines are comments,
`!` re-includes, the last pattern that matches decides, `*` and `?` stay within one path
segment, `**` spans any number, and a pattern that matches a directory matches everything in
it. tests/integration/test_image.py checks this against what podman itself copies.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Pattern:
    """One line of a `.dockerignore`: its text, compiled, and whether it re-includes."""

    text: str
    regex: re.Pattern[str]
    negated: bool


def _compile(pattern: str) -> re.Pattern[str]:
    """Docker's glob as an anchored regular expression over a '/'-separated relative path."""
    out, i = [], 0
    while i < len(pattern):
        char = pattern[i]
        if pattern.startswith("**", i):
            i += 2
            if pattern.startswith("/", i):
                out.append("(?:.*/)?")
                i += 1
            else:
                out.append(".*")
            continue
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[":
            end = pattern.index("]", i + 1)
            body = pattern[i + 1 : end]
            out.append("[" + ("^" + body[1:] if body.startswith(("!", "^")) else body) + "]")
            i = end
        else:
            out.append(re.escape(char))
        i += 1
    return re.compile("".join(out) + r"\Z")


def read_patterns(ignore_file: Path) -> list[Pattern]:
    """The patterns of a `.dockerignore`, in order (none if the file is missing)."""
    if not ignore_file.is_file():
        return []
    patterns = []
    for raw in ignore_file.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        text = os.path.normpath(line.removeprefix("!").strip()).lstrip("/")
        patterns.append(Pattern(text, _compile(text), negated))
    return patterns


def excluded(path: str, patterns: list[Pattern]) -> bool:
    """Whether the relative path stays out of the context (it, or a parent, last matched)."""
    parents = [path]
    while "/" in parents[-1]:
        parents.append(parents[-1].rsplit("/", 1)[0])
    verdict = False
    for pattern in patterns:
        if any(pattern.regex.match(candidate) for candidate in parents):
            verdict = not pattern.negated
    return verdict


def context_files(root: Path) -> set[str]:
    """The files and links (relative, '/'-separated) a build of `root` sends to the builder."""
    patterns = read_patterns(root / ".dockerignore")
    # A directory left out is walked only if a re-include could name something inside it.
    wild_negation = any(p.negated and p.text[:1] in "*?[" for p in patterns)
    found: set[str] = set()
    for folder, dirs, files in os.walk(root):
        relative = Path(folder).relative_to(root).as_posix()
        prefix = "" if relative == "." else relative + "/"
        for name in list(dirs):
            path = prefix + name
            if (root / path).is_symlink():
                dirs.remove(name)
                if not excluded(path, patterns):
                    found.add(path)
            elif excluded(path, patterns) and not (
                wild_negation or any(p.negated and p.text.startswith(path + "/") for p in patterns)
            ):
                dirs.remove(name)
        found.update(prefix + name for name in files if not excluded(prefix + name, patterns))
    return found
