"""An httplib2-compatible transport that sends each request exactly once, on a fresh connection.

Why not httplib2.Http: its `_conn_request` re-sends a request when the server
closes a kept-alive connection (BadStatusLine/RemoteDisconnected) "regardless of
the number of RETRIES set", and on some send-side HTTPExceptions. For a POST
to messages.send that is a second email. Here:
- one new connection per request (`Connection: close`), so no stale socket is ever reused;
- no retry, no redirect following;
- the connect phase (DNS, TCP, TLS) is separated from the write/read phase, so a
  failure can be told apart: before the request was written means not sent.
"""

from __future__ import annotations

import functools
import gzip
import http.client
import socket
import ssl
import zlib
from typing import Any
from urllib.parse import urlsplit

import httplib2

from ..classify import TransportFault


class TransportError(Exception):
    """A transport failure with the phase it happened in; `fault` feeds classify_transport."""

    def __init__(self, fault: TransportFault, detail: str):
        super().__init__(f"{fault.value}: {detail}")
        self.fault = fault


class OneShotHttp:
    """Implements the slice of httplib2.Http that googleapiclient and google-auth-httplib2 use."""

    def __init__(self, timeout: float = 20.0, ssl_context: ssl.SSLContext | None = None):
        self.timeout = timeout
        self._ssl_context = ssl_context
        # Attributes google_auth_httplib2.AuthorizedHttp proxies; unused here.
        self.connections: dict[str, Any] = {}
        self.follow_redirects = False
        self.redirect_codes: frozenset[int] = frozenset()

    def request(self, uri: str, method: str = "GET", body: Any = None, headers: dict | None = None,
                redirections: int = 0, connection_type: Any = None, **_: Any
                ) -> tuple[httplib2.Response, bytes]:
        parts = urlsplit(uri)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise TransportError(TransportFault.CONNECT_FAILED, f"unsupported URL {uri!r}")
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        send_headers = {k: v for k, v in (headers or {}).items() if k.lower() != "accept-encoding"}
        send_headers["accept-encoding"] = "gzip"
        send_headers["connection"] = "close"
        payload = _body_bytes(body)

        conn = self._connection(parts.scheme, parts.hostname, parts.port)
        try:
            self._connect(conn)
            return self._exchange(conn, method, path, payload, send_headers)
        finally:
            conn.close()

    def close(self) -> None:
        """Nothing pooled, nothing to close: present because httplib2.Http has it."""

    def _connection(self, scheme: str, host: str, port: int | None) -> http.client.HTTPConnection:
        if scheme == "https":
            context = self._ssl_context or shared_ssl_context()
            return http.client.HTTPSConnection(host, port, timeout=self.timeout, context=context)
        return http.client.HTTPConnection(host, port, timeout=self.timeout)

    @staticmethod
    def _connect(conn: http.client.HTTPConnection) -> None:
        """Phase 1: nothing of the request has been written yet, whatever fails here."""
        try:
            conn.connect()
        except socket.gaierror as exc:
            raise TransportError(TransportFault.DNS, str(exc)) from exc
        except ConnectionRefusedError as exc:
            raise TransportError(TransportFault.CONNECT_REFUSED, str(exc)) from exc
        except ssl.SSLError as exc:
            raise TransportError(TransportFault.TLS_HANDSHAKE, str(exc)) from exc
        except (socket.timeout, TimeoutError) as exc:
            raise TransportError(TransportFault.TIMEOUT, f"connect: {exc}") from exc
        except OSError as exc:
            raise TransportError(TransportFault.CONNECT_FAILED, str(exc)) from exc

    @staticmethod
    def _exchange(conn: http.client.HTTPConnection, method: str, path: str, payload: bytes | None,
                  headers: dict[str, str]) -> tuple[httplib2.Response, bytes]:
        """Phase 2: from the first byte written on, a failure means the request may have been processed."""
        try:
            conn.request(method, path, body=payload, headers=headers)
            raw = conn.getresponse()
            content = raw.read()
        except (socket.timeout, TimeoutError) as exc:
            raise TransportError(TransportFault.TIMEOUT, f"{method} {path.split('?')[0]}: {exc}") from exc
        except (ConnectionError, http.client.RemoteDisconnected, BrokenPipeError) as exc:
            raise TransportError(TransportFault.DISCONNECTED_AFTER_WRITE, repr(exc)) from exc
        except (http.client.HTTPException, ssl.SSLError) as exc:
            raise TransportError(TransportFault.PROTOCOL, repr(exc)) from exc
        except OSError as exc:
            raise TransportError(TransportFault.DISCONNECTED_AFTER_WRITE, repr(exc)) from exc
        info = {k.lower(): v for k, v in raw.getheaders()}
        content = _decode(content, info.pop("content-encoding", ""))
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
        return body.read()
    raise TypeError(f"unsupported request body type {type(body).__name__}")


def _decode(content: bytes, encoding: str) -> bytes:
    encoding = encoding.strip().lower()
    try:
        if encoding == "gzip":
            return gzip.decompress(content)
        if encoding == "deflate":
            return zlib.decompress(content)
    except (OSError, zlib.error) as exc:
        raise TransportError(TransportFault.PROTOCOL, f"bad {encoding} body: {exc}") from exc
    return content
