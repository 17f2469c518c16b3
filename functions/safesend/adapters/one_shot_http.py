"""An httplib2-compatible transport that sends each request exactly once, on a fresh connection.

Why not httplib2.Http: its `_conn_request` re-sends a request when the server
closes a kept-alive connection (BadStatusLine/RemoteDisconnected) "regardless of
the number of RETRIES set", and on some send-side HTTPExceptions. For a POST
to messages.send that is a second email. Here:
- one new connection per request (`Connection: close`), so no stale socket is ever reused;
- no retry, no redirect following;
- the connect phase (DNS, TCP, TLS) is separated from the write/read phase, so a
  failure can be told apart: before the request was written means not sent;
- a wall-clock deadline (`deadline`, absolute `time.monotonic()`; by default now + `timeout` per
  request): each phase's socket timeout is the time left, and a watchdog shuts the socket down when
  the deadline passes. A per-operation timeout alone is not a deadline: a server writing one byte
  just inside it keeps the call open indefinitely. request() returns or raises at most
  DEADLINE_SLACK_S after the deadline;
- a bounded answer: at most `max_body_bytes` are read, and a compressed answer is inflated in steps
  that never produce more than that (a 500 KB gzip of 512 MiB is a BODY_TOO_LARGE error, never a
  truncated body and never 512 MiB in memory). `status_only` callers (callbacks, chat webhooks)
  ask for `identity`, read at most STATUS_ONLY_READ_BYTES and decode nothing: only the status counts.
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import ipaddress
import socket
import ssl
import threading
import time
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn, TypedDict
from urllib.parse import urlsplit

from ..core.classify import TransportErrorKind

if TYPE_CHECKING:
    import httplib2

# How late request() can return after its deadline: the watchdog timer's wake-up plus unwinding the
# interrupted call. Generous for a loaded instance; measured in milliseconds on an idle one.
DEADLINE_SLACK_S = 0.25
MIN_PHASE_TIMEOUT_S = 0.001  # settimeout(0) would make the socket non-blocking, not "no time left"
# Gmail's JSON answers (a search page, a change-log page, one message's metadata) are kilobytes.
MAX_BODY_BYTES = 8 * 1024 * 1024
STATUS_ONLY_READ_BYTES = 4096  # what a status-only caller reads of an answer before closing
MAX_GZIP_MEMBERS = 64  # a gzip answer may be several members; more is not an answer but an attack


class TransportError(Exception):
    """A transport failure with the phase it happened in; `kind` feeds classify_transport."""

    def __init__(self, kind: TransportErrorKind, detail: str):
        super().__init__(f"{kind.value}: {detail}")
        self.kind = kind


class OneShotHttp:
    """Implements the slice of httplib2.Http that googleapiclient and google-auth-httplib2 use.

    `deadline` (absolute monotonic time) bounds every request made through this instance, so one
    instance per attempt makes several requests (a token refresh, then the send) share one deadline.
    Without it each request gets its own deadline, `timeout` seconds after it starts.
    """

    def __init__(
        self,
        timeout: float = 20.0,
        ssl_context: ssl.SSLContext | None = None,
        deadline: float | None = None,
        allow_address: Callable[[str], bool] | None = None,
        max_body_bytes: int = MAX_BODY_BYTES,
        status_only: bool = False,
    ):
        self.timeout = timeout
        self.deadline = deadline
        self.max_body_bytes = max_body_bytes
        # Only the status is used: ask for an uncompressed answer, read a little of it, decode nothing.
        self.status_only = status_only
        # Callers' URLs (callbacks): only resolved addresses this accepts are connected to, and the
        # connection goes to the very address that was checked (no second lookup to rebind).
        self.allow_address = allow_address
        self._ssl_context = ssl_context
        # Attributes google_auth_httplib2.AuthorizedHttp proxies; unused here.
        self.connections: dict[str, Any] = {}
        self.follow_redirects = False
        self.redirect_codes: frozenset[int] = frozenset()

    def request(
        self,
        uri: str,
        method: str = "GET",
        body: Any = None,
        headers: dict[str, str] | None = None,
        redirections: int = 0,
        connection_type: Any = None,
        **_: Any,
    ) -> tuple[httplib2.Response, bytes]:
        parts = urlsplit(uri)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise TransportError(TransportErrorKind.CONNECT_FAILED, f"unsupported URL {uri!r}")
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        send_headers = {k: v for k, v in (headers or {}).items() if k.lower() != "accept-encoding"}
        send_headers["accept-encoding"] = "identity" if self.status_only else "gzip"
        send_headers["connection"] = "close"
        payload = _body_bytes(body)

        deadline = self.deadline if self.deadline is not None else time.monotonic() + self.timeout
        _require_time_left(deadline, "before connecting")
        watchdog = _Watchdog(deadline)
        conn = self._connection(parts.scheme, parts.hostname, parts.port, deadline, watchdog)
        try:
            self._connect(conn, watchdog)
            _require_time_left(deadline, "after connecting, before writing the request")
            return self._exchange(conn, method, path, payload, send_headers, deadline, watchdog, self._body_limit())
        finally:
            watchdog.disarm()
            conn.close()

    def close(self) -> None:
        """Nothing pooled, nothing to close: present because httplib2.Http has it."""

    def _body_limit(self) -> int | None:
        """Bytes of the answer's body to read: a cap (Gmail), or None for status only."""
        return None if self.status_only else self.max_body_bytes

    def _connection(
        self, scheme: str, host: str, port: int | None, deadline: float, watchdog: _Watchdog
    ) -> http.client.HTTPConnection:
        timeout = _time_left(deadline)
        if scheme == "https":
            context = self._ssl_context or shared_ssl_context()
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(host, port, timeout=timeout, context=context)
        else:
            conn = http.client.HTTPConnection(host, port, timeout=timeout)
        # http.client's socket factory hook (used by connect() for http and https alike): ours
        # resolves and connects within the deadline and arms the watchdog before any TLS byte.
        conn._create_connection = functools.partial(  # type: ignore[attr-defined]  # noqa: SLF001 - the hook
            _open_socket, deadline=deadline, watchdog=watchdog, allow_address=self.allow_address
        )
        return conn

    @staticmethod
    def _connect(conn: http.client.HTTPConnection, watchdog: _Watchdog) -> None:
        """Phase 1: nothing of the request has been written yet, whatever fails here.

        A timeout, the deadline's included, stays TIMEOUT (conservative, see classify.TransportErrorKind).
        """
        try:
            conn.connect()
        except Exception as exc:
            if watchdog.disarm():
                raise TransportError(TransportErrorKind.TIMEOUT, f"connect: attempt deadline passed: {exc!r}") from exc
            _raise_connect_failure(exc)

    @staticmethod
    def _exchange(
        conn: http.client.HTTPConnection,
        method: str,
        path: str,
        payload: bytes | None,
        headers: dict[str, str],
        deadline: float,
        watchdog: _Watchdog,
        limit: int | None,
    ) -> tuple[httplib2.Response, bytes]:
        """Phase 2: from the first byte written on, a failure means the request may have been processed.

        `limit`: the most body bytes read (one more tells an answer over it); None: status only.

        The watchdog's shutdown looks like EOF to http.client, which may even take a body read
        until close as complete: once it fired, the outcome is a timeout, whatever was read.
        """
        where = f"{method} {path.split('?', maxsplit=1)[0]}"
        try:
            conn.sock.settimeout(max(_time_left(deadline), MIN_PHASE_TIMEOUT_S))
            conn.request(method, path, body=payload, headers=headers)
            conn.sock.settimeout(max(_time_left(deadline), MIN_PHASE_TIMEOUT_S))
            raw = conn.getresponse()
            content = raw.read(STATUS_ONLY_READ_BYTES if limit is None else limit + 1)
        except Exception as exc:
            if watchdog.disarm():
                raise TransportError(TransportErrorKind.TIMEOUT, f"{where}: attempt deadline passed") from exc
            _raise_exchange_failure(exc, where)
        if watchdog.disarm():
            raise TransportError(TransportErrorKind.TIMEOUT, f"{where}: attempt deadline passed while reading")
        if limit is None:
            return _response(raw, b"", decode=False)
        if len(content) > limit:
            raise TransportError(TransportErrorKind.BODY_TOO_LARGE, f"{where}: answer over {limit} bytes")
        return _response(raw, content, limit)


