"""A small client for Firestore's v1 REST API: get a document, commit writes, run a query.

Why not google-cloud-firestore: its import (grpc, protobuf, the GAPIC layers, google-auth's
transports) costs ~250 ms on every new instance (bench 7, `python -X importtime`), and the job
store needs three calls of the API. This module uses only the standard library: one kept-alive
HTTP/1.1 connection per thread, bounded by a deadline per call, and an access token from
access_tokens (the metadata server on Cloud Run, a fixed token for the emulator).

It never retries a commit: whether a commit whose answer was lost landed is for the job store to
find out (firestore_store re-reads the document). Reads that fail on a reused connection before
any answer came (the server closed it while idle) are tried once more on a new connection.
"""

from __future__ import annotations

import http.client
import json
import os
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar
from urllib.parse import quote

from .access_tokens import AccessTokenError, AccessTokens, default_tokens
from .one_shot_http import shared_ssl_context

T = TypeVar("T")
PRODUCTION_HOST = "firestore.googleapis.com"
DEFAULT_DATABASE = "(default)"
# A pooled connection that failed with one of these before any answer was closed by the server
# while idle: nothing was processed, a read may go again on a new connection.
_STALE_CONNECTION = (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError)
# A connection idle longer than this is replaced before use rather than risked: servers and load
# balancers close idle connections, and a commit lost on one costs the store a re-read to settle.
MAX_IDLE_S = 30.0


class FirestoreApiError(Exception):
    """Firestore answered with an error. `status` is the canonical code (ALREADY_EXISTS, ...)."""

    def __init__(self, http_status: int, status: str, message: str):
        super().__init__(f"{http_status} {status}: {message}")
        self.http_status = http_status
        self.status = status
        self.message = message


class FirestoreTransportError(Exception):
    """No answer came. `request_sent` False: nothing reached Firestore (the connection or the token
    failed first); True: the request may have been processed (a commit may have landed)."""

    def __init__(self, detail: str, request_sent: bool):
        super().__init__(detail)
        self.request_sent = request_sent


