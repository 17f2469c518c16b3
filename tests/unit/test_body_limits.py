"""The request-size cap holds for what is *read*, not only for what is parsed: a body over the cap
is refused on its Content-Length before a byte is read, a chunked one (no Content-Length) is cut
off while streaming, and nothing is left for functions-framework's after_request hook, which
calls `request.get_data()` and would otherwise buffer the whole rest of the body.

The live counterpart (real gunicorn worker, RSS measured) is tests/integration/test_body_limits_live.py.
"""

from __future__ import annotations

import io
import time

import pytest
from flask import Flask
from flask import request as flask_request

from safesend.core.auth import SIGNATURE_HEADER, sign
from tests.unit.test_http_security import SECRET, api, untouched, world  # noqa: F401

APP = Flask(__name__)
LIMIT = 64_000  # the `api` fixture's max_request_bytes
# What the server may pull from a client that overshoots: the cap + 1 to know, then a bounded
# read-and-drop (a few MiB, never held) that keeps a keep-alive connection usable.
MAX_TAKEN = LIMIT + 1 + 5 * 1024 * 1024


class OverdrawnError(Exception):
    """The server kept reading a body it should have stopped at (the test's own safety stop)."""


class EndlessBody(io.RawIOBase):
    """A client that never stops sending; counts what the server pulled from it.

    Stops the test at 32 MiB: a server that reads without bound would otherwise eat all memory.
    """

    SAFETY_STOP = 32 * 1024 * 1024

    def __init__(self) -> None:
        self.taken = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[override]
        if self.taken >= self.SAFETY_STOP:
            raise OverdrawnError(f"the server read {self.taken} bytes and kept going")
        n = min(len(buffer), 1 << 20)
        buffer[:n] = b"x" * n
        self.taken += n
        return n


def call(
    handler,
    stream: io.RawIOBase,
    content_length: int | None,
    method: str = "POST",
    headers: dict[str, str] | None = None,
) -> tuple[int, int]:
    """Status, and how many bytes a later `request.get_data()` (the framework's hook) would get."""
    environ = {
        "wsgi.input": stream,
        "wsgi.input_terminated": True,  # gunicorn frames chunked bodies itself
        **(
            {"CONTENT_LENGTH": str(content_length)}
            if content_length is not None
            else {"HTTP_TRANSFER_ENCODING": "chunked"}
        ),
    }
    with APP.test_request_context(
        "/x", method=method, headers=headers or {}, content_type="application/json", environ_overrides=environ
    ):
        _, status, _ = handler(flask_request)
        left_over = len(flask_request.get_data())
    return status, left_over


@pytest.mark.parametrize("endpoint", ["send", "reconcile", "sweep"])
def test_a_declared_oversize_body_is_413_before_a_byte_is_read(api, world, endpoint):
    body = EndlessBody()
    status, left_over = call(getattr(api, endpoint), body, content_length=200 * 1024 * 1024)
    assert status == 413
    assert body.taken == 0 and left_over == 0
    assert untouched(world)


@pytest.mark.parametrize("endpoint", ["send", "reconcile", "sweep"])
def test_an_endless_chunked_body_is_cut_off_while_streaming(api, world, endpoint):
    body = EndlessBody()
    status, left_over = call(getattr(api, endpoint), body, content_length=None)
    assert status == 413
    assert body.taken <= MAX_TAKEN
    assert left_over == 0
    assert untouched(world)


@pytest.mark.parametrize("method", ["GET", "PUT"])
def test_a_body_nobody_reads_is_not_buffered_either(api, world, method):
    """GET /status and a wrong method never read the body; the framework must not either."""
    body = EndlessBody()
    handler = api.status if method == "GET" else api.send
    status, left_over = call(handler, body, content_length=None, method=method)
    assert status in (401, 405)
    assert left_over == 0 and body.taken <= MAX_TAKEN


def test_an_accepted_body_is_still_there_for_later_readers(api, world):
    raw = b'{"job_id": "' + b"0" * 32 + b'"}'
    headers = {SIGNATURE_HEADER: sign(SECRET, int(time.time()), raw)}
    with APP.test_request_context("/x", method="POST", data=raw, headers=headers, content_type="application/json"):
        status = api.send(flask_request)[1]
        assert flask_request.get_data() == raw
    assert status == 400  # through the guard to validation


@pytest.mark.parametrize("coding", ["gzip", "deflate"])
def test_a_compressed_body_is_never_inflated(api, world, coding):
    """Content-Encoding is not honoured: the signed bytes are the JSON or a 400, so a small bomb
    (32 KiB on the wire, 32 MiB inflated) costs what it weighs."""
    import gzip
    import zlib

    inflated = b" " * (32 * 1024 * 1024)
    raw = gzip.compress(inflated) if coding == "gzip" else zlib.compress(inflated)
    assert len(raw) < LIMIT
    headers = {SIGNATURE_HEADER: sign(SECRET, int(time.time()), raw), "Content-Encoding": coding}
    with APP.test_request_context("/x", method="POST", data=raw, headers=headers, content_type="application/json"):
        payload, status, _ = api.send(flask_request)
        assert flask_request.get_data() == raw
    assert (status, payload["error"]) == (400, "malformed_json")
    assert untouched(world)
