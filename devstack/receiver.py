"""A loopback HTTP endpoint that records what it is sent: the stand-in for an n8n Wait node's resume
URL (callbacks) and, later, for chat webhooks. Can refuse the next N requests to test retries, be
down for a while (every request refused, or its connection closed unanswered), and answer slowly.

Standard library only; binds 127.0.0.1 only; every wait is bounded.
"""

from __future__ import annotations

import contextlib
import functools
import json
import struct
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

LOOPBACK = "127.0.0.1"
MAX_BODY_BYTES = 1 << 20
BOMB_INFLATED_BYTES = 512 << 20  # issue 18.7: what a hostile callback host answered with


GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"  # deflate, no name, no mtime, best compression
MIB = 1 << 20


@functools.lru_cache(maxsize=2)
def gzip_bomb(inflated_bytes: int = BOMB_INFLATED_BYTES) -> bytes:
    """A gzip body of ~inflated_bytes/1000 that inflates to `inflated_bytes` zeros (the bomb itself
    is never held inflated). After a full flush deflate refers to nothing before it, so every MiB of
    zeros compresses to the same block: one is compressed and repeated, and only the CRC is computed
    over every MiB (512 MiB: 2.6 CPU-s when all of it was compressed, 0.3 now; 2026-12-02, 2-core
    machine)."""
    whole, rest = divmod(inflated_bytes, MIB)
    packer = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)  # raw deflate: the gzip frame is ours
    block = packer.compress(bytes(MIB)) + packer.flush(zlib.Z_FULL_FLUSH) if whole else b""
    last = packer.compress(bytes(rest)) + packer.flush()
    crc = functools.reduce(lambda value, _: zlib.crc32(bytes(MIB), value), range(whole), 0)
    trailer = struct.pack("<II", zlib.crc32(bytes(rest), crc), inflated_bytes & 0xFFFFFFFF)
    return GZIP_HEADER + block * whole + last + trailer


MAX_DELAY_S = 30.0
DROP = 0  # an outage "status": the connection is closed without an answer (the receiver is down)


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    at: float = field(default_factory=time.time)

    def json(self) -> Any:
        return json.loads(self.body)


class RecordingReceiver:
    """Answers 200 `{"ok": true}` to everything, except the refusals queued with `refuse_next`."""

    def __init__(self) -> None:
        self.received: list[Received] = []  # answered 2xx
        self.refused: list[Received] = []
        self._refusals: list[tuple[int, int | None]] = []
        self._outage: tuple[int, int | None] | None = None
        self._delay_s = 0.0
        self._bombs = 0
        self._lock = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # http.server naming
                length = min(int(self.headers.get("Content-Length") or 0), MAX_BODY_BYTES)
                item = Received("POST", self.path, dict(self.headers.items()), self.rfile.read(length))
                status, retry_after, delay_s = receiver._record(item)
                if delay_s:
                    time.sleep(delay_s)
                if status == DROP:
                    self.close_connection = True
                    return
                body = b'{"ok": true}' if status < 300 else b'{"error": "refused by the test"}'
                bomb = receiver._take_bomb()
                self.send_response(status)
                if bomb:  # whatever the request asked for (Accept-Encoding), as a hostile host would
                    body = gzip_bomb()
                    self.send_header("Content-Encoding", "gzip")
                if retry_after is not None:
                    self.send_header("Retry-After", str(retry_after))
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                with contextlib.suppress(
                    BrokenPipeError, ConnectionResetError
                ):  # a client that reads only the status may close before the body is out
                    self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
                pass

        self._server = ThreadingHTTPServer((LOOPBACK, 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.2}, name="recording-receiver", daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self._server.server_address[1]}"

    def start(self) -> RecordingReceiver:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> RecordingReceiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def refuse_next(self, count: int, status: int = 409, retry_after: int | None = None) -> None:
        """The next `count` requests get `status` (n8n answers 409 before its Wait node is reached),
        with a `Retry-After: <retry_after>` header when given (a webhook's 429)."""
        with self._lock:
            self._refusals.extend([(status, retry_after)] * count)

    def bomb_next(self, count: int) -> None:
        """The next `count` answers carry gzip_bomb() as their body, Content-Encoding: gzip."""
        with self._lock:
            self._bombs += count

    def _take_bomb(self) -> bool:
        with self._lock:
            if self._bombs <= 0:
                return False
            self._bombs -= 1
            return True

    def set_outage(self, status: int | None, retry_after: int | None = None) -> None:
        """Until called with None, every request gets `status` (DROP: its connection is closed
        unanswered), with `Retry-After: <retry_after>` when given: a receiver that is down."""
        with self._lock:
            self._outage = None if status is None else (status, retry_after)

    def set_delay(self, seconds: float) -> None:
        """Answer every request `seconds` after it arrived (a slow receiver; bounded)."""
        with self._lock:
            self._delay_s = min(max(0.0, seconds), MAX_DELAY_S)

    def _record(self, item: Received) -> tuple[int, int | None, float]:
        """What to answer: a queued refusal first, then the outage, else 200. Recorded on arrival."""
        with self._lock:
            if self._refusals:
                status, retry_after = self._refusals.pop(0)
            else:
                status, retry_after = self._outage or (200, None)
            (self.refused if status == DROP or status >= 300 else self.received).append(item)
            self._lock.notify_all()
            return status, retry_after, self._delay_s

    def for_path(self, path: str) -> list[Received]:
        with self._lock:
            return [r for r in self.received if r.path == path]

    def wait_for(self, predicate: Callable[[list[Received]], bool], timeout_s: float = 30.0) -> list[Received]:
        """Block until `predicate(received)` holds (bounded); returns what was received."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while not predicate(list(self.received)):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(
                        f"receiver: condition not met in {timeout_s}s; got {len(self.received)} "
                        f"requests, refused {len(self.refused)}"
                    )
                self._lock.wait(min(left, 0.5))
            return list(self.received)
