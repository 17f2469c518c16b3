"""GmailMailer through the real google-api-python-client, over the fault relay, into the Gmail simulator.

Every assertion about "how many emails went out" reads the simulator's acceptance
log, never our own counters.
"""

from __future__ import annotations

import socket
import time
from datetime import UTC, datetime

import httplib2
import pytest
from googleapiclient.discovery import build

from devstack.gmail_sim import GmailSimulator
from safesend.adapters import gmail_mailer
from safesend.adapters.gmail_mailer import MAX_HITS_INSPECTED, GmailMailer
from safesend.core.classify import DAILY_LIMIT_CODE, RefusalKind, refusal_kind
from safesend.core.errors import HistoryExpiredError, MailboxUnavailableError
from safesend.core.keys import job_id_for, message_id_for
from safesend.core.mime import OutgoingMessage, build_mime, encode_raw
from safesend.core.model import Accepted, Bucket, Failure

KEY = "cust-7:order_paid:1001"
MESSAGE_ID = message_id_for(KEY, "mail.example.com")
MESSAGE = OutgoingMessage(
    sender="Shop <shop@example.com>", to=("ann@example.com",), subject="Receipt", text="Thanks!", html="<p>Thanks!</p>"
)
RAW = build_mime(MESSAGE, MESSAGE_ID, job_id_for(KEY), datetime(2026, 11, 29, tzinfo=UTC))


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


def test_sends_and_reads_build_the_api_resources_once(sim, mailer, monkeypatch):
    """users().messages() built a new Resource and every method of it from the discovery document
    on each call (2.3 ms CPU a send): now once per mailer, shared by sends, reads and threads."""
    from googleapiclient import discovery

    built: list[object] = []
    original = discovery.Resource._set_service_methods  # counting what the client builds

    def counting(resource, *args, **kwargs):
        built.append(resource)
        return original(resource, *args, **kwargs)

    monkeypatch.setattr(discovery.Resource, "_set_service_methods", counting)
    first = mailer.send(RAW)
    after_first = len(built)  # the service, users, messages, history (and their nested resources)
    assert isinstance(first, Accepted) and after_first >= 4
    for n in range(3):
        assert isinstance(mailer.send(other_raw(n)), Accepted)
    assert mailer.stored_message_id(first.gmail_id) == MESSAGE_ID
    assert [h.gmail_id for h in mailer.find_by_message_id(MESSAGE_ID)] == [first.gmail_id]
    mailer.current_history_id()
    assert len(built) == after_first


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
    service = build(
        "gmail", "v1", http=httplib2.Http(timeout=5), static_discovery=True, client_options={"api_endpoint": relay.url}
    )
    service.users().messages().send(userId="me", body={"raw": encode_raw(RAW)}).execute(num_retries=0)
    assert sent_copies(sim) == 2


@pytest.mark.parametrize(
    "mode, bucket, code, effects",
    [
        ("fail-before-forward", Bucket.MAYBE_ACCEPTED, "disconnected_after_write", 0),
        ("forward-then-drop-response", Bucket.MAYBE_ACCEPTED, "timeout", 1),
        ("slow-response", Bucket.MAYBE_ACCEPTED, "timeout", 1),
        ("forward-then-5xx", Bucket.MAYBE_ACCEPTED, "http_503_backendError", 1),
        ("429-before-forward", Bucket.NOT_ACCEPTED, "http_429_rateLimitExceeded", 0),
    ],
)
def test_each_relay_fault_is_classified_and_never_retried(sim, relay, mailer, mode, bucket, code, effects):
    relay.set_mode(mode, count=1, delay_s=4.0)
    outcome = mailer.send(RAW)
    assert isinstance(outcome, Failure)
    assert (outcome.bucket, outcome.code) == (bucket, code)
    assert sent_copies(sim) == effects
    assert relay.stats()["requests"] == 1  # one attempt is one request


@pytest.mark.parametrize(
    "status, reason, retryable",
    [
        (400, "invalidArgument", False),
        (403, "forbidden", False),
        (403, "userRateLimitExceeded", True),
        (429, "rateLimitExceeded", True),
        (401, "authError", True),
    ],
)
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


def test_planted_messages_cannot_push_our_sent_copy_off_the_search(sim, mailer):
    """More messages mailed in with our Message-ID than one page holds (newest first): the SENT copies
    are listed on their own, in spam and trash too, and every copy is still found."""
    sim.insert_message(RAW, label_ids=("SENT", "TRASH"))
    sim.insert_message(RAW)
    for _ in range(MAX_HITS_INSPECTED + 2):
        sim.insert_message(RAW, label_ids=("INBOX", "UNREAD"))
    hits = mailer.find_by_message_id(MESSAGE_ID)
    assert len([h for h in hits if h.is_sent]) == 2
    assert len([h for h in hits if not h.is_sent]) == MAX_HITS_INSPECTED


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


