"""A round-robin TCP front for several local function processes (dev and tests only; loopback only).

Why: Cloud Run runs many instances of a function; the mailbox budget must hold across all of them
(issue 24). The local stack starts two or more functions-framework processes behind this front, so
every caller, the Cloud Tasks emulator and the sweep ticker reach them in turn and no test can pass
on one process's memory alone. Each accepted connection goes whole to the next backend (HTTP
keep-alive stays on one process, as behind Google's front end). Bounded: one listener thread, two
pump threads per connection that end when either side closes, all stopped by stop().
"""

from __future__ import annotations

import contextlib
import itertools
import socket
import threading
from collections.abc import Sequence

_CHUNK = 65536
_CONNECT_TIMEOUT_S = 5.0


class RoundRobinBalancer:
    """Listens on 127.0.0.1:`port` and hands each connection to the next of `backends` (ports)."""

    def __init__(self, port: int, backends: Sequence[int]):
        if not backends:
            raise ValueError("a balancer needs at least one backend")
        self.port = port
        self.backends = list(backends)
        self.connections = dict.fromkeys(self.backends, 0)  # connections handed to each backend
        self._next = itertools.cycle(self.backends)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", port), backlog=256)
        self._listener.settimeout(0.2)
        self._thread = threading.Thread(target=self._serve, name="balancer", daemon=True)
        self._open: set[socket.socket] = set()

    def start(self) -> RoundRobinBalancer:
        self._thread.start()
        return self

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                backend = next(self._next)
                self.connections[backend] += 1
            threading.Thread(target=self._pipe, args=(client, backend), name="balancer-conn", daemon=True).start()

    def _pipe(self, client: socket.socket, backend: int) -> None:
        try:
            upstream = socket.create_connection(("127.0.0.1", backend), timeout=_CONNECT_TIMEOUT_S)
        except OSError:
            client.close()
            return
        upstream.settimeout(None)
        with self._lock:
            self._open.update((client, upstream))
        pump = threading.Thread(target=_pump, args=(upstream, client), name="balancer-pump", daemon=True)
        pump.start()
        _pump(client, upstream)
        pump.join(timeout=600)
        with self._lock:
            self._open.difference_update((client, upstream))
        for sock in (client, upstream):
            sock.close()

    def stop(self) -> None:
        self._stop.set()
        self._listener.close()
        self._thread.join(timeout=5)
        with self._lock:
            still_open = list(self._open)
        for sock in still_open:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


def _pump(source: socket.socket, sink: socket.socket) -> None:
    """Copy until `source` closes, then half-close `sink` so the other direction can finish."""
    try:
        while True:
            data = source.recv(_CHUNK)
            if not data:
                break
            sink.sendall(data)
    except OSError:
        pass
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)
