"""The HTTP plumbing the mail simulators share: a loopback server thread, keep-alive handlers, bounded
request bodies, JSON replies, injected latency, the simulator's clock and the CLI's serve loop.

Why: the Gmail and Graph simulators differ in routes, answers and error bodies, not in how they serve;
one copy of the serving keeps their start/stop, bounds and timing the same. Each simulator subclasses
LoopbackSimulator (lifecycle, clock, lags) and SimHandler (its routes and error bodies).

Standard library only. Binds 127.0.0.1 only.
"""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar, Self

__all__ = [
    "ACCEPT_POLL_S",
    "IDLE_TIMEOUT_S",
    "JOIN_TIMEOUT_S",
    "LOOPBACK",
    "MAX_BODY_BYTES",
    "MAX_CLOCK_ADVANCE_S",
    "MAX_INDEX_LAG_S",
    "MAX_LATENCY_S",
    "MAX_REQUESTS_PER_CONNECTION",
    "LoopbackSimulator",
    "RequestBodyError",
    "SimHTTPServer",
    "SimHandler",
    "require_loopback",
    "serve_until_signalled",
]

LOOPBACK = "127.0.0.1"
MAX_BODY_BYTES = 36_700_160  # Gmail's documented mediaUpload maxSize.
MAX_REQUESTS_PER_CONNECTION = 1000  # bounds the keep-alive loop of one client connection
IDLE_TIMEOUT_S = 15.0  # socket timeout of an idle keep-alive connection
ACCEPT_POLL_S = 0.2  # how often the accept loop re-checks the stop flag
JOIN_TIMEOUT_S = 5.0
MAX_INDEX_LAG_S = 3600.0
MAX_LATENCY_S = 120.0  # response latency bound (set_latency)
MAX_CLOCK_ADVANCE_S = 400 * 86400.0  # one advance_clock() step
SERVE_POLL_S = 0.5  # how often the CLI's serve loop re-checks its signal and lifetime


def require_loopback(host: str) -> None:
    if host != LOOPBACK:
        raise ValueError(f"refusing to bind {host!r}: dev tools bind {LOOPBACK} only")