class _Watchdog:
    """Shuts the connection down when the deadline passes; disarm() says whether it did.

    It shuts down a dup() of the socket: the dup is ours to close, so the file descriptor can never
    be closed and reused by someone else while the timer is pending.
    """

    def __init__(self, deadline: float):
        self._deadline = deadline
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._sock: socket.socket | None = None
        self._done = False
        self.fired = False

    def arm(self, sock: socket.socket) -> None:
        dup = sock.dup()
        with self._lock:
            if self._done:
                dup.close()
                return
            self._sock = dup
            self._timer = threading.Timer(max(0.0, _time_left(self._deadline)), self._fire)
            self._timer.daemon = True
            self._timer.start()

    def _fire(self) -> None:
        with self._lock:
            if self._done or self._sock is None:
                return
            self.fired = True
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)  # wakes a blocked read or write with EOF/EPIPE

    def disarm(self) -> bool:
        """Stop the timer (idempotent); True if the deadline had already cut the connection."""
        with self._lock:
            self._done = True
            timer, sock = self._timer, self._sock
            self._timer = self._sock = None
        if timer is not None:
            timer.cancel()
        if sock is not None:
            sock.close()
        return self.fired


def _time_left(deadline: float) -> float:
    return deadline - time.monotonic()


def _require_time_left(deadline: float, where: str) -> None:
    """Nothing of the request is written yet: a deadline already passed here is a clean not-sent."""
    if _time_left(deadline) <= 0:
        raise TransportError(TransportErrorKind.CONNECT_FAILED, f"attempt deadline passed {where}: nothing sent")


