"""A TCP relay in front of a broker that records request and response frames (golden frames).

tests/data/capture_golden.py puts it in front of a one-broker cluster that advertises the
relay's port, so every client connection goes through it.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Mapping
from dataclasses import dataclass

from harness.frames import read_frame
from kafka_policy_proxy.codec.errors import CodecError
from kafka_policy_proxy.codec.guarded import GUARDED_API_KEYS
from kafka_policy_proxy.codec.header import peek_request_header, request_body_offset
from kafka_policy_proxy.codec.metadata_request import decode_metadata_request, metadata_topics

METADATA = 3
METADATA_PER_CLIENT_VERSION = 2


@dataclass
class Capture:
    """One request frame (size prefix stripped) and, once it arrives, its response frame."""

    client: str
    api_key: int
    api_version: int
    request: bytes
    response: bytes | None = None


class Recorder:
    """Thread-safe store of captured exchanges."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.captures: list[Capture] = []
        self.metadata_seen: dict[tuple[str, int], int] = {}

    def wants(self, client: str, api_key: int, api_version: int, frame: bytes) -> bool:
        """Guarded APIs always; Metadata requests that name topics, a few per client version."""
        if api_key in GUARDED_API_KEYS:
            return True
        if api_key != METADATA:
            return False
        with self.lock:
            seen = self.metadata_seen.get((client, api_version), 0)
            if seen >= METADATA_PER_CLIENT_VERSION or not _names_topics(frame, api_version):
                return False
            self.metadata_seen[client, api_version] = seen + 1
            return True


def _names_topics(frame: bytes, api_version: int) -> bool:
    header = peek_request_header(frame)
    try:
        request = decode_metadata_request(api_version, frame[request_body_offset(frame, header) :])
    except CodecError:
        return True
    return bool(metadata_topics(request).names)


def _read_frame(sock: socket.socket) -> bytes | None:
    try:
        return read_frame(sock)
    except ConnectionError:  # the peer closed (or reset): the relay ends this direction
        return None


def _relay(
    client: socket.socket, broker_port: int, recorder: Recorder, labels: Mapping[str, str]
) -> None:
    upstream = socket.create_connection(("127.0.0.1", broker_port))
    pending: dict[int, Capture] = {}

    def client_to_broker() -> None:
        while (frame := _read_frame(client)) is not None:
            header = peek_request_header(frame)
            label = labels.get(header.client_id or "", header.client_id or "unknown")
            if recorder.wants(label, header.api_key, header.api_version, frame):
                capture = Capture(label, header.api_key, header.api_version, frame)
                with recorder.lock:
                    recorder.captures.append(capture)
                    pending[header.correlation_id] = capture
            upstream.sendall(struct.pack(">i", len(frame)) + frame)
        with contextlib.suppress(OSError):
            upstream.shutdown(socket.SHUT_WR)

    def broker_to_client() -> None:
        while (frame := _read_frame(upstream)) is not None:
            (correlation_id,) = struct.unpack_from(">i", frame)
            with recorder.lock:
                capture = pending.pop(correlation_id, None)
                if capture is not None:
                    capture.response = frame
            client.sendall(struct.pack(">i", len(frame)) + frame)
        with contextlib.suppress(OSError):
            client.shutdown(socket.SHUT_WR)

    threads = [
        threading.Thread(target=f, daemon=True) for f in (client_to_broker, broker_to_client)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    client.close()
    upstream.close()


def serve(
    listener: socket.socket, broker_port: int, recorder: Recorder, labels: Mapping[str, str]
) -> None:
    """Relay every connection `listener` accepts to the broker, recording into `recorder`.

    `labels` names the clients by client.id; it returns when the listener is closed.
    """
    while True:
        try:
            client, _ = listener.accept()
        except OSError:
            return
        threading.Thread(
            target=_relay, args=(client, broker_port, recorder, labels), daemon=True
        ).start()
