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

# The bytes of each fixed-size type kio names a primitive field's type.
FIXED_SIZES = {
    "bool": 1,
    "int8": 1,
    "uint8": 1,
    "int16": 2,
    "uint16": 2,
    "error_code": 2,
    "int32": 4,
    "uint32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "uint64": 8,
    "float64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "uuid": 16,
}

__all__ = [
    "FIXED_SIZES",
    "KIO_VERSION",
    "EntityField",
    "EntityTupleField",
    "PrimitiveTupleField",
    "classify_field",
    "get_field_tag",
    "get_tagged_field_default",
    "is_optional",
]
