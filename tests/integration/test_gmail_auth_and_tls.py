"""GmailMailer with real google-auth credentials over OneShotHttp, and a TLS failure before the write.

A loopback OAuth token endpoint stands in for Google's: it counts refreshes and can refuse them.
"""

from __future__ import annotations

import json
import threading
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator

import pytest
from google.oauth2.credentials import Credentials

from devstack.gmail_sim import GmailSimulator
from safesend.adapters.gmail_mailer import GMAIL_SCOPES, GmailMailer
from safesend.model import Accepted, Bucket, Failure
from tests.integration.test_gmail_mailer import MESSAGE_ID, RAW


class TokenEndpoint:
    def __init__(self) -> None:
        self.refreshes = 0
        self.refuse = False
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server API
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.refreshes += 1
                if outer.refuse:
                    body, status = {"error": "invalid_grant", "error_description": "Token revoked"}, 400
                else:
                    body, status = {"access_token": f"token-{outer.refreshes}", "expires_in": 3600,
                                    "token_type": "Bearer"}, 200
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/token"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def sim() -> Iterator[GmailSimulator]:
    simulator = GmailSimulator().start()
    yield simulator
    simulator.stop()


@pytest.fixture
def token_endpoint() -> Iterator[TokenEndpoint]:
    endpoint = TokenEndpoint()
    yield endpoint
    endpoint.stop()


def credentials(token_endpoint: TokenEndpoint, expired: bool = False) -> Credentials:
    expiry = datetime.now(timezone.utc).replace(tzinfo=None) + timedelta(hours=-1 if expired else 1)
    return Credentials(token="initial-token", refresh_token="refresh", token_uri=token_endpoint.url,
                       client_id="client", client_secret="secret", scopes=list(GMAIL_SCOPES), expiry=expiry)


def copies(sim: GmailSimulator) -> int:
    return sum(1 for e in sim.effects() if e["message_id"] == MESSAGE_ID)


def test_send_with_valid_credentials_needs_no_refresh(sim, token_endpoint):
    mailer = GmailMailer(api_endpoint=sim.url, credentials=credentials(token_endpoint))
    assert isinstance(mailer.send(RAW), Accepted)
    assert token_endpoint.refreshes == 0 and copies(sim) == 1


def test_a_401_is_refreshed_and_resent_once_which_is_safe_because_nothing_was_accepted(sim, token_endpoint):
    sim.inject_errors(401, count=1)
    mailer = GmailMailer(api_endpoint=sim.url, credentials=credentials(token_endpoint))
    assert isinstance(mailer.send(RAW), Accepted)
    assert token_endpoint.refreshes == 1 and copies(sim) == 1


def test_an_expired_token_is_refreshed_before_the_send(sim, token_endpoint):
    creds = credentials(token_endpoint, expired=True)
    mailer = GmailMailer(api_endpoint=sim.url, credentials=creds)
    assert isinstance(mailer.send(RAW), Accepted)
    assert token_endpoint.refreshes == 1 and creds.token == "token-1" and copies(sim) == 1


def test_a_refused_refresh_is_definitely_not_sent(sim, token_endpoint):
    token_endpoint.refuse = True
    mailer = GmailMailer(api_endpoint=sim.url, credentials=credentials(token_endpoint, expired=True))
    outcome = mailer.send(RAW)
    assert isinstance(outcome, Failure)
    assert (outcome.bucket, outcome.code) == (Bucket.NOT_ACCEPTED, "auth_refresh")
    assert copies(sim) == 0 and sim.effects() == []


def test_tls_handshake_failure_is_definitely_not_sent(sim):
    """https:// to a plain-HTTP server: the handshake fails before any request byte is written."""
    mailer = GmailMailer(api_endpoint=sim.url.replace("http://", "https://"))
    outcome = mailer.send(RAW)
    assert isinstance(outcome, Failure)
    assert (outcome.bucket, outcome.code, outcome.retryable) == (Bucket.NOT_ACCEPTED, "tls_handshake", True)
    assert copies(sim) == 0


def test_a_401_whose_refresh_is_refused_is_definitely_not_sent(sim, token_endpoint):
    token_endpoint.refuse = True
    sim.inject_errors(401, count=5)
    mailer = GmailMailer(api_endpoint=sim.url, credentials=credentials(token_endpoint))
    outcome = mailer.send(RAW)
    assert isinstance(outcome, Failure)
    assert (outcome.bucket, outcome.code, outcome.retryable) == (Bucket.NOT_ACCEPTED, "auth_refresh", True)
    assert token_endpoint.refreshes == 1 and copies(sim) == 0
