"""The one door to kio's private field introspection (`kio.serial._introspect`).

kio does not export how it classifies a schema field, but the pre-scan, the guarded codecs and
the test strategies need it. Everything they use comes through here, so that a kio release that
moves or changes it breaks one module, which tests/unit/codec/test_kio_introspect.py checks.
"""

from __future__ import annotations

from importlib.metadata import version

# The installed kio, named when it lacks what this module relies on.
KIO_VERSION = version("kio")

try:
    from kio.serial._implicit_defaults import get_tagged_field_default
    from kio.serial._introspect import (
        EntityField,
        EntityTupleField,
        PrimitiveTupleField,
        classify_field,
        get_field_tag,
        is_optional,
    )
except ImportError as exc:
    raise ImportError(
        f"kio {KIO_VERSION} no longer provides what codec/kio_introspect.py imports from "
        f"kio.serial ({exc}); it was written against kio 0.6.5"
    ) from exc

__all__ = [
    "KIO_VERSION",
    "EntityField",
    "EntityTupleField",
    "PrimitiveTupleField",
    "classify_field",
    "get_field_tag",
    "get_tagged_field_default",
    "is_optional",
]
