"""A policy's revision: the content hash every decision record names it by."""

from __future__ import annotations

import hashlib


def policy_revision(text: str | bytes) -> str:
    """The content hash that names a policy revision: `sha256:` and 16 hex digits."""
    data = text.encode("utf-8") if isinstance(text, str) else text
    return "sha256:" + hashlib.sha256(data).hexdigest()[:16]