def _open_socket(
    address: tuple[str, int],
    timeout: Any = None,
    source_address: Any = None,
    *,
    deadline: float,
    watchdog: _Watchdog,
    allow_address: Callable[[str], bool] | None = None,
) -> socket.socket:
    """socket.create_connection within the deadline: each address gets the time left, not a fresh timeout.

    Signature of http.client's `_create_connection` hook; its `timeout` is ignored for the deadline.
    """
    host, port = address
    last: OSError = OSError(f"no address for {host!r}")
    for family, kind, proto, _name, sockaddr in _resolve(host, port, deadline):
        if allow_address is not None and not allow_address(sockaddr[0]):
            last = PermissionError(f"{host} resolves to an address that is not allowed")
            continue
        left = _time_left(deadline)
        if left <= 0:
            raise TimeoutError(f"attempt deadline passed while connecting to {host}")
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(left)
            if source_address:
                sock.bind(source_address)
            sock.connect(sockaddr)
        except OSError as exc:
            sock.close()
            last = exc
            continue
        sock.settimeout(max(_time_left(deadline), MIN_PHASE_TIMEOUT_S))  # the TLS handshake's share
        watchdog.arm(sock)
        return sock
    raise last


class _Lookup(TypedDict, total=False):
    """What the lookup thread of _resolve leaves: the addresses, or the error."""

    infos: list[tuple[Any, ...]]
    error: OSError


def _resolve(host: str, port: int, deadline: float) -> list[tuple[Any, ...]]:
    """getaddrinfo has no timeout: a name is looked up aside and waited for only the time left.

    An abandoned lookup sends nothing and ends when the resolver gives up (resolv.conf timeouts).
    """
    if _is_ip_literal(host):
        return socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)
    box: _Lookup = {}

    def lookup() -> None:
        try:
            box["infos"] = socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)
        except OSError as exc:
            box["error"] = exc

    worker = threading.Thread(target=lookup, name="oneshot-dns", daemon=True)
    worker.start()
    worker.join(max(0.0, _time_left(deadline)))
    if worker.is_alive():
        raise TimeoutError(f"DNS lookup of {host} outlived the attempt deadline")
    if "error" in box:
        raise box["error"]
    return box["infos"]