# ----------------------------------------------------------------------------- the change log
def other_raw(n: int) -> bytes:
    key = f"cust-7:order_paid:{2000 + n}"
    return build_mime(
        MESSAGE, message_id_for(key, "mail.example.com"), job_id_for(key), datetime(2026, 11, 29, tzinfo=UTC)
    )


def test_current_history_id_is_the_profiles(sim, relay, mailer):
    assert mailer.current_history_id() == str(sim.current_history_id)
    sim.insert_message(RAW)
    assert mailer.current_history_id() == str(sim.current_history_id)
    assert relay.stats()["requests"] == 2  # one getProfile each (1 quota unit)


def test_a_dropped_response_is_settled_from_the_history_before_search_can(sim, relay, mailer):
    """The point of the change log: seconds, not the search index's minute-plus."""
    sim.set_index_lag(60)
    checkpoint = mailer.current_history_id()  # taken before the attempt
    relay.set_mode("forward-then-drop-response", count=1, delay_s=4.0)
    outcome = mailer.send(RAW)
    assert isinstance(outcome, Failure) and outcome.bucket is Bucket.MAYBE_ACCEPTED
    assert mailer.find_by_message_id(MESSAGE_ID) == []  # search is blind for another minute
    page = mailer.added_since(checkpoint)
    assert page.complete and len(page.messages) == 1 and page.messages[0].is_sent
    assert page.history_id == str(sim.current_history_id)
    assert mailer.message_ids_of(page.gmail_ids()) == {page.messages[0].gmail_id: MESSAGE_ID}
    assert sent_copies(sim) == 1


def test_added_since_lists_only_sent_messages_added_after_the_start(sim, mailer):
    before = sim.insert_message(other_raw(0))
    checkpoint = mailer.current_history_id()
    assert mailer.added_since(checkpoint).messages == ()
    inbox = sim.insert_message(other_raw(1), label_ids=("INBOX",))
    sent = [sim.insert_message(other_raw(n)) for n in range(2, 5)]
    sim.modify_labels(sent[0], add=["STARRED"])  # a label change is not an addition
    page = mailer.added_since(checkpoint)
    assert page.gmail_ids() == tuple(sent) and page.complete and page.pages == 1
    assert all(hit.label_ids == ("SENT",) for hit in page.messages)
    assert before not in page.gmail_ids() and inbox not in page.gmail_ids()


def test_added_since_pages_and_stops_at_max_pages(sim, relay, mailer, monkeypatch):
    monkeypatch.setattr(gmail_mailer, "HISTORY_PAGE_SIZE", 2)
    checkpoint = mailer.current_history_id()
    ids = [sim.insert_message(other_raw(n)) for n in range(5)]
    relay.reset_stats()
    page = mailer.added_since(checkpoint, max_pages=10)
    assert page.gmail_ids() == tuple(ids) and page.complete and page.pages == 3
    assert relay.stats()["requests"] == 3  # 2 quota units each
    short = mailer.added_since(checkpoint, max_pages=2)
    assert short.gmail_ids() == tuple(ids[:4]) and not short.complete and short.pages == 2
    with pytest.raises(ValueError):
        mailer.added_since(checkpoint, max_pages=0)
    with pytest.raises(ValueError):
        mailer.added_since("12; DROP", max_pages=1)


def test_history_lag_hides_a_message_until_it_passes(sim, mailer):
    sim.set_history_lag(30)
    checkpoint = mailer.current_history_id()
    assert isinstance(mailer.send(RAW), Accepted)
    page = mailer.added_since(checkpoint)
    assert page.messages == () and page.complete  # absent for now: not proof until the lag has passed
    assert int(page.history_id) > int(checkpoint)  # the current id already counts it
    sim.set_history_lag(0)
    assert len(mailer.added_since(checkpoint).messages) == 1


def test_an_expired_start_raises_history_expired_at_once(sim, relay, mailer):
    checkpoint = mailer.current_history_id()
    for n in range(3):
        sim.insert_message(other_raw(n))
    sim.set_history_retention(max_records=1)
    relay.reset_stats()
    with pytest.raises(HistoryExpiredError) as info:
        mailer.added_since(checkpoint)
    assert not isinstance(info.value, MailboxUnavailableError)  # not transient: fall back to search
    assert relay.stats()["requests"] == 1  # a 404 is not retried


