"""The one error type the codec raises for bytes it cannot decode or encode."""

from __future__ import annotations


class CodecError(Exception):
    """A frame could not be decoded (or a message encoded) for a given API and version."""

    def __init__(self, api_key: int, api_version: int, reason: str) -> None:
        self.api_key = api_key
        self.api_version = api_version
        self.reason = reason
        where = (
            "request header"
            if api_key < 0
            else f"{api_name(api_key)} (key {api_key}) v{api_version}"
        )
        super().__init__(f"{where}: {reason}")


def api_name(api_key: int) -> str:
    """Return the Kafka API name for a key, e.g. 19 -> 'CreateTopics'."""
    from kio.schema.index import api_key_map

    name = api_key_map.get(api_key)
    if name is None:
        return f"UnknownApi{api_key}"
    return "".join(part.capitalize() for part in name.split("_"))
