"""A socket-level HTTP relay that injects the network faults which make Gmail sends ambiguous.

Why: the dangerous failures for a non-idempotent POST are the ones where the client cannot tell whether
the upstream accepted the request (connection dropped after forwarding, response lost, response too slow).
Those can only be produced by controlling exactly when bytes are written or a socket is closed, so this
relay parses HTTP/1.1 itself on raw sockets (one thread per client connection, keep-alive supported) and
forwards each request with a fresh ``http.client`` connection.

``trickle-response`` forwards, then writes the real answer one byte every ``delay_s``: each read the client makes
succeeds just inside a per-operation socket timeout, so only a wall-clock deadline on the client ends the wait.

Per mailbox: a mode set with ``mailbox`` applies only to Gmail API requests whose path names that userId
(``/gmail/v1/users/<mailbox>/...``), and takes precedence there over the mode set without one; so one relay
in front of a simulator with several mailboxes can fault one mailbox and leave the others alone.

Standard library only. Binds 127.0.0.1 only. Control endpoints live under ``/_relay/`` and are never forwarded.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import re
import select
import signal
import socket
import sys
import threading
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any

from devstack.gmail_sim import google_error_body
from devstack.sim_server import LOOPBACK, require_loopback

__all__ = ["MODES", "FaultRelay", "main"]

MODES = (
    "forward-and-respond",
    "fail-before-forward",
    "forward-then-drop-response",
    "close-after-forward",
    "forward-then-5xx",
    "429-before-forward",
    "slow-response",
    "trickle-response",
)
MATCHES = ("send", "all")
NORMAL = "forward-and-respond"

MAX_LINE = 65_536
MAX_HEADERS = 200
MAX_BODY_BYTES = 40 * 1024 * 1024
MAX_REQUESTS_PER_CONNECTION = 1000  # bounds one client connection's keep-alive loop
MAX_DELAY_S = 600.0
IDLE_TIMEOUT_S = 15.0  # idle keep-alive client connections are closed after this
UPSTREAM_TIMEOUT_S = 30.0
ACCEPT_POLL_S = 0.2  # accept loop / waits re-check the stop flag this often
JOIN_TIMEOUT_S = 5.0

_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
    "host",
}


class _BadRequest(Exception):  # noqa: N818 - named for the HTTP answer it becomes
    """Client sent something we refuse to relay; answered with ``status`` and the connection closed."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class _Request:
    method: str
    target: str
    version: str
    headers: list[tuple[str, str]]
    body: bytes

    @property
    def path(self) -> str:
        return urllib.parse.urlsplit(self.target).path

    def header(self, name: str) -> str | None:
        for key, value in self.headers:
            if key.lower() == name.lower():
                return value
        return None

    @property
    def wants_close(self) -> bool:
        conn = (self.header("Connection") or "").lower()
        return "close" in conn or (self.version == "HTTP/1.0" and "keep-alive" not in conn)


@dataclass
class _Response:
    status: int
    reason: str
    headers: list[tuple[str, str]]
    body: bytes


@dataclass
class _ModeState:
    """The active fault and how many more matching requests it applies to (None = until changed)."""

    mode: str = NORMAL
    match: str = "send"
    remaining: int | None = None
    delay_s: float = 30.0


def _read_line(reader: Any) -> bytes:
    line = reader.readline(MAX_LINE + 1)
    if len(line) > MAX_LINE:
        raise _BadRequest(431, "header line too long")
    return line


def _read_request(reader: Any) -> _Request | None:
    """Parse one HTTP/1.x request; None on a clean EOF between requests."""
    line = b""
    for _ in range(10):  # tolerate a few stray CRLFs between requests (RFC 9112 2.2)
        line = _read_line(reader)
        if not line:
            return None
        if line.strip():
            break
    parts = line.decode("latin-1").strip().split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise _BadRequest(400, "malformed request line")
    method, target, version = parts
    headers: list[tuple[str, str]] = []
    for _ in range(MAX_HEADERS + 1):
        raw = _read_line(reader)
        if raw in (b"\r\n", b"\n"):
            break
        if not raw:
            raise _BadRequest(400, "connection closed inside headers")
        if raw[:1] in (b" ", b"\t") and headers:  # obsolete line folding
            name, value = headers[-1]
            headers[-1] = (name, value + " " + raw.decode("latin-1").strip())
            continue
        name, sep, value = raw.decode("latin-1").partition(":")
        if not sep or not name.strip():
            raise _BadRequest(400, "malformed header line")
        headers.append((name.strip(), value.strip()))
    else:
        raise _BadRequest(431, "too many headers")
    request = _Request(method, target, version, headers, b"")
    if "chunked" in (request.header("Transfer-Encoding") or "").lower():
        raise _BadRequest(411, "chunked request bodies are not supported; send Content-Length")
    try:
        length = int(request.header("Content-Length") or 0)
    except ValueError:
        raise _BadRequest(400, "invalid Content-Length") from None
    if not 0 <= length <= MAX_BODY_BYTES:
        raise _BadRequest(413, "request body too large")
    body = reader.read(length) if length else b""
    if len(body) != length:
        raise _BadRequest(400, "connection closed inside body")
    request.body = body
    return request


