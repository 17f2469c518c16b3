"""Reading a request body without ever holding more of it than the limit allows.

An unauthenticated 200 MiB POST must cost us nothing: it is refused on its declared size before a
byte is read, a chunked one is cut while streaming, and what is left is dropped, not buffered.
"""

from __future__ import annotations

import io
import time
from typing import IO

from flask import Request

READ_CHUNK_BYTES = 64 * 1024
# A refused body this much over is read and dropped (never held) so the keep-alive connection
# stays usable; a bigger one is left unread and gunicorn closes the connection instead.
DISCARD_MAX_BYTES = 4 * 1024 * 1024
DISCARD_MAX_S = 2.0


def detach_body(request: Request) -> IO[bytes]:
    """Take the unread body away from Flask, leaving it an empty stream.

    functions-framework's after_request hook calls `request.get_data()`, which would buffer the
    whole rest of a refused body (hundreds of MB) before the response goes out. What the request guard
    accepts it puts back, bounded; `discard_rest` drops what nobody read.
    """
    wire = request.stream
    request.stream = io.BytesIO()
    return wire


def discard_rest(request: Request, wire: IO[bytes]) -> None:
    """Drop what is left of the body a chunk at a time, bounded in bytes and time.

    Left unread, more than gunicorn's own drain (64 KiB) makes it close a connection it has just
    announced as keep-alive, and a client's next request on it fails.
    """
    if request.content_length is not None and request.content_length > DISCARD_MAX_BYTES:
        return  # hopeless: let gunicorn close the connection
    deadline = time.monotonic() + DISCARD_MAX_S
    for _ in range(DISCARD_MAX_BYTES // READ_CHUNK_BYTES):
        if not wire.read(READ_CHUNK_BYTES) or time.monotonic() > deadline:
            return


def read_capped(wire: IO[bytes], limit: int) -> bytes | None:
    """The body, read in bounded chunks; None once it passes `limit` (chunked bodies declare no size)."""
    chunks: list[bytes] = []
    size = 0
    while size <= limit:
        chunk = wire.read(min(READ_CHUNK_BYTES, limit + 1 - size))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
    return None
