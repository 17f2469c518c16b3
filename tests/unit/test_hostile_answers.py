"""Hostile or broken answers from the providers (review of session 3): a Retry-After header is read
as ASCII delta-seconds only, for Graph and Gmail alike. Python's str.isdigit() says yes to "²" (a
byte an HTTP header can carry: headers are latin-1), which float() then refuses, and float() says yes
to "nan", "inf" and "-5": each would raise later (timedelta of nan or inf) or wait backwards."""

from __future__ import annotations

import json
import math

import httplib2
import pytest
from googleapiclient.errors import HttpError

from safesend.adapters.gmail_mailer import (
    MAX_HITS_INSPECTED,
    GmailMailer,
    _classify_http_error,
    _Resources,
    _send_answer,
)
from safesend.core.errors import MailboxUnavailableError
from safesend.core.graph_classify import retry_after_seconds
from safesend.core.model import Accepted, Bucket, Failure

HOSTILE = ["²", "³", "¹0", "nan", "NaN", "inf", "-inf", "-5", "1e400", "1e3", "0x10", "5.5", "9" * 400, ""]


@pytest.mark.parametrize("header", HOSTILE)
def test_a_hostile_retry_after_is_ignored_never_raised_on(header: str) -> None:
    assert retry_after_seconds(header) is None


def _gmail_refusal(
    status: int, retry_after: str, reason: str = "rateLimitExceeded", message: str = "slow"
) -> HttpError:
    resp = httplib2.Response({"status": status, "retry-after": retry_after})
    body = {"error": {"code": status, "message": message, "errors": [{"reason": reason, "message": message}]}}
    return HttpError(resp, json.dumps(body).encode())


@pytest.mark.parametrize("header", HOSTILE)
def test_gmail_reads_retry_after_as_graph_does(header: str) -> None:
    failure = _classify_http_error(_gmail_refusal(429, header))
    assert failure.retry_after_s is None


@pytest.mark.parametrize("header", ["nan", "inf", "1e400"])
def test_gmail_daily_limit_wait_stays_a_finite_day_whatever_the_header(header: str) -> None:
    failure = _classify_http_error(_gmail_refusal(429, header, message="User-rate limit exceeded (Mail sending)"))
    assert failure.code == "daily_limit"
    assert failure.retry_after_s is not None and math.isfinite(failure.retry_after_s)
    assert failure.retry_after_s == 24 * 3600.0


def test_plain_delta_seconds_still_count() -> None:
    assert retry_after_seconds(" 30 ") == 30.0
    assert _classify_http_error(_gmail_refusal(429, "30")).retry_after_s == 30.0


def _gmail_error(status: int, body: bytes) -> HttpError:
    return HttpError(httplib2.Response({"status": status}), body)


ODD_ERROR_BODIES = [
    b'{"error": "quota"}',  # an OAuth-style error string, not Google's error object
    b'{"error": {"errors": {"reason": "rateLimitExceeded"}}}',  # errors as an object
    b'{"error": {"errors": ["rateLimitExceeded"]}}',  # errors as strings
    b'{"error": {"errors": [{"reason": ["rateLimitExceeded"]}]}}',  # reason as a list
    b'{"error": {"errors": []}}',
    b'{"error": null}',
    b"[1, 2]",
    b'"text"',
    b"\xff\xfe",
]


@pytest.mark.parametrize("body", ODD_ERROR_BODIES)
@pytest.mark.parametrize("status", [400, 403, 429, 500, 503])
def test_an_error_answer_of_any_shape_is_classified_never_raised_on(status: int, body: bytes) -> None:
    """A proxy's or a broken server's error body must still give a Failure: an exception out of send()
    would turn a definite refusal into a crashed attempt (a 500 to the caller, then "maybe accepted")."""
    failure = _classify_http_error(_gmail_error(status, body))
    assert failure.status == status and failure.code.startswith(f"http_{status}")
    assert failure.bucket.value == ("maybe_accepted" if status >= 500 else "not_accepted")


def test_a_reason_is_a_short_token_or_nothing() -> None:
    """The reason becomes the failure's code, stored in the job and logged: an 8 MB or odd one is dropped."""
    for reason in ["x" * 100_000, "rate limit; drop table", "\n{}"]:
        body = json.dumps({"error": {"errors": [{"reason": reason}], "message": "m"}}).encode()
        assert _classify_http_error(_gmail_error(400, body)).code == "http_400"
    body = json.dumps({"error": {"errors": [{"reason": "failedPrecondition"}], "message": "m"}}).encode()
    assert _classify_http_error(_gmail_error(400, body)).code == "http_400_failedPrecondition"


