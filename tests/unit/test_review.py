"""review: the item a human gets has what they need to settle the job, and never the message body."""

from __future__ import annotations

import hashlib
import json
import re
from datetime import UTC, datetime, timedelta
from urllib.parse import unquote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from safesend.core import lifecycle
from safesend.core.classify import TransportErrorKind, classify_http, classify_transport
from safesend.core.keys import job_id_for, message_id_for
from safesend.core.lifecycle import Timing
from safesend.core.model import MailboxHit
from safesend.core.policy import ChannelPolicy, OnUnknown
from safesend.core.review import gmail_search_link, review_attributes, review_item
from safesend.core.states import State
from safesend.core.validation import parse_send_request
from tests.props import examples

PROPS = settings(max_examples=examples(200), deadline=None)
T0 = datetime(2024, 5, 6, 12, 0, tzinfo=UTC)
TIMING = Timing(lease_s=120, index_lag_s=90, unknown_window_s=300, recheck_s=60, publish_lease_s=60)
DOMAIN = "mail.example.com"
KEY = "cust-9:payout_sent:1001"
TEXT = "SECRET-TEXT-BODY: your IBAN is DE89 3704 0044 0532 0130 00"
HTML = "<p>SECRET-HTML-BODY: payout of 1.234,00 EUR</p>"
REVIEW_POLICY = ChannelPolicy(name="payments", on_unknown=OnUnknown.REVIEW)
RETRY_POLICY = ChannelPolicy(name="receipts", on_unknown=OnUnknown.RETRY, max_attempts=1)
REQUIRED_FIELDS = {
    "job_id",
    "dedup_key",
    "message_id",
    "channel",
    "recipients",
    "subject",
    "attempts",
    "history",
    "mailbox_hits",
    "reason",
    "gmail_search_url",
}


def new_job(text=TEXT, html=HTML, channel="payments", key=KEY):
    parsed = parse_send_request(
        {
            "dedup_key": key,
            "channel": channel,
            "to": ["Ann <ann@example.com>", "bob@example.com"],
            "cc": "carol@example.com",
            "bcc": "audit@example.com",
            "subject": "Payout 1001",
            "text": text,
            "html": html,
        },
        "Payments <pay@example.com>",
    )
    return lifecycle.new_job(
        job_id_for(parsed.dedup_key),
        parsed.dedup_key,
        message_id_for(parsed.dedup_key, DOMAIN),
        parsed.channel,
        parsed.payload,
        parsed.payload_hash,
        T0,
    )


def unknown_job(policy=REVIEW_POLICY, **kwargs):
    """Claimed, sent, and the answer lost: a read timeout."""
    job = lifecycle.start_attempt(new_job(channel=policy.name, **kwargs), T0, "owner-1", TIMING)
    timeout = classify_transport(TransportErrorKind.TIMEOUT, "read timed out")
    job = lifecycle.record_outcome(job, timeout, "owner-1", T0 + timedelta(seconds=20), policy, TIMING, lambda a, b: b)
    assert job.state is State.UNKNOWN
    return job


def after_window() -> datetime:
    return T0 + timedelta(seconds=TIMING.unknown_window_s + 1)


def ambiguous_review_job(**kwargs):
    job = lifecycle.apply_mailbox_check(unknown_job(**kwargs), [], after_window(), "owner-2", REVIEW_POLICY, TIMING)
    assert (job.state, job.review_reason) == (State.REVIEW, "ambiguous")
    return job


HITS = [MailboxHit("g-1", "t-1", ("SENT",)), MailboxHit("g-2", "t-2", ("SENT", "INBOX"))]


def duplicate_review_job():
    job = lifecycle.apply_mailbox_check(
        unknown_job(), HITS, T0 + timedelta(seconds=120), "owner-2", REVIEW_POLICY, TIMING
    )
    assert (job.state, job.review_reason) == (State.REVIEW, "duplicate")
    return job


def failed_job():
    job = lifecycle.start_attempt(new_job(), T0, "owner-1", TIMING)
    job = lifecycle.record_outcome(
        job,
        classify_http(400, "invalidArgument", "bad To header"),
        "owner-1",
        T0 + timedelta(seconds=1),
        REVIEW_POLICY,
        TIMING,
        lambda a, b: b,
    )
    assert (job.state, job.review_reason) == (State.FAILED, "permanent_error")
    return job


def max_attempts_review_job():
    job = lifecycle.apply_mailbox_check(unknown_job(RETRY_POLICY), [], after_window(), "owner-2", RETRY_POLICY, TIMING)
    assert (job.state, job.review_reason) == (State.REVIEW, "max_attempts")
    return job


JOB_BUILDERS = {
    "ambiguous": ambiguous_review_job,
    "duplicate": duplicate_review_job,
    "permanent_error": failed_job,
    "max_attempts": max_attempts_review_job,
}