class RequestBodyError(Exception):
    """A request body the shared reader refuses; each simulator words it in its own error body."""

    def __init__(self, status: int, message: str, reason: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.reason = reason


class SimHTTPServer(ThreadingHTTPServer):
    """ThreadingHTTPServer that tracks client sockets/threads so stop() can close and join them."""

    daemon_threads = True
    block_on_close = False
    timeout = ACCEPT_POLL_S
    request_queue_size = 128  # the default 5 resets connections under 16 concurrent clients (bench/)

    def __init__(self, address: tuple[str, int], handler: type, sim: LoopbackSimulator) -> None:
        self.sim = sim
        self._clients: dict[threading.Thread, socket.socket] = {}
        self._clients_lock = threading.Lock()
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        thread = threading.Thread(
            target=self._run_client, args=(request, client_address), name=f"{self.sim.name}-conn", daemon=True
        )
        with self._clients_lock:
            self._clients[thread] = request
        thread.start()

    def _run_client(self, request: socket.socket, client_address: Any) -> None:
        try:
            self.process_request_thread(request, client_address)
        finally:
            with self._clients_lock:
                self._clients.pop(threading.current_thread(), None)

    def close_clients(self, timeout: float) -> None:
        with self._clients_lock:
            clients = list(self._clients.items())
        for _thread, sock in clients:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        deadline = time.monotonic() + timeout
        for thread, _sock in clients:
            thread.join(max(0.0, deadline - time.monotonic()))


class SimHandler(BaseHTTPRequestHandler):
    """HTTP/1.1 keep-alive handler; every response carries Content-Length. Subclasses give ``route``
    (status and JSON object, None for no body) and ``error_reply`` (an exception as the API's error)."""

    protocol_version = "HTTP/1.1"
    timeout = IDLE_TIMEOUT_S
    disable_nagle_algorithm = True  # headers and body are separate writes; avoid 40 ms delayed-ACK stalls
    json_content_type = "application/json; charset=UTF-8"
    server: SimHTTPServer
    latency: str | None = None  # "send" or "read": the answer waits that latency; None: it never waits

    def handle(self) -> None:
        self.close_connection = True
        self.handle_one_request()
        for _ in range(MAX_REQUESTS_PER_CONNECTION - 1):
            if self.close_connection or self.server.sim.stopping:
                break
            self.handle_one_request()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        if self.server.sim.verbose:
            sys.stderr.write(f"{self.server.sim.name}: " + (format % args) + "\n")

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    # ------------------------------------------------------------- for subclasses
    def route(self, method: str, body: bytes) -> tuple[int, Any]:
        raise NotImplementedError

    def error_reply(self, exc: Exception) -> tuple[int, Any, dict[str, str]]:
        """(status, JSON body, extra headers) for an exception ``route`` or the body reader raised."""
        raise NotImplementedError

    def latency_kind(self, method: str) -> str | None:
        """Which latency the answer waits; by default what ``route`` set in ``self.latency``."""
        return self.latency

    # --------------------------------------------------------------- plumbing
    def _dispatch(self, method: str) -> None:
        self.latency = None
        headers: dict[str, str] = {}
        try:
            status, obj = self.route(method, self._read_body())
        except Exception as exc:  # noqa: BLE001 - a simulator bug must still answer like a server, not hang the client
            status, obj, headers = self.error_reply(exc)
        kind = self.latency_kind(method)
        if kind is not None:  # API calls only, never /_sim/* controls
            self.server.sim.pause(kind)
        try:
            self._send(status, obj, headers)
        except OSError:
            self.close_connection = True

    def _read_body(self) -> bytes:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            self.close_connection = True
            raise RequestBodyError(411, "Chunked request bodies are not supported by the simulator", "badRequest")
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            self.close_connection = True
            raise RequestBodyError(400, "Invalid Content-Length", "badRequest") from None
        if length < 0 or length > MAX_BODY_BYTES:
            self.close_connection = True
            raise RequestBodyError(413, "Request entity too large", "uploadTooLarge")
        return self.rfile.read(length) if length else b""

    def _send(self, status: int, obj: Any, headers: dict[str, str]) -> None:
        data = b"" if obj is None else json.dumps(obj).encode("utf-8")
        self.send_response(status)
        if obj is not None:
            self.send_header("Content-Type", self.json_content_type)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()


class LoopbackSimulator:
    """A simulator served on loopback in a daemon thread, with its own clock, index lag and latency.

    Subclasses set ``name`` (thread and log prefix) and ``handler`` (their SimHandler)."""

    name: ClassVar[str]
    handler: ClassVar[type[SimHandler]]

    def __init__(self, host: str, port: int, clock: Callable[[], float], verbose: bool) -> None:
        require_loopback(host)
        self.verbose = verbose
        self._host = host
        self._port = port
        self._clock = clock
        self._clock_offset_s = 0.0
        self._lock = threading.RLock()
        self._index_lag_s = 0.0
        self._latency_s = 0.0
        self._read_latency_s: float | None = None
        self._server: SimHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()

    # ----------------------------------------------------------------- lifecycle
    def start(self) -> Self:
        """Bind and serve in a daemon thread."""
        if self._server is not None:
            raise RuntimeError("simulator already started")
        self._stopping.clear()
        self._server = SimHTTPServer((self._host, self._port), self.handler, self)
        self._thread = threading.Thread(target=self._serve, name=f"{self.name}-{self.port}", daemon=True)
        self._thread.start()
        return self

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _serve(self) -> None:
        server = self._server
        while server is not None and not self._stopping.is_set():
            try:
                server.handle_request()  # returns after ACCEPT_POLL_S when idle
            except (OSError, ValueError):  # ValueError: selector on a socket closed by stop()
                if self._stopping.is_set():
                    break
                time.sleep(ACCEPT_POLL_S)

    def stop(self, timeout: float = JOIN_TIMEOUT_S) -> None:
        """Stop accepting, close every client socket and join all threads (bounded by ``timeout``)."""
        server, thread = self._server, self._thread
        if server is None:
            return
        self._stopping.set()
        deadline = time.monotonic() + timeout
        if thread is not None:
            thread.join(max(0.0, deadline - time.monotonic()))
        server.server_close()
        server.close_clients(max(0.0, deadline - time.monotonic()))
        self._server = None
        self._thread = None

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("simulator not started")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """Base URL of the simulator's API."""
        return f"http://{self._host}:{self.port}"

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    # ------------------------------------------------------------------- time
    def now(self) -> float:
        """The simulator's clock: the clock it was given, plus every advance_clock()."""
        with self._lock:
            return float(self._clock()) + self._clock_offset_s

    def advance_clock(self, seconds: float) -> float:
        """Move the simulator's clock forward (lags, windows and limits all read it); returns now()."""
        seconds = float(seconds)
        if not 0.0 <= seconds <= MAX_CLOCK_ADVANCE_S:
            raise ValueError(f"advance_s must be within [0, {MAX_CLOCK_ADVANCE_S}]")
        with self._lock:
            self._clock_offset_s += seconds
            return self.now()

    def set_index_lag(self, seconds: float) -> None:
        """Model the mailbox's search lag: a search only sees messages older than ``seconds``."""
        seconds = float(seconds)
        if not 0.0 <= seconds <= MAX_INDEX_LAG_S:
            raise ValueError(f"index_lag_s must be within [0, {MAX_INDEX_LAG_S}]")
        with self._lock:
            self._index_lag_s = seconds

    def set_latency(self, seconds: float, read_seconds: float | None = None) -> None:
        """Model the API's response time: wait ``seconds`` before answering a send (the message is
        already accepted while the answer is held back, so a client timeout shorter than this sees an
        ambiguous send). Reads wait ``read_seconds``, or ``seconds`` too when it is None. Only API calls
        wait: never the /_sim/* controls (nor Graph's token endpoint)."""
        values = [float(seconds)] + ([] if read_seconds is None else [float(read_seconds)])
        if any(not 0.0 <= value <= MAX_LATENCY_S for value in values):
            raise ValueError(f"latency must be within [0, {MAX_LATENCY_S}] seconds")
        with self._lock:
            self._latency_s = values[0]
            self._read_latency_s = None if read_seconds is None else values[1]

    @property
    def latency(self) -> tuple[float, float]:
        """(send latency, read latency) in seconds."""
        with self._lock:
            read = self._latency_s if self._read_latency_s is None else self._read_latency_s
            return self._latency_s, read

    def pause(self, kind: str) -> None:
        """Hold an answer for the configured latency ("send" or "read"); stop() cuts it short."""
        send, read = self.latency
        delay = send if kind == "send" else read
        if delay > 0:
            self._stopping.wait(delay)


def serve_until_signalled(sim: LoopbackSimulator, max_lifetime_s: float) -> int:
    """CLI: serve until SIGTERM/SIGINT (or ``max_lifetime_s``, so an orphaned dev server can't linger)."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    sim.start()
    print(f"{sim.name} listening on {sim.url}", flush=True)
    deadline = time.monotonic() + max(0.0, max_lifetime_s)
    try:
        while not stop.wait(SERVE_POLL_S) and time.monotonic() < deadline:
            pass
    finally:
        sim.stop()
    return 0
