"""One JSON request on a fresh loopback connection: how tests drive the simulators' ``/_sim/*`` and the
fault relay's ``/_relay/*`` controls without a client library in between."""

from __future__ import annotations

import http.client
import json

TIMEOUT_S = 5.0


def json_call(base_url: str, method: str, path: str, payload: dict | None = None) -> tuple[int, dict]:
    """(status, decoded JSON body, {} when empty) of ``method path`` on 127.0.0.1 at ``base_url``'s port."""
    port = int(base_url.rstrip("/").rsplit(":", 1)[1])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT_S)
    try:
        body = json.dumps(payload).encode() if payload is not None else None
        conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"{}")
    finally:
        conn.close()
