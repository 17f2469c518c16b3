"""GmailMailer with real google-auth credentials over OneShotHttp, and a TLS failure before the write.

A loopback OAuth token endpoint stands in for Google's: it counts refreshes and can refuse them
(400 invalid_grant, Google's answer for a revoked or expired refresh token), fail them (503), answer
garbage, or trickle its answer one byte at a time.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from google.oauth2.credentials import Credentials

from devstack.gmail_sim import GmailSimulator
from safesend.adapters.gmail_mailer import GMAIL_SCOPES, GmailMailer
from safesend.core.errors import MailboxUnavailableError
from safesend.core.model import Accepted, Bucket, Failure
from tests.integration.test_gmail_mailer import MESSAGE_ID, RAW
from tests.integration.test_transport_deadline import call_bounded
from tests.loopback_http import LoopbackHttpServer, QuietHandler

SECRETS = ("initial-token", "refresh-token-value", "client-secret-value")


class TokenEndpoint:
    def __init__(self) -> None:
        self.refreshes = 0
        self.refuse = False  # 400 invalid_grant: a revoked refresh token
        self.fail_status: int | None = None  # e.g. 503: google-auth would back off and retry
        self.garbage = False  # 200 with a body that is not JSON
        self.trickle_s = 0.0  # > 0: write the answer one byte every trickle_s
        self.stopping = threading.Event()
        outer = self

        class Handler(QuietHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server calls it by this name
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.refreshes += 1
                status, data = outer.answer()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                outer.write(self.wfile, data)

        self.http = LoopbackHttpServer(Handler, "token-endpoint")
        self.url = f"{self.http.url}/token"

    def answer(self) -> tuple[int, bytes]:
        if self.refuse:
            return 400, json.dumps({"error": "invalid_grant", "error_description": "Token revoked"}).encode()
        if self.fail_status:
            return self.fail_status, json.dumps({"error": "backend_error"}).encode()
        if self.garbage:
            return 200, b"<html>not json</html>"
        return 200, json.dumps(
            {"access_token": f"token-{self.refreshes}", "expires_in": 3600, "token_type": "Bearer"}
        ).encode()

    def write(self, wfile: Any, data: bytes) -> None:
        """All at once, or trickled (bounded by len(data) and stop())."""
        if not self.trickle_s:
            wfile.write(data)
            return
        for index in range(len(data)):
            if self.stopping.wait(self.trickle_s):
                return
            try:
                wfile.write(data[index : index + 1])
            except OSError:  # the client gave up
                return

    def stop(self) -> None:
        self.stopping.set()
        self.http.stop()


@pytest.fixture
def token_endpoint() -> Iterator[TokenEndpoint]:
    endpoint = TokenEndpoint()
    yield endpoint
    endpoint.stop()


def credentials(token_endpoint: TokenEndpoint, expired: bool = False) -> Credentials:
    expiry = datetime.now(UTC).replace(tzinfo=None) + timedelta(hours=-1 if expired else 1)
    return Credentials(
        token="initial-token",
        refresh_token="refresh-token-value",
        token_uri=token_endpoint.url,
        client_id="client",
        client_secret="client-secret-value",
        scopes=list(GMAIL_SCOPES),
        expiry=expiry,
    )


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


# ------------------------------------------------- a failed refresh on a read is "mailbox unavailable"
def assert_mailbox_unavailable(call: Any) -> str:
    with pytest.raises(MailboxUnavailableError) as info:
        call()
    message = str(info.value)
    assert not [secret for secret in SECRETS if secret in message]
    return message


def test_a_revoked_refresh_token_makes_reads_unavailable_and_the_send_not_accepted(sim, token_endpoint):
    """RefreshError used to escape _read and abort a whole sweep; the port promises MailboxUnavailableError."""
    token_endpoint.refuse = True
    mailer = GmailMailer(
        api_endpoint=sim.url, credentials=credentials(token_endpoint, expired=True), sleep=lambda s: None
    )
    assert "invalid_grant" in assert_mailbox_unavailable(lambda: mailer.find_by_message_id(MESSAGE_ID))
    assert_mailbox_unavailable(lambda: mailer.stored_message_id("0123456789abcdef"))
    outcome = mailer.send(RAW)
    assert isinstance(outcome, Failure)
    assert (outcome.bucket, outcome.code) == (Bucket.NOT_ACCEPTED, "auth_refresh")
    assert sim.effects() == []


def test_an_unexpected_refresh_failure_on_a_read_is_mailbox_unavailable(sim, token_endpoint):
    """A 200 that is not JSON makes google-auth raise a bare TypeError: still a failed read, not a crash."""
    token_endpoint.garbage = True
    mailer = GmailMailer(
        api_endpoint=sim.url, credentials=credentials(token_endpoint, expired=True), sleep=lambda s: None
    )
    assert_mailbox_unavailable(lambda: mailer.find_by_message_id(MESSAGE_ID))
    assert_mailbox_unavailable(lambda: mailer.stored_message_id("0123456789abcdef"))
    assert sim.effects() == []


# ------------------------------------------------------- the refresh is inside the send's deadline
def test_a_trickling_token_endpoint_is_cut_at_the_send_deadline_and_nothing_is_sent(sim, token_endpoint):
    token_endpoint.trickle_s = 0.3  # every read succeeds inside a 0.5 s socket timeout
    mailer = GmailMailer(
        api_endpoint=sim.url, credentials=credentials(token_endpoint, expired=True), send_timeout_s=0.5
    )
    outcome, elapsed = call_bounded(lambda: mailer.send(RAW), limit_s=3.0)
    assert elapsed < 1.5
    assert isinstance(outcome, Failure)
    assert (outcome.bucket, outcome.code, outcome.retryable) == (Bucket.NOT_ACCEPTED, "auth_refresh", True)
    assert elapsed < mailer.send_deadline_s
    assert sim.effects() == []


def test_a_refresh_after_a_401_is_inside_the_same_deadline(sim, token_endpoint):
    sim.inject_errors(401, count=1)
    token_endpoint.trickle_s = 0.3
    mailer = GmailMailer(api_endpoint=sim.url, credentials=credentials(token_endpoint), send_timeout_s=0.5)
    outcome, elapsed = call_bounded(lambda: mailer.send(RAW), limit_s=3.0)
    assert elapsed < 1.5
    assert isinstance(outcome, Failure)
    # Gmail said 401: nothing taken. The refresh fails inside the same 0.5 s deadline, as a trickled
    # token answer ("auth_refresh") or, when a loaded machine spends the deadline before the token
    # endpoint's connection is up, as "connect_failed" (fresh-clone gate, 2026-12-01): both not accepted.
    assert outcome.bucket is Bucket.NOT_ACCEPTED and outcome.code in ("auth_refresh", "connect_failed"), outcome
    assert elapsed < mailer.send_deadline_s
    assert sim.effects() == []


def test_a_failing_token_endpoint_gets_one_try_per_attempt_not_google_auth_backoff_sleeps(sim, token_endpoint):
    """google-auth sleeps ~1 s then ~2 s between token retries on a 5xx: outside any socket timeout."""
    token_endpoint.fail_status = 503
    mailer = GmailMailer(
        api_endpoint=sim.url, credentials=credentials(token_endpoint, expired=True), send_timeout_s=0.5
    )
    started = time.monotonic()
    outcome = mailer.send(RAW)
    elapsed = time.monotonic() - started
    assert isinstance(outcome, Failure)
    assert (outcome.bucket, outcome.code, outcome.retryable) == (Bucket.NOT_ACCEPTED, "auth_refresh", True)
    assert token_endpoint.refreshes == 1 and elapsed < 0.75
    assert sim.effects() == []