def test_history_read_failures_are_unavailable_after_bounded_tries(relay, mailer):
    relay.set_mode("forward-then-5xx", match="all")
    with pytest.raises(MailboxUnavailableError):
        mailer.added_since("1000")
    assert relay.stats()["requests"] == 3
    relay.reset_stats()
    with pytest.raises(MailboxUnavailableError):
        mailer.current_history_id()
    assert relay.stats()["requests"] == 3


@pytest.mark.parametrize("call", ["current_history_id", "added_since", "message_ids_of"])
def test_trickled_answers_are_cut_at_the_read_deadline(sim, relay, call):
    """A server writing one byte a second keeps every socket read alive: only the deadline ends it."""
    gmail_id = sim.insert_message(RAW)
    mailer = GmailMailer(api_endpoint=relay.url, read_timeout_s=1.0, sleep=lambda s: None)
    relay.set_mode("trickle-response", match="all", delay_s=0.5)
    started = time.monotonic()
    with pytest.raises(MailboxUnavailableError):
        {
            "current_history_id": mailer.current_history_id,
            "added_since": lambda: mailer.added_since("1000"),
            "message_ids_of": lambda: mailer.message_ids_of([gmail_id]),
        }[call]()
    assert time.monotonic() - started <= mailer.read_deadline_s + 0.5


def test_message_ids_of_reads_concurrently_and_caches(sim, relay, mailer):
    ids = [sim.insert_message(other_raw(n)) for n in range(12)]
    sim.set_latency(0.0, read_seconds=0.4)
    relay.reset_stats()
    started = time.monotonic()
    found = mailer.message_ids_of(ids)
    elapsed = time.monotonic() - started
    assert found == {
        gid: message_id_for(f"cust-7:order_paid:{2000 + n}", "mail.example.com") for n, gid in enumerate(ids)
    }
    assert list(found) == ids
    assert relay.stats()["requests"] == 12  # 5 quota units each
    assert elapsed < 12 * 0.4 / 2  # several at a time (8 readers: two rounds of 0.4 s)
    relay.reset_stats()
    assert mailer.message_ids_of(list(reversed(ids))) == {gid: found[gid] for gid in reversed(ids)}
    assert relay.stats()["requests"] == 0  # a stored Message-ID never changes: cached


def test_message_ids_of_leaves_out_messages_gmail_no_longer_has(sim, mailer):
    kept, gone = sim.insert_message(RAW), sim.insert_message(other_raw(1))
    sim.delete_message(gone)
    assert mailer.message_ids_of([kept, gone, kept]) == {kept: MESSAGE_ID}
    assert mailer.message_ids_of([]) == {}
    with pytest.raises(ValueError):
        mailer.message_ids_of([f"{n:016x}" for n in range(gmail_mailer.MAX_MESSAGE_IDS_PER_CALL + 1)])


def test_message_ids_of_shows_a_rewritten_message_id(sim, mailer):
    sim.set_rewrite_message_ids(True)
    outcome = mailer.send(RAW)
    assert isinstance(outcome, Accepted)
    stored = mailer.message_ids_of([outcome.gmail_id])[outcome.gmail_id]
    assert stored != MESSAGE_ID and stored.endswith("@mx.google.com>")


def test_message_ids_of_fails_whole_but_keeps_what_it_read(sim, relay, mailer):
    first = sim.insert_message(RAW)
    assert mailer.message_ids_of([first]) == {first: MESSAGE_ID}
    second = sim.insert_message(other_raw(1))
    relay.set_mode("forward-then-5xx", match="all")
    relay.reset_stats()
    with pytest.raises(MailboxUnavailableError):
        mailer.message_ids_of([first, second])
    assert relay.stats()["requests"] == 3  # only the uncached id, retried like any read


def test_the_simulators_limits_reach_the_mailer_as_gmail_would_answer(sim, mailer):
    """The real client reads the simulator's refusals like Gmail's: the per-minute window is a rate
    limit, the daily sending limit is its own kind; neither accepted anything."""
    sim.set_limits(units_per_window=100)
    assert isinstance(mailer.send(RAW), Accepted)
    rate = mailer.send(RAW)
    assert isinstance(rate, Failure) and refusal_kind(rate) is RefusalKind.RATE_LIMIT
    assert (rate.bucket, rate.status, rate.retryable) == (Bucket.NOT_ACCEPTED, 429, True)
    sim.set_limits(units_per_window=None, messages_per_day=1)
    daily = mailer.send(RAW)
    assert isinstance(daily, Failure) and refusal_kind(daily) is RefusalKind.DAILY_LIMIT
    assert (daily.bucket, daily.code, daily.status) == (Bucket.NOT_ACCEPTED, DAILY_LIMIT_CODE, 429)
    assert sent_copies(sim) == 1