class FirestoreRestClient:
    """Documents of one database. Thread-safe: each thread keeps its own connection."""

    def __init__(
        self,
        project: str,
        database: str = DEFAULT_DATABASE,
        emulator_host: str | None = None,
        tokens: AccessTokens | None = None,
    ):
        emulator_host = emulator_host if emulator_host is not None else os.environ.get("FIRESTORE_EMULATOR_HOST")
        self.project = project
        self.database_path = f"projects/{project}/databases/{database}"
        self._host = emulator_host or PRODUCTION_HOST
        self._secure = not emulator_host
        self._tokens = tokens if tokens is not None else default_tokens(emulator=bool(emulator_host))
        self._local = threading.local()

    def document_name(self, collection: str, document_id: str) -> str:
        return f"{self.database_path}/documents/{collection}/{document_id}"

    def get(self, collection: str, document_id: str, timeout_s: float) -> dict[str, Any] | None:
        """The document (name, fields, createTime, updateTime), or None if it does not exist."""
        path = f"/v1/{self.database_path}/documents/{quote(collection, safe='')}/{quote(document_id, safe='')}"
        try:
            document = self._call("GET", path, None, timeout_s, idempotent=True)
        except FirestoreApiError as exc:
            if exc.status == "NOT_FOUND":
                return None
            raise
        return _shaped(document, dict, "a document")

    def commit(self, writes: Sequence[Mapping[str, Any]], timeout_s: float) -> dict[str, Any]:
        """One atomic commit; the answer has `writeResults[i].updateTime` for each write."""
        path = f"/v1/{self.database_path}/documents:commit"
        answer = self._call("POST", path, {"writes": list(writes)}, timeout_s, idempotent=False)
        return _shaped(answer, dict, "a commit response")

    def run_query(self, structured_query: Mapping[str, Any], timeout_s: float) -> list[dict[str, Any]]:
        """The documents a structured query matches, in its order."""
        path = f"/v1/{self.database_path}/documents:runQuery"
        answer = self._call("POST", path, {"structuredQuery": structured_query}, timeout_s, idempotent=True)
        answer = _shaped(answer, list, "a list")
        return [item["document"] for item in answer if isinstance(item, dict) and "document" in item]

    def close(self) -> None:
        """Close this thread's connection (others close with their threads)."""
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            conn.close()

    def _call(self, method: str, path: str, body: Any, timeout_s: float, idempotent: bool) -> Any:
        """One request within `timeout_s`; on a 401 the token is renewed and the request made once
        more (refused, so nothing was applied); a read on a stale pooled connection likewise."""
        deadline = time.monotonic() + timeout_s
        payload = None if body is None else json.dumps(body, separators=(",", ":")).encode("utf-8")
        for attempt in (1, 2):
            headers = {"Authorization": self._authorization(), "User-Agent": "safesend"}
            quota_project = self._tokens.quota_project()
            if quota_project:
                headers["x-goog-user-project"] = quota_project
            if payload is not None:
                headers["Content-Type"] = "application/json"
            reused = self._pooled() is not None
            try:
                status, content = self._exchange(method, path, payload, headers, deadline)
            except _STALE_CONNECTION as exc:
                if reused and idempotent and attempt == 1:
                    continue
                raise FirestoreTransportError(f"{method} {_short(path)}: connection lost: {exc!r}", True) from exc
            if status == 401 and attempt == 1:
                self._tokens.invalidate()
                continue
            return _answer(status, content)
        raise FirestoreTransportError(f"{method} {_short(path)}: no answer after a retry", True)

    def _authorization(self) -> str:
        try:
            return self._tokens.authorization()
        except AccessTokenError as exc:
            raise FirestoreTransportError(f"no access token: {exc}", False) from exc

    def _exchange(
        self, method: str, path: str, payload: bytes | None, headers: dict[str, str], deadline: float
    ) -> tuple[int, bytes]:
        conn = self._connection(deadline)
        conn.sock.settimeout(_time_left(deadline, request_sent=False))
        try:
            conn.request(method, path, body=payload, headers=headers)
            conn.sock.settimeout(_time_left(deadline, request_sent=True))
            response = conn.getresponse()
            content = response.read()
        except (*_STALE_CONNECTION, FirestoreTransportError):  # the deadline passed while answering
            self.close()
            raise
        except (OSError, http.client.HTTPException) as exc:
            self.close()
            raise FirestoreTransportError(f"{method} {_short(path)}: {exc!r}", True) from exc
        self._local.used_at = time.monotonic()
        if response.will_close:
            self.close()
        return response.status, content

    def _pooled(self) -> http.client.HTTPConnection | None:
        """This thread's kept-alive connection, unless it has been idle too long (then closed)."""
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is not None and time.monotonic() - getattr(self._local, "used_at", 0.0) > MAX_IDLE_S:
            self.close()
            return None
        return conn

    def _connection(self, deadline: float) -> http.client.HTTPConnection:
        conn = self._pooled()
        if conn is not None:
            self._local.used_at = time.monotonic()
            return conn
        timeout = _time_left(deadline, request_sent=False)
        if self._secure:
            conn = http.client.HTTPSConnection(self._host, timeout=timeout, context=shared_ssl_context())
        else:
            conn = http.client.HTTPConnection(self._host, timeout=timeout)
        try:
            conn.connect()
        except OSError as exc:
            conn.close()
            raise FirestoreTransportError(f"cannot connect to {self._host}: {exc!r}", False) from exc
        self._local.conn, self._local.used_at = conn, time.monotonic()
        return conn


def _shaped(answer: Any, kind: type[T], what: str) -> T:
    """A 2xx answer of another shape than documented is not an answer (UNKNOWN: a commit may have
    landed, a read is tried again): read as "no documents", a query would hide due jobs."""
    if not isinstance(answer, kind):
        raise FirestoreApiError(200, "UNKNOWN", f"answer is not {what}: {type(answer).__name__}")
    return answer


def _answer(status: int, content: bytes) -> Any:
    try:
        data = json.loads(content) if content else None  # every documented answer has a body
    except (ValueError, RecursionError):  # RecursionError: a deeply nested body
        data = None
    if 200 <= status < 300 and data is not None:
        return data
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict):
        raise FirestoreApiError(status, str(error.get("status") or status), str(error.get("message", ""))[:500])
    raise FirestoreApiError(status, _STATUS_BY_HTTP.get(status, "UNKNOWN"), content[:200].decode("utf-8", "replace"))


# What a bare HTTP status (no JSON error body: a proxy, a load balancer) means in gRPC terms.
_STATUS_BY_HTTP = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ABORTED",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def _time_left(deadline: float, request_sent: bool) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        where = "after the request was written" if request_sent else "before the request was written"
        raise FirestoreTransportError(f"deadline passed {where}", request_sent)
    return left


def _short(path: str) -> str:
    """The path without the document id, for errors and logs."""
    return path.rsplit("/", 1)[0] if "documents/" in path else path