def _is_ip_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _raise_connect_failure(exc: Exception) -> NoReturn:
    """Map a connect-phase exception; nothing was written, so only a timeout is not a clean not-sent."""
    if isinstance(exc, socket.gaierror):
        raise TransportError(TransportErrorKind.DNS, str(exc)) from exc
    if isinstance(exc, ConnectionRefusedError):
        raise TransportError(TransportErrorKind.CONNECT_REFUSED, str(exc)) from exc
    if isinstance(exc, ssl.SSLError):
        raise TransportError(TransportErrorKind.TLS_HANDSHAKE, str(exc)) from exc
    if isinstance(exc, TimeoutError):  # socket.timeout is TimeoutError
        raise TransportError(TransportErrorKind.TIMEOUT, f"connect: {exc}") from exc
    if isinstance(exc, OSError):
        raise TransportError(TransportErrorKind.CONNECT_FAILED, str(exc)) from exc
    raise exc


def _raise_exchange_failure(exc: Exception, where: str) -> NoReturn:
    """Map a write/read-phase exception: the request may have been processed, whatever it is."""
    if isinstance(exc, TimeoutError):
        raise TransportError(TransportErrorKind.TIMEOUT, f"{where}: {exc}") from exc
    if isinstance(exc, (ConnectionError, http.client.RemoteDisconnected)):
        raise TransportError(TransportErrorKind.DISCONNECTED_AFTER_WRITE, repr(exc)) from exc
    if isinstance(exc, (http.client.HTTPException, ssl.SSLError)):
        raise TransportError(TransportErrorKind.PROTOCOL, repr(exc)) from exc
    if isinstance(exc, OSError):
        raise TransportError(TransportErrorKind.DISCONNECTED_AFTER_WRITE, repr(exc)) from exc
    raise exc


def _response(
    raw: http.client.HTTPResponse, content: bytes, limit: int = MAX_BODY_BYTES, decode: bool = True
) -> tuple[httplib2.Response, bytes]:
    import httplib2  # ~25 ms (pyparsing): callbacks and webhooks import this module, status needs neither

    info = {k.lower(): v for k, v in raw.getheaders()}
    encoding = info.pop("content-encoding", "")
    if decode:
        content = _decode(content, encoding, limit)
    info["status"] = str(raw.status)
    info["content-length"] = str(len(content))
    response = httplib2.Response(info)
    response.reason = raw.reason
    return response, content


@functools.lru_cache(maxsize=1)
def shared_ssl_context() -> ssl.SSLContext:
    """One verified TLS context per process: building one loads the CA store (~19 ms, bench/)."""
    return ssl.create_default_context()


def _body_bytes(body: Any) -> bytes | None:
    if body is None:
        return None
    if isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return body.encode("utf-8")
    if hasattr(body, "read"):
        content: bytes = body.read()  # googleapiclient's media upload (a file-like object)
        return content
    raise TypeError(f"unsupported request body type {type(body).__name__}")


def _decode(content: bytes, encoding: str, limit: int) -> bytes:
    """The body, inflated to at most `limit` bytes: more is BODY_TOO_LARGE, never a silent cut."""
    encoding = encoding.strip().lower()
    if encoding not in ("gzip", "deflate"):
        return content
    try:
        return _inflate(content, 16 + zlib.MAX_WBITS if encoding == "gzip" else zlib.MAX_WBITS, limit)
    except zlib.error as exc:
        raise TransportError(TransportErrorKind.PROTOCOL, f"bad {encoding} body: {exc}") from exc


def _inflate(content: bytes, wbits: int, limit: int) -> bytes:
    """zlib/gzip members one after the other (gzip allows several), each inflated with max_length
    set to what is left of `limit`: memory never holds more than limit + 1 inflated bytes."""
    out = bytearray()
    rest = content
    for _ in range(MAX_GZIP_MEMBERS):
        inflater = zlib.decompressobj(wbits)
        out += inflater.decompress(rest, limit + 1 - len(out))
        if len(out) > limit or inflater.unconsumed_tail:
            raise TransportError(TransportErrorKind.BODY_TOO_LARGE, f"answer inflates past {limit} bytes")
        if not inflater.eof:
            raise TransportError(TransportErrorKind.PROTOCOL, "compressed answer ends before its end marker")
        rest = inflater.unused_data
        if not rest:
            return bytes(out)
    raise TransportError(TransportErrorKind.PROTOCOL, f"compressed answer of more than {MAX_GZIP_MEMBERS} members")