@pytest.mark.parametrize(
    "response",
    [{"id": 5}, {"id": ["a"]}, {"id": "x" * 100_000}, {"id": ""}, {"threadId": "t"}, ["id"], None, {"id": "a b"}],
)
def test_a_2xx_without_a_plausible_message_id_is_maybe_accepted(response) -> None:
    """Only an id Gmail could have given is recorded as a copy: an int would never match the search's
    string ids (a false duplicate), a huge one would make the job too big to store."""
    outcome = _send_answer(response)
    assert isinstance(outcome, Failure) and outcome.bucket is Bucket.MAYBE_ACCEPTED and outcome.code == "protocol"


def test_a_2xx_with_a_gmail_id_is_accepted_and_an_odd_thread_id_is_dropped() -> None:
    assert _send_answer({"id": "18c2f0a1b2c3d4e5", "threadId": "18c2f0a1b2c3d4e5"}) == Accepted(
        "18c2f0a1b2c3d4e5", "18c2f0a1b2c3d4e5"
    )
    assert _send_answer({"id": "18c2f0a1b2c3d4e5", "threadId": 7}) == Accepted("18c2f0a1b2c3d4e5", None)


@pytest.mark.parametrize(
    "listing",
    [[1], {"messages": {"id": "a"}}, {"messages": [{"id": 5}]}, {"messages": ["a"]}, {"messages": [{"id": "x" * 500}]}],
)
def test_a_malformed_search_answer_is_unavailable_never_an_exception_or_a_guess(listing) -> None:
    """The Mailer port's promise: a search that cannot be read raises MailboxUnavailableError (the check
    is retried), never another exception and never a shorter list that could hide our copy."""
    mailer = GmailMailer()
    mailer._read = lambda make_request, deadline, **kw: listing  # type: ignore[method-assign]
    with pytest.raises(MailboxUnavailableError):
        mailer.find_by_message_id("<job-1@example.com>")


def test_a_well_formed_search_answer_gives_its_hits() -> None:
    answers = iter([{"messages": [{"id": "18c2f0a1", "threadId": "18c2f0a1"}]}, {"labelIds": ["SENT", 3]}])
    mailer = GmailMailer()
    mailer._read = lambda make_request, deadline, **kw: next(answers)  # type: ignore[method-assign]
    mailer._resources = object()  # type: ignore[assignment]  # never called: _read is replaced
    assert [(h.gmail_id, h.label_ids) for h in mailer.find_by_message_id("<job-1@example.com>")] == [
        ("18c2f0a1", ("SENT",))
    ]


class _FakeGmail:
    """messages.list/get over a mailbox of (id, labels), newest first, as Gmail pages a search."""

    def __init__(self, messages: list[tuple[str, list[str]]]):
        self.messages = messages
        self.lists: list[dict] = []

    def list(self, **params):
        self.lists.append(params)
        wanted = params.get("labelIds") or []
        found = [m for m, labels in self.messages if all(w in labels for w in wanted)]
        page = found[: params["maxResults"]]
        answer = {"messages": [{"id": m, "threadId": m} for m in page]}
        if len(found) > len(page):
            answer["nextPageToken"] = "2"
        return _Executes(answer)

    def get(self, userId, id, format):  # noqa: A002, N803 - the API's names
        return _Executes({"id": id, "labelIds": dict(self.messages)[id]})


class _Executes:
    def __init__(self, answer):
        self.answer = answer

    def execute(self, **kwargs):
        return self.answer


def test_messages_mailed_to_the_mailbox_with_our_message_id_cannot_hide_our_sent_copy():
    """Our Message-IDs are predictable: anyone can mail the mailbox messages carrying one. Gmail lists
    the newest first and we read one page of MAX_HITS_INSPECTED: enough planted messages pushed our
    SENT copy off it, the search said "no copy", and after the window the job was sent again."""
    planted = [(f"{n:016x}", ["INBOX", "UNREAD"]) for n in range(1, 13)]
    gmail = _FakeGmail([*planted, ("00000000000000ff", ["SENT"])])
    mailer = GmailMailer()
    mailer._service = object()
    mailer._resources = _Resources(None, gmail, None)
    hits = mailer.find_by_message_id("<job-1@example.com>")
    assert [h.gmail_id for h in hits if h.is_sent] == ["00000000000000ff"]
    assert len([h for h in hits if not h.is_sent]) == MAX_HITS_INSPECTED  # the planted ones stay evidence
    assert all(p["includeSpamTrash"] for p in gmail.lists)


def test_one_page_of_hits_costs_one_list():
    gmail = _FakeGmail([("00000000000000ff", ["SENT"]), ("0000000000000001", ["INBOX"])])
    mailer = GmailMailer()
    mailer._service = object()
    mailer._resources = _Resources(None, gmail, None)
    assert len(mailer.find_by_message_id("<job-1@example.com>")) == 2 and len(gmail.lists) == 1