def all_strings(value):
    """Every string anywhere in a JSON-like value, keys included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from all_strings(k)
            yield from all_strings(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from all_strings(v)


# --------------------------------------------------------------- what the human needs


@pytest.mark.parametrize("reason", sorted(JOB_BUILDERS))
def test_review_item_has_every_field_a_human_needs(reason):
    job = JOB_BUILDERS[reason]()
    item = review_item(job)
    assert set(item) >= REQUIRED_FIELDS
    expected_job_id = hashlib.sha256(KEY.encode()).hexdigest()[:32]
    assert item["job_id"] == expected_job_id
    assert item["dedup_key"] == KEY
    assert item["message_id"] == f"<job-{expected_job_id}@{DOMAIN}>"
    assert item["reason"] == reason
    assert item["state"] == job.state.value
    assert item["recipients"] == {
        "to": ["Ann <ann@example.com>", "bob@example.com"],
        "cc": ["carol@example.com"],
        "bcc": ["audit@example.com"],
    }
    assert item["subject"] == "Payout 1001"
    assert item["from"] == "Payments <pay@example.com>"
    assert item["attempts"] == 1
    assert item["gmail_search_url"] == (
        f"https://mail.google.com/mail/u/0/#search/rfc822msgid%3Ajob-{expected_job_id}%40mail.example.com"
    )


def test_ambiguous_item_history_tells_the_story_of_the_attempt():
    item = review_item(ambiguous_review_job())
    kinds = [e["kind"] for e in item["history"]]
    assert kinds == ["attempt_started", "outcome_unknown", "mailbox_checked", "entered_review"]
    assert item["history"][1]["error"]["code"] == "timeout"
    assert item["last_error"]["code"] == "timeout"
    assert item["mailbox_hits"] == []
    assert item["channel"] == "payments"
    for event in item["history"]:
        assert datetime.fromisoformat(event["at"]).tzinfo is not None  # JSON-ready ISO timestamps


def test_history_leaves_out_bookkeeping_events():
    job = ambiguous_review_job()
    assert "created" in [e["kind"] for e in job.events]
    assert "created" not in [e["kind"] for e in review_item(job)["history"]]


def test_duplicate_item_lists_the_mailbox_copies():
    item = review_item(duplicate_review_job())
    assert item["mailbox_hits"] == [
        {"gmail_id": "g-1", "thread_id": "t-1", "label_ids": ["SENT"]},
        {"gmail_id": "g-2", "thread_id": "t-2", "label_ids": ["SENT", "INBOX"]},
    ]
    checked = [e for e in item["history"] if e["kind"] == "mailbox_checked"]
    assert checked and checked[-1]["sent_hits"] == 2


def test_failed_item_carries_the_permanent_error():
    item = review_item(failed_job())
    assert item["state"] == "failed"
    assert (item["last_error"]["code"], item["last_error"]["status"]) == ("http_400_invalidArgument", 400)
    assert [e["kind"] for e in item["history"]] == ["attempt_started", "entered_failed"]


def test_review_id_is_stable_for_one_entry_into_review():
    job = ambiguous_review_job()
    assert review_item(job)["review_id"] == review_item(job.copy())["review_id"] == f"{job.id}:1"


# --------------------------------------------------------------- never the body


@pytest.mark.parametrize("reason", sorted(JOB_BUILDERS))
def test_review_item_never_contains_the_body(reason):
    item = review_item(JOB_BUILDERS[reason]())
    dumped = json.dumps(item)  # JSON-ready without a default= hook
    dumped_unicode = json.dumps(item, ensure_ascii=False)
    for body in (TEXT, HTML, "SECRET-TEXT-BODY", "SECRET-HTML-BODY"):
        assert body not in dumped and body not in dumped_unicode
        assert not any(body in s for s in all_strings(item))
    assert "text" not in item and "html" not in item


secret_bodies = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=1, max_size=200
)


@PROPS
@given(text=secret_bodies, html=st.none() | secret_bodies)
def test_review_item_never_contains_any_body(text, html):
    text, html = "«body»" + text, None if html is None else "«html»" + html
    job = lifecycle.apply_mailbox_check(
        unknown_job(text=text, html=html), [], after_window(), "o", REVIEW_POLICY, TIMING
    )
    item = review_item(job)
    attributes = review_attributes(job)
    for secret in filter(None, (text, html)):
        assert secret not in json.dumps(item, ensure_ascii=False)
        assert not any(secret in s for s in all_strings(item))
        assert not any(secret in s for s in all_strings(attributes))


# --------------------------------------------------------------- attributes and link


@pytest.mark.parametrize("reason", sorted(JOB_BUILDERS))
def test_review_attributes_have_job_id_and_reason_as_strings(reason):
    job = JOB_BUILDERS[reason]()
    attributes = review_attributes(job)
    assert attributes["job_id"] == job.id
    assert attributes["reason"] == reason
    assert attributes["channel"] == job.channel
    assert attributes["review_id"] == review_item(job)["review_id"]
    assert all(isinstance(v, str) for v in attributes.values())  # Pub/Sub attributes are strings


def test_gmail_search_link_for_a_known_id():
    assert (
        gmail_search_link("<job-0123abcd@mail.example.com>")
        == "https://mail.google.com/mail/u/0/#search/rfc822msgid%3Ajob-0123abcd%40mail.example.com"
    )


@PROPS
@given(key=st.text(max_size=100))
def test_gmail_search_link_url_encodes_the_bare_message_id(key):
    message_id = message_id_for(key, DOMAIN)
    link = gmail_search_link(message_id)
    prefix = "https://mail.google.com/mail/u/0/#search/"
    assert link.startswith(prefix)
    query = link[len(prefix) :]
    assert re.fullmatch(r"[A-Za-z0-9%._~-]+", query)  # nothing left unencoded: no < > @ : / #
    assert unquote(query) == "rfc822msgid:" + message_id[1:-1]
