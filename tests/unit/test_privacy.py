"""Nothing leaks: no bodies, tokens or secrets in logs, masked addresses, no body in review items
unless a channel opts in, and the minimum Gmail scopes."""

from __future__ import annotations

import io
import json
import logging

import pytest

from safesend.adapters import gmail_auth
from safesend.adapters.gmail_mailer import GMAIL_SCOPES
from safesend.core.classify import TransportErrorKind, classify_http, classify_transport
from safesend.logs import CloudLoggingFormatter, mask_emails
from tests.unit.conftest import POLICIES, make_world

BODY_TEXT = "SECRET-BODY-Your card 4111 1111 1111 1111"


def capture_logs() -> tuple[io.StringIO, logging.Handler]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(CloudLoggingFormatter())
    logging.getLogger("safesend").addHandler(handler)
    return stream, handler


@pytest.mark.parametrize(
    "script",
    [
        ["accept"],
        [classify_http(400, "invalidArgument", "Invalid To: ann@example.com")],
        [classify_transport(TransportErrorKind.TIMEOUT)],
    ],
)
def test_logs_of_a_whole_job_hold_no_body_and_no_plain_address(script):
    stream, handler = capture_logs()
    try:
        world = make_world(script=list(script))
        job, _ = world.service.submit(
            world.request(text=BODY_TEXT, html=f"<p>{BODY_TEXT}</p>", to="Ann Lee <ann.lee@example.com>")
        )
        world.run_until_settled(job.id)
    finally:
        logging.getLogger("safesend").removeHandler(handler)
    output = stream.getvalue()
    assert output, "the job should have logged something"
    assert "SECRET-BODY" not in output and "4111" not in output
    assert "ann.lee@example.com" not in output and "ann@example.com" not in output
    for line in output.splitlines():
        entry = json.loads(line)
        assert {"severity", "message", "time"} <= set(entry)


def test_mask_emails_masks_nested_values_and_leaves_the_rest():
    masked = mask_emails({"a": "to ann.lee@example.com now", "b": ["bob@x.org"], "c": 3})
    assert masked == {"a": "to a***@example.com now", "b": ["b***@x.org"], "c": 3}


def test_review_items_carry_the_body_only_when_the_channel_opts_in():
    for opt_in, expected in ((False, False), (True, True)):
        policies = {
            **POLICIES,
            "channels": {**POLICIES["channels"], "payments": {"on_unknown": "review", "review_includes_body": opt_in}},
        }
        world = make_world(script=[classify_transport(TransportErrorKind.TIMEOUT)], policies=policies)
        job, _ = world.service.submit(world.request(channel="payments", text=BODY_TEXT))
        world.run_until_settled(job.id)
        item, _ = world.publisher.items[0]
        assert (BODY_TEXT in json.dumps(item)) is expected


def test_gmail_scopes_are_the_minimum():
    assert GMAIL_SCOPES == (
        "https://www.googleapis.com/auth/gmail.send",
        "https://www.googleapis.com/auth/gmail.readonly",
    )


def test_credentials_are_requested_with_exactly_those_scopes(monkeypatch):
    seen = {}

    class FakeUserCredentials:
        @staticmethod
        def from_authorized_user_info(info, scopes):
            seen["user"] = tuple(scopes)
            return object()

    class FakeServiceAccount:
        @staticmethod
        def from_service_account_info(info, scopes):
            seen["sa"] = tuple(scopes)
            return type("C", (), {"with_subject": lambda self, user: self})()

    monkeypatch.setattr(gmail_auth.user_credentials, "Credentials", FakeUserCredentials)
    monkeypatch.setattr(gmail_auth.service_account, "Credentials", FakeServiceAccount)
    monkeypatch.setattr(
        gmail_auth.google.auth, "default", lambda scopes: (seen.__setitem__("adc", tuple(scopes)) or object(), "p")
    )
    gmail_auth.load_gmail_credentials(json.dumps({"type": "authorized_user"}), None, None)
    gmail_auth.load_gmail_credentials(json.dumps({"type": "service_account"}), None, "boss@example.com")
    gmail_auth.load_gmail_credentials(None, None, None)
    assert seen == {"user": GMAIL_SCOPES, "sa": GMAIL_SCOPES, "adc": GMAIL_SCOPES}
