"""GmailMailer through the real google-api-python-client, over the fault relay, into the Gmail simulator.

Every assertion about "how many emails went out" reads the simulator's acceptance
log, never our own counters.
"""

from __future__ import annotations

import socket
from datetime import datetime, timezone
from typing import Iterator

import httplib2
import pytest
from googleapiclient.discovery import build

from devstack.gmail_sim import GmailSimulator
from devstack.relay import FaultRelay
from safesend.adapters.gmail_mailer import GmailMailer
from safesend.errors import MailboxUnavailableError
from safesend.keys import job_id_for, message_id_for
from safesend.mime import OutgoingMessage, build_mime, encode_raw
from safesend.model import Accepted, Bucket, Failure

KEY = "cust-7:order_paid:1001"
MESSAGE_ID = message_id_for(KEY, "mail.example.com")
MESSAGE = OutgoingMessage(sender="Shop <shop@example.com>", to=("ann@example.com",), subject="Receipt",
                          text="Thanks!", html="<p>Thanks!</p>")
RAW = build_mime(MESSAGE, MESSAGE_ID, job_id_for(KEY), datetime(2026, 11, 29, tzinfo=timezone.utc))


@pytest.fixture
def mailer(relay) -> GmailMailer:
    return GmailMailer(api_endpoint=relay.url, send_timeout_s=1.5, read_timeout_s=5, sleep=lambda s: None)


def sent_copies(sim: GmailSimulator) -> int:
    return sum(1 for e in sim.effects() if e["message_id"] == MESSAGE_ID)


def test_send_is_accepted_and_gmail_keeps_our_message_id(sim, mailer):
    outcome = mailer.send(RAW)
    assert isinstance(outcome, Accepted)
    assert sent_copies(sim) == 1
    assert mailer.stored_message_id(outcome.gmail_id) == MESSAGE_ID
    hits = mailer.find_by_message_id(MESSAGE_ID)
    assert [h.gmail_id for h in hits] == [outcome.gmail_id] and hits[0].is_sent


def test_close_after_forward_sends_exactly_once(sim, relay, mailer):
    """The trap: stock httplib2 re-sends this POST (see test_fault_relay). Our transport must not."""
    relay.set_mode("close-after-forward", count=1)
    outcome = mailer.send(RAW)
    assert isinstance(outcome, Failure) and outcome.bucket is Bucket.MAYBE_ACCEPTED
    assert outcome.code == "disconnected_after_write"
    assert sent_copies(sim) == 1


def test_stock_httplib2_would_have_duplicated_the_same_send(sim, relay):
    """Control experiment for the test above, same relay mode, stock transport: two emails."""
    relay.set_mode("close-after-forward", count=1)
    service = build("gmail", "v1", http=httplib2.Http(timeout=5), static_discovery=True,
                    client_options={"api_endpoint": relay.url})
    service.users().messages().send(userId="me", body={"raw": encode_raw(RAW)}).execute(num_retries=0)
    assert sent_copies(sim) == 2


@pytest.mark.parametrize("mode, bucket, code, effects", [
    ("fail-before-forward", Bucket.MAYBE_ACCEPTED, "disconnected_after_write", 0),
    ("forward-then-drop-response", Bucket.MAYBE_ACCEPTED, "timeout", 1),
    ("slow-response", Bucket.MAYBE_ACCEPTED, "timeout", 1),
    ("forward-then-5xx", Bucket.MAYBE_ACCEPTED, "http_503_backendError", 1),
    ("429-before-forward", Bucket.NOT_ACCEPTED, "http_429_rateLimitExceeded", 0),
])
def test_each_relay_fault_is_classified_and_never_retried(sim, relay, mailer, mode, bucket, code, effects):
    relay.set_mode(mode, count=1, delay_s=4.0)
    outcome = mailer.send(RAW)
    assert isinstance(outcome, Failure)
    assert (outcome.bucket, outcome.code) == (bucket, code)
    assert sent_copies(sim) == effects
    assert relay.stats()["requests"] == 1  # one attempt is one request


@pytest.mark.parametrize("status, reason, retryable", [
    (400, "invalidArgument", False), (403, "forbidden", False), (403, "userRateLimitExceeded", True),
    (429, "rateLimitExceeded", True), (401, "authError", True),
])
def test_gmail_refusals_are_definitely_not_accepted(sim, mailer, status, reason, retryable):
    sim.inject_errors(status, count=1, reason=reason)
    outcome = mailer.send(RAW)
    assert isinstance(outcome, Failure) and outcome.bucket is Bucket.NOT_ACCEPTED
    assert outcome.status == status and outcome.retryable is retryable
    assert sent_copies(sim) == 0


def test_server_errors_are_maybe_accepted(sim, mailer):
    sim.inject_errors(500, count=1)
    outcome = mailer.send(RAW)
    assert isinstance(outcome, Failure) and outcome.bucket is Bucket.MAYBE_ACCEPTED


def test_connection_refused_is_definitely_not_sent():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing listens there
    outcome = GmailMailer(api_endpoint=f"http://127.0.0.1:{port}/").send(RAW)
    assert isinstance(outcome, Failure)
    assert (outcome.bucket, outcome.code, outcome.retryable) == (Bucket.NOT_ACCEPTED, "connect_refused", True)


def test_dns_failure_is_definitely_not_sent():
    outcome = GmailMailer(api_endpoint="http://safesend-no-such-host.invalid/").send(RAW)
    assert isinstance(outcome, Failure)
    assert (outcome.bucket, outcome.code) == (Bucket.NOT_ACCEPTED, "dns")


def test_search_respects_index_lag_and_counts_duplicates(sim, mailer):
    sim.set_index_lag(60)
    assert isinstance(mailer.send(RAW), Accepted)
    assert mailer.find_by_message_id(MESSAGE_ID) == []  # accepted, not yet searchable
    sim.set_index_lag(0)
    sim.insert_message(RAW)
    hits = mailer.find_by_message_id(MESSAGE_ID)
    assert len(hits) == 2 and all(h.is_sent for h in hits)


def test_search_includes_trash(sim, mailer):
    sim.insert_message(RAW, label_ids=("SENT", "TRASH"))
    hits = mailer.find_by_message_id(MESSAGE_ID)
    assert len(hits) == 1 and "TRASH" in hits[0].label_ids


def test_search_failure_is_reported_not_guessed(relay, mailer):
    relay.set_mode("forward-then-5xx", match="all")
    with pytest.raises(MailboxUnavailableError):
        mailer.find_by_message_id(MESSAGE_ID)
    assert relay.stats()["requests"] == 3  # reads are idempotent: a few bounded tries


def test_read_back_is_a_single_try(sim, relay, mailer):
    """It runs right after an accepted send, inside the lease: no retry loop, no backoff sleeps."""
    gmail_id = sim.insert_message(RAW)
    relay.set_mode("forward-then-5xx", match="all")
    with pytest.raises(MailboxUnavailableError):
        mailer.stored_message_id(gmail_id)
    assert relay.stats()["requests"] == 1
