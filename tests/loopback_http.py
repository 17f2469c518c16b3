"""A throwaway HTTP server on 127.0.0.1 for tests that play the other side of a protocol (a token
endpoint, a metadata server, a webhook, Firestore's answers): started in a daemon thread on a free
port, stopped and joined by stop() (or the with-block), never bound beyond loopback."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any


class QuietHandler(BaseHTTPRequestHandler):
    """A handler that keeps http.server's access log off stderr: tests assert on what they record."""

    def log_message(self, *args: Any) -> None:
        """Silenced."""


class LoopbackHttpServer:
    """`handler` served on 127.0.0.1:<free port> until stop(); `host` is "127.0.0.1:port", `url` its http URL."""

    def __init__(self, handler: type[BaseHTTPRequestHandler], name: str = "loopback-http", backlog: int = 5):
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler, bind_and_activate=False)
        self.server.request_queue_size = backlog  # listen() backlog: 5 drops connects of a burst (1 s SYN retry)
        try:
            self.server.server_bind()
            self.server.server_activate()
        except BaseException:
            self.server.server_close()
            raise
        self.server.daemon_threads = True  # a kept-alive client connection must not hold up stop()
        self.port = int(self.server.server_address[1])
        self.host = f"127.0.0.1:{self.port}"
        self.url = f"http://{self.host}"
        self._thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, name=name, daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> LoopbackHttpServer:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