def _serialize(response: _Response, close: bool) -> bytes:
    lines = [f"HTTP/1.1 {response.status} {response.reason}"]
    lines += [f"{k}: {v}" for k, v in response.headers if k.lower() not in _HOP_BY_HOP]
    lines.append(f"Content-Length: {len(response.body)}")
    lines.append("Connection: close" if close else "Connection: keep-alive")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", "replace")
    return head + response.body  # one write: no Nagle/delayed-ACK stall


def _json_response(status: int, obj: Any, reason: str = "") -> _Response:
    body = json.dumps(obj).encode("utf-8")
    reason = reason or http.client.responses.get(status, "Error")
    return _Response(status, reason, [("Content-Type", "application/json; charset=UTF-8")], body)


def _hard_close(sock: socket.socket) -> None:
    """Close with a FIN and no bytes written: the client sees EOF where it expected a status line."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()


class FaultRelay:
    """HTTP relay with switchable faults for requests that ``match`` (see module docstring and MODES)."""

    def __init__(self, upstream_url: str, host: str = LOOPBACK, port: int = 0) -> None:
        require_loopback(host)
        parsed = urllib.parse.urlsplit(upstream_url)
        if parsed.scheme != "http" or not parsed.hostname:
            raise ValueError("upstream_url must be http://host:port/ (plain HTTP)")
        self.upstream_url = upstream_url
        self._up_host = parsed.hostname
        self._up_port = parsed.port or 80
        self._up_prefix = parsed.path.rstrip("/")
        self._host = host
        self._port = port
        self._lock = threading.Lock()
        self._state = _ModeState()
        self._mailbox_states: dict[str, _ModeState] = {}  # by lower-case userId; wins over _state
        self._stats: dict[str, Any] = {}
        self._reset_stats()
        self._stop = threading.Event()
        self._listener: socket.socket | None = None
        self._accept_thread: threading.Thread | None = None
        self._clients: dict[threading.Thread, socket.socket] = {}

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> FaultRelay:
        if self._listener is not None:
            raise RuntimeError("relay already started")
        self._stop.clear()
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self._host, self._port))
        listener.listen(64)
        listener.settimeout(ACCEPT_POLL_S)
        self._listener = listener
        self._accept_thread = threading.Thread(target=self._accept_loop, name=f"fault-relay-{self.port}", daemon=True)
        self._accept_thread.start()
        return self

    def stop(self, timeout: float = JOIN_TIMEOUT_S) -> None:
        """Stop accepting, interrupt delays, close every client socket, join threads (bounded)."""
        listener = self._listener
        if listener is None:
            return
        self._stop.set()
        deadline = time.monotonic() + timeout
        if self._accept_thread is not None:
            self._accept_thread.join(max(0.0, deadline - time.monotonic()))
        listener.close()
        with self._lock:
            clients = list(self._clients.items())
        for _thread, sock in clients:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        for thread, _sock in clients:
            thread.join(max(0.0, deadline - time.monotonic()))
        self._listener = None
        self._accept_thread = None

    def __enter__(self) -> FaultRelay:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._listener is None:
            raise RuntimeError("relay not started")
        return int(self._listener.getsockname()[1])

    @property
    def url(self) -> str:
        return f"http://{self._host}:{self.port}/"

    # ------------------------------------------------------------------- controls
    def set_mode(
        self,
        mode: str,
        match: str = "send",
        count: int | None = None,
        delay_s: float = 30.0,
        mailbox: str | None = None,
    ) -> None:
        """Apply ``mode`` to the next ``count`` requests that ``match`` ("send" or "all"), then revert.
        With ``mailbox``, only to that mailbox's requests; its NORMAL mode drops the mailbox's own mode."""
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; expected one of {', '.join(MODES)}")
        if match not in MATCHES:
            raise ValueError(f"unknown match {match!r}; expected one of {', '.join(MATCHES)}")
        if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
            raise ValueError("count must be a positive int or None")
        delay_s = float(delay_s)
        if not 0.0 <= delay_s <= MAX_DELAY_S:
            raise ValueError(f"delay_s must be within [0, {MAX_DELAY_S}]")
        if mailbox is not None and (not isinstance(mailbox, str) or not mailbox or "/" in mailbox):
            raise ValueError("mailbox must be a userId (an address or 'me')")
        with self._lock:
            remaining = None if mode == NORMAL else count
            state = _ModeState(mode, match, remaining, delay_s)
            if mailbox is None:
                self._state = state
            elif mode == NORMAL:
                self._mailbox_states.pop(mailbox.lower(), None)
            else:
                self._mailbox_states[mailbox.lower()] = state

    def stats(self) -> dict:
        """Counters plus the active mode; ``faulted`` counts requests each fault was applied to."""
        with self._lock:
            out = json.loads(json.dumps(self._stats))
            out.update(
                mode=self._state.mode,
                match=self._state.match,
                remaining=self._state.remaining,
                delay_s=self._state.delay_s,
                mailboxes={
                    box: {"mode": st.mode, "match": st.match, "remaining": st.remaining, "delay_s": st.delay_s}
                    for box, st in self._mailbox_states.items()
                },
            )
            return out

    def reset_stats(self) -> None:
        with self._lock:
            self._reset_stats()

    def _reset_stats(self) -> None:
        self._stats = {
            "connections": 0,
            "requests": 0,
            "forwarded": 0,
            "responded": 0,
            "upstream_errors": 0,
            "faulted": {m: 0 for m in MODES if m != NORMAL},
        }

    def _count(self, key: str) -> None:
        with self._lock:
            self._stats[key] += 1

    def _decide(self, request: _Request) -> tuple[str, float]:
        """Pick the mode for one data-path request and consume one unit of ``count`` atomically."""
        user = _path_user(request)
        with self._lock:
            self._stats["requests"] += 1
            own = self._mailbox_states.get(user) if user is not None else None
            state = own or self._state
            if state.mode == NORMAL or not _matches(state.match, request):
                return NORMAL, state.delay_s
            mode, delay = state.mode, state.delay_s
            self._stats["faulted"][mode] += 1
            if state.remaining is not None:
                state.remaining -= 1
                if state.remaining <= 0:
                    if own is not None and user is not None:
                        del self._mailbox_states[user]
                    else:
                        self._state = _ModeState(NORMAL, state.match, None, state.delay_s)
            return mode, delay

    # -------------------------------------------------------------------- serving
    def _accept_loop(self) -> None:
        listener = self._listener
        while listener is not None and not self._stop.is_set():
            try:
                sock, _addr = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                if self._stop.is_set():
                    break
                time.sleep(ACCEPT_POLL_S)
                continue
            sock.settimeout(IDLE_TIMEOUT_S)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            thread = threading.Thread(target=self._serve_client, args=(sock,), name="fault-relay-conn", daemon=True)
            with self._lock:
                self._clients[thread] = sock
                self._stats["connections"] += 1
            thread.start()

    def _serve_client(self, sock: socket.socket) -> None:
        reader = sock.makefile("rb")
        try:
            for _ in range(MAX_REQUESTS_PER_CONNECTION):
                if self._stop.is_set() or not self._serve_one(sock, reader):
                    break
        except (OSError, ValueError):  # timeouts, resets, sockets closed by stop()
            pass
        finally:
            with contextlib.suppress(OSError):
                reader.close()
            _hard_close(sock)
            with self._lock:
                self._clients.pop(threading.current_thread(), None)

    def _serve_one(self, sock: socket.socket, reader: Any) -> bool:
        """Handle one request; False when the connection must end."""
        try:
            request = _read_request(reader)
        except _BadRequest as err:
            body = google_error_body(err.status, str(err), "badRequest")
            sock.sendall(_serialize(_json_response(err.status, body), close=True))
            return False
        if request is None:
            return False
        close = request.wants_close
        if request.path.startswith("/_relay/"):
            sock.sendall(_serialize(self._control(request), close))
            return not close
        mode, delay_s = self._decide(request)
        if mode == "fail-before-forward":
            return False  # _serve_client closes without a byte written
        if mode == "429-before-forward":
            body = google_error_body(429, "Resource has been exhausted (e.g. check quota).", "rateLimitExceeded")
            sock.sendall(_serialize(_json_response(429, body, "Too Many Requests"), close))
            return not close
        response = self._forward(request)
        if mode == "close-after-forward":
            return False
        if mode == "forward-then-drop-response":
            self._wait_while_client_open(sock, delay_s)
            return False
        if mode == "forward-then-5xx":
            response = _json_response(503, google_error_body(503), "Service Unavailable")
        elif mode == "slow-response":
            if not self._wait_while_client_open(sock, delay_s):
                return False
        elif mode == "trickle-response":
            self._count("responded")
            return self._trickle(sock, _serialize(response, close), delay_s) and not close
        # Counted before the write: a client that has read the answer must find it counted.
        self._count("responded")
        sock.sendall(_serialize(response, close))
        return not close

    def _forward(self, request: _Request) -> _Response:
        """Send the request upstream on a fresh connection and read the whole response."""
        headers = {k: v for k, v in request.headers if k.lower() not in _HOP_BY_HOP}
        conn = http.client.HTTPConnection(self._up_host, self._up_port, timeout=UPSTREAM_TIMEOUT_S)
        try:
            body = request.body if (request.body or request.method not in ("GET", "HEAD")) else None
            target = request.target
            if "://" in target:  # absolute-form (proxy-style) request target
                split = urllib.parse.urlsplit(target)
                target = split.path + (f"?{split.query}" if split.query else "")
            conn.request(request.method, self._up_prefix + target, body=body, headers=headers)
            self._count("forwarded")
            upstream = conn.getresponse()
            data = upstream.read()
            return _Response(upstream.status, upstream.reason, upstream.getheaders(), data)
        except (OSError, http.client.HTTPException) as exc:
            self._count("upstream_errors")
            return _json_response(502, google_error_body(502, f"relay upstream error: {exc!r}", "backendError"))
        finally:
            conn.close()

    def _trickle(self, sock: socket.socket, data: bytes, delay_s: float) -> bool:
        """Write ``data`` one byte every ``delay_s``; False as soon as the client left or stop() was called.

        Bounded: len(data) bytes, and a client that closed makes the next write fail (EPIPE/ECONNRESET).
        """
        for index in range(len(data)):
            if self._stop.wait(delay_s):
                return False
            try:
                sock.sendall(data[index : index + 1])
            except OSError:
                return False
        return True

    def _wait_while_client_open(self, sock: socket.socket, delay_s: float) -> bool:
        """Wait up to delay_s (stop() interrupts); True if the client is still connected afterwards."""
        deadline = time.monotonic() + delay_s
        while not self._stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return True
            try:
                readable, _, _ = select.select([sock], [], [], min(left, ACCEPT_POLL_S))
                if readable and sock.recv(1, socket.MSG_PEEK) == b"":
                    return False  # client closed its side
            except (OSError, ValueError):
                return False
            if readable:  # client sent more data early (pipelining): don't spin on it
                self._stop.wait(min(max(left, 0.0), ACCEPT_POLL_S))
        return False

    def _control(self, request: _Request) -> _Response:
        """``/_relay/mode`` and ``/_relay/stats``; answered by the relay itself."""
        path = request.path
        if request.method == "GET" and path == "/_relay/stats":
            return _json_response(200, self.stats())
        if request.method == "POST" and path == "/_relay/reset-stats":
            self.reset_stats()
            return _json_response(200, {"ok": True})
        if request.method == "POST" and path == "/_relay/mode":
            try:
                payload = json.loads(request.body.decode("utf-8") or "{}")
                if not isinstance(payload, dict):
                    raise ValueError("body must be a JSON object")
                self.set_mode(
                    payload["mode"],
                    payload.get("match", "send"),
                    payload.get("count"),
                    payload.get("delay_s", 30.0),
                    payload.get("mailbox"),
                )
            except (KeyError, TypeError, ValueError, UnicodeDecodeError) as exc:
                return _json_response(400, google_error_body(400, f"bad mode request: {exc}", "invalidArgument"))
            return _json_response(200, {"ok": True, **self.stats()})
        return _json_response(404, google_error_body(404, f"Unknown relay endpoint {request.method} {path}"))


# Gmail's userId, or Microsoft Graph's user id / UPN (devstack.graph_sim).
_USER_PATH = re.compile(r"(?:(?:/upload)?/gmail/v1|/v1\.0)/users/(?P<user>[^/]+)(?:/.*)?")


def _path_user(request: _Request) -> str | None:
    """The lower-case userId a Gmail API request names, None for any other path."""
    match = _USER_PATH.fullmatch(request.path)
    return urllib.parse.unquote(match["user"]).lower() if match else None


def _matches(match: str, request: _Request) -> bool:
    if match == "all":
        return True
    return request.method == "POST" and request.path.endswith(("/messages/send", "/sendMail"))


def main(argv: list[str] | None = None) -> int:
    """CLI: relay until SIGTERM/SIGINT (or --max-lifetime-s, so an orphaned relay can't linger)."""
    parser = argparse.ArgumentParser(prog="python -m devstack.relay", description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", required=True, help="e.g. http://127.0.0.1:8085/")
    parser.add_argument("--host", default=LOOPBACK)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--max-lifetime-s", type=float, default=12 * 3600.0)
    args = parser.parse_args(argv)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    relay = FaultRelay(args.upstream, args.host, args.port).start()
    print(f"fault-relay listening on {relay.url} -> {args.upstream}", flush=True)
    deadline = time.monotonic() + max(0.0, args.max_lifetime_s)
    try:
        while not stop.wait(0.5) and time.monotonic() < deadline:
            pass
    finally:
        relay.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
