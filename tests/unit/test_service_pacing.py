"""The service with sender mailboxes, pools and the shared budget (issue 24), over fakes.

Each mailbox is its own FakeMailbox (its own acceptance log); the budget is the in-memory ledger,
which applies the same rules as the Firestore and PostgreSQL ledgers.
"""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devstack.memory_ledger import InMemoryMailboxLedger
from safesend.core.classify import classify_http
from safesend.core.errors import MailboxUnavailableError, RequestValidationError
from safesend.core.lifecycle import leave_queue
from safesend.core.mailboxes import MailboxDirectory
from safesend.core.states import State
from safesend.entrypoints.views import http_status_for, retry_after_s
from safesend.usecases.senders import SenderMailboxes
from tests.fakes import FakeMailbox, FakeMailer
from tests.props import examples
from tests.unit.conftest import TIMING, World, make_world
from tests.unit.test_signals import events, lines  # noqa: F401 - the fixture

RATE_429 = classify_http(429, "rateLimitExceeded", "User-rate limit exceeded")
DAILY_429 = classify_http(
    429, "rateLimitExceeded", "User-rate limit exceeded.  Retry after 2026-11-30T12:00:00.000Z (Mail sending)"
)


def pool_config(per_minute: int = 320, per_day: int = 100, ids: tuple[str, ...] = ("shop", "shop2")) -> dict:
    """Mailboxes sending as shop@example.com (the tests' default sender); 320 units/min = 3 sends and
    their Message-ID read-backs (5 units each)."""
    return {
        "defaults": {"limits": {"units_per_minute": per_minute, "messages_per_day": per_day}, "safety_share": 1.0},
        "mailboxes": {
            name: {"address": f"{name}@example.com", "token_secret": f"t-{name}", "send_as": ["shop@example.com"]}
            for name in ids
        },
    }


class PoolWorld:
    """A World whose service sends through configured mailboxes, each its own fake Gmail."""

    def __init__(self, config: dict[str, Any] | None = None, ledger: bool = True, **world: Any):
        self.world: World = make_world(**world)
        self.directory = (
            MailboxDirectory.from_mapping(config)
            if config is not None
            else MailboxDirectory.default("shop@example.com")
        )
        self.ledger = InMemoryMailboxLedger() if ledger else None
        self.boxes: dict[str, FakeMailbox] = {}
        self.mailers: dict[str, FakeMailer] = {}
        for mailbox in self.directory:
            box = FakeMailbox(self.world.clock, index_lag_s=self.world.mailbox.index_lag_s)
            self.boxes[mailbox.id] = box
            self.mailers[mailbox.id] = FakeMailer(box)
        service = self.world.service
        service.senders = SenderMailboxes(
            self.directory,
            self.ledger,
            lambda: service.mailer,
            lambda mailbox: self.mailers[mailbox.id],
            self.world.clock,
        )
        service.lag.senders = service.senders  # as the runtime wires them: one object

    @property
    def service(self):
        return self.world.service

    def sent_by(self, mailbox_id: str) -> int:
        return len(self.boxes[mailbox_id].effects)

    def copies(self, job_id: str) -> int:
        job = self.world.store.get(job_id)
        return sum(box.count(job.message_id) for box in self.boxes.values())

    def snapshot(self, mailbox_id: str):
        assert self.ledger is not None
        return self.ledger.snapshot(self.directory.get(mailbox_id), self.world.clock())

    def run_queue(self, max_steps: int = 400) -> None:
        """Play the mailbox queues and the sweeper: jump to the next due job and advance it."""
        for _ in range(max_steps):
            due = [j for j in self.world.store.all() if j.next_check_at is not None and j.state is not State.SENT]
            due += [j for j in self.world.store.all() if j.state is State.SENT and j.next_check_at is not None]
            if not due:
                return
            job = min(due, key=lambda j: j.next_check_at)
            wait = (job.next_check_at - self.world.clock()).total_seconds()
            self.world.clock.advance(max(wait, 0) + 0.001)
            self.service.advance(job.id)
        raise AssertionError("the queue did not drain")


def test_a_send_within_budget_stays_synchronous_and_counts_in_the_shared_budget():
    pool = PoolWorld(pool_config(ids=("shop",)))
    job, _ = pool.service.submit(pool.world.request())
    assert (job.state, http_status_for(job), job.mailboxes) == (State.SENT, 200, ["shop"])
    assert pool.sent_by("shop") == 1 and pool.world.mailbox.effects == []  # the mailbox's own client
    shown = pool.snapshot("shop")
    assert shown.day_messages == 1 and shown.minute_used >= 100


def test_past_the_budget_a_job_is_queued_with_an_honest_retry_after_and_sent_in_its_turn():
    pool = PoolWorld(pool_config(ids=("shop",)))
    jobs = [pool.service.submit(pool.world.request(key=f"c:order_paid:{n}"))[0] for n in range(5)]
    assert [j.state for j in jobs] == [State.SENT] * 3 + [State.QUEUED] * 2
    queued = jobs[3]
    assert http_status_for(queued) == 202 and queued.attempts == 0 and queued.maybe_landed == 0
    wait = retry_after_s(queued, pool.world.clock())
    assert wait is not None and 1 <= wait <= 63  # the minute's window, plus the arrival margin
    assert queued.queue_reason == "rate" and queued.mailboxes == ["shop"]
    task = next(name for name in pool.world.scheduler.tasks if name.startswith(queued.id))
    assert pool.world.scheduler.queues[task] == "shop"  # the mailbox's own paced queue
    pool.run_queue()
    for job in jobs:
        final = pool.world.store.get(job.id)
        assert final.state is State.SENT and pool.copies(job.id) == 1
    assert pool.world.publisher.items == []  # pacing alone never makes a review item
    assert all(e["kind"] != "failed" for j in pool.world.store.all() for e in j.events)


def test_a_from_no_mailbox_of_the_pool_may_send_as_is_a_400_before_anything_is_stored():
    pool = PoolWorld(pool_config())
    with pytest.raises(RequestValidationError) as info:
        pool.service.submit(pool.world.request(**{"from": "someone@elsewhere.example"}))
    assert "from" in info.value.fields and pool.world.store.all() == []


def test_a_pool_spreads_jobs_and_a_spent_mailbox_hands_the_next_job_to_another():
    pool = PoolWorld(pool_config())
    jobs = [pool.service.submit(pool.world.request(key=f"c:order_paid:{n}"))[0] for n in range(6)]
    assert all(j.state is State.SENT for j in jobs)  # 3 + 3 sends: both budgets used, nobody waits
    assert (pool.sent_by("shop"), pool.sent_by("shop2")) == (3, 3)
    seventh, _ = pool.service.submit(pool.world.request(key="c:order_paid:7"))
    assert seventh.state is State.QUEUED


def test_a_job_moves_to_another_mailbox_only_while_nothing_may_have_landed_and_the_move_is_recorded():
    pool = PoolWorld(pool_config())
    spend = pool.directory.get("shop")
    for _ in range(3):  # another instance used shop's minute
        pool.ledger.reserve(spend, 100, 1, pool.world.clock())
    job, _ = pool.service.submit(pool.world.request())
    assert job.state is State.SENT and job.mailboxes[-1] == "shop2" and pool.sent_by("shop2") == 1
    # A job whose attempt may have landed never moves: it waits at its own mailbox.
    pool.world.clock.advance(61)
    doubtful, _ = pool.service.submit(pool.world.request(key="c:order_paid:2"))
    doubtful.state, doubtful.maybe_landed = State.SENDING, 2
    assert pool.service.senders.reserve_send(doubtful)[0].id == doubtful.mailboxes[-1]


def test_every_mailbox_a_job_was_bound_to_is_searched():
    pool = PoolWorld(pool_config())
    job, _ = pool.service.submit(pool.world.request())
    job.mailboxes = ["shop", "shop2"]
    pool.world.clock.advance(31)  # past the fake index lag
    hits = pool.service._search(job)
    assert len(hits) == 1
    assert pool.mailers["shop"].searches == 1 and pool.mailers["shop2"].searches == 1


def test_a_gmail_rate_refusal_slows_the_mailbox_for_everyone_and_the_job_waits_queued():
    pool = PoolWorld(pool_config(per_minute=6000, ids=("shop",)))
    pool.mailers["shop"].script = [RATE_429]
    job, _ = pool.service.submit(pool.world.request())
    assert job.state is State.QUEUED and job.queue_reason == "gmail_rate" and job.attempts == 1
    assert pool.snapshot("shop").state == "slowed"
    pool.run_queue()
    final = pool.world.store.get(job.id)
    assert final.state is State.SENT and pool.copies(job.id) == 1 and pool.world.publisher.items == []


def test_a_daily_limit_refusal_exhausts_the_mailbox_once_and_its_jobs_wait_never_failing():
    pool = PoolWorld(pool_config(per_minute=60_000, ids=("shop",)))
    pool.mailers["shop"].script = [DAILY_429]
    first, _ = pool.service.submit(pool.world.request(key="c:order_paid:1"))
    second, _ = pool.service.submit(pool.world.request(key="c:order_paid:2"))
    assert [first.state, second.state] == [State.QUEUED, State.QUEUED]
    assert pool.mailers["shop"].sends == 1  # the second one never reached Gmail: exhausted
    assert pool.snapshot("shop").state == "exhausted"
    incidents = [attrs for _, attrs in pool.world.publisher.items]
    assert incidents == [
        {"kind": "mailbox_incident", "mailbox": "shop", "incident": incidents[0]["incident"]}
    ]  # once per mailbox and incident, not once per job
    wait = retry_after_s(second, pool.world.clock())
    assert wait is not None and wait > 23 * 3600  # honest: the rolling day must free it
    pool.run_queue()
    assert {pool.world.store.get(j.id).state for j in (first, second)} == {State.SENT}
    assert len(pool.world.publisher.items) == 1


def test_after_a_daily_limit_refusal_the_job_moves_within_its_pool_and_is_sent_today():
    pool = PoolWorld(pool_config(per_minute=60_000))
    pool.mailers["shop"].script = [DAILY_429]
    job, _ = pool.service.submit(pool.world.request())
    assert job.state is State.QUEUED
    pool.service.advance(job.id)
    final = pool.world.store.get(job.id)
    assert final.state is State.SENT and final.mailboxes == ["shop", "shop2"]
    assert pool.sent_by("shop2") == 1 and pool.copies(job.id) == 1
    assert any(e["kind"] == "mailbox_moved" for e in final.events)


def test_unconfigured_a_daily_limit_no_longer_fails_the_job_at_once():
    pool = PoolWorld(None)  # today's single mailbox, with the ledger the runtime always builds
    pool.world.mailer.script = [DAILY_429]
    job, _ = pool.service.submit(pool.world.request())
    assert job.state is State.QUEUED and job.review_reason is None
    assert [attrs["kind"] for _, attrs in pool.world.publisher.items] == ["mailbox_incident"]
    pool.run_queue()
    assert pool.world.store.get(job.id).state is State.SENT and pool.world.mailbox.effects


def test_unconfigured_and_under_no_limit_a_send_makes_no_ledger_call():
    class Refusing:
        def reserve(self, *args: Any) -> Any:
            raise AssertionError("no ledger call on today's path")

        snapshot = penalise = reserve

    pool = PoolWorld(None)
    pool.service.senders.ledger = Refusing()  # type: ignore[assignment]
    job, _ = pool.service.submit(pool.world.request())
    assert job.state is State.SENT and job.mailboxes == []


def test_reads_spend_the_mailbox_budget_and_a_refused_read_defers_the_check():
    pool = PoolWorld(pool_config(per_minute=300, ids=("shop",)))
    pool.mailers["shop"].script = [classify_http(503, "backendError")]
    job, _ = pool.service.submit(pool.world.request())
    assert job.state is State.UNKNOWN
    shop = pool.directory.get("shop")
    while not hasattr(pool.ledger.reserve(shop, 10, 0, pool.world.clock()), "next_free_at"):
        pass  # another instance spent what is left of the minute
    with pytest.raises(MailboxUnavailableError):
        pool.service._search(job)
    assert pool.mailers["shop"].searches == 0


def test_time_queued_never_counts_toward_the_retry_horizon():
    world = make_world()
    job, _ = world.service.submit(world.request())
    queued = job.copy()
    start = world.clock()
    queued.state, queued.retrying_since, queued.queued_since = State.QUEUED, start, start
    later = start + timedelta(hours=5)
    left = leave_queue(queued, later, "owner", TIMING)
    assert left.retrying_since == start + timedelta(hours=5)


def test_a_queued_job_whose_attempt_may_have_landed_is_searched_before_any_resend():
    world = make_world()
    job, _ = world.service.submit(world.request())
    queued = job.copy()
    queued.state, queued.maybe_landed, queued.known_copies = State.QUEUED, 1, []
    left = leave_queue(queued, world.clock(), "owner", TIMING)
    assert left.state is State.RETRY_WAIT and left.next_check_at == world.clock()


def test_status_tells_a_queued_job_its_place_at_its_mailbox():
    pool = PoolWorld(pool_config(ids=("shop",)))
    jobs = [pool.service.submit(pool.world.request(key=f"c:order_paid:{n}"))[0] for n in range(6)]
    queued = [pool.world.store.get(j.id) for j in jobs if j.state is State.QUEUED]
    assert [pool.service.queue_place(j) for j in sorted(queued, key=lambda j: (j.next_check_at, j.id))] == [0, 1, 2]
    assert pool.service.queue_place(pool.world.store.get(jobs[0].id)) is None


@settings(max_examples=examples(15), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs=st.integers(2, 14), threads=st.integers(2, 6), per_minute=st.sampled_from([200, 300, 500]))
def test_no_interleaving_of_concurrent_sends_exceeds_a_mailbox_budget(jobs: int, threads: int, per_minute: int):
    """Property (issue 24): however concurrent requests interleave, the sends Gmail sees from one
    mailbox within a minute stay within its budget, and every job is sent or queued, never lost."""
    pool = PoolWorld(pool_config(per_minute=per_minute, per_day=4, ids=("shop",)), verify=False)
    keys = iter(range(jobs))
    lock = threading.Lock()
    results: list[State] = []

    def client() -> None:
        while True:
            with lock:
                n = next(keys, None)
            if n is None:
                return
            job, _ = pool.service.submit(pool.world.request(key=f"c:order_paid:{n}"))
            with lock:
                results.append(job.state)

    workers = [threading.Thread(target=client) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=30)
    allowed = min(per_minute // 100, 4)
    assert pool.sent_by("shop") == min(jobs, allowed)
    assert sorted(results) == sorted([State.SENT] * min(jobs, allowed) + [State.QUEUED] * (jobs - min(jobs, allowed)))


def test_a_mailbox_incident_reaches_the_reviewers_chats_once_per_item():
    pool = PoolWorld(pool_config(ids=("shop",)))
    action = pool.service.notify_incident("shop", "shop:1796212800")
    assert action == "mailbox_incident_told"
    texts = [body for _, body in pool.world.notifier.posts]
    assert len(texts) == 2 and all(b"mailbox shop reached Gmail's daily sending limit" in t for t in texts)


def test_get_mailboxes_and_the_console_page_show_each_mailboxs_budget_backlog_and_state():
    import time as _time

    import flask

    from safesend.bootstrap.runtime import Runtime
    from safesend.config import Settings
    from safesend.core.auth import SIGNATURE_HEADER, Authenticator, AuthPolicy, sign
    from safesend.entrypoints.console import ReviewConsole
    from safesend.entrypoints.http_api import HttpApi
    from tests.unit.test_console import dev_auth

    pool = PoolWorld(pool_config(ids=("shop",)))
    for n in range(5):
        pool.service.submit(pool.world.request(key=f"c:order_paid:{n}"))
    secret = b"0123456789abcdef0123456789abcdef"
    runtime = Runtime(
        Settings(project="demo"),
        pool.service.policies,
        pool.service,
        Authenticator(AuthPolicy(secret, frozenset(), frozenset()), None, _time.time),
    )
    app = flask.Flask(__name__)
    headers = {SIGNATURE_HEADER: sign(secret, int(_time.time()), b"")}
    with app.test_request_context("/mailboxes", method="GET", headers=headers):
        body, status, _ = HttpApi(lambda: runtime).status(flask.request)
    assert status == 200
    (shop,) = body["mailboxes"]
    assert (shop["id"], shop["backlog"], shop["minute"]["units_limit"], shop["day"]["messages_used"]) == (
        "shop",
        2,
        320,
        3,
    )
    assert shop["state"] == "ok" and shop["next_free_at"] is not None and shop["retry_after_s"] >= 1
    with app.test_request_context("/mailboxes", method="GET"):
        _, refused, _ = HttpApi(lambda: runtime).status(flask.request)
    assert refused == 401  # the callers' credentials, as for /status
    auth = dev_auth()
    with app.test_request_context("/review/mailboxes", method="GET", environ_base={"REMOTE_ADDR": "127.0.0.1"}):
        page, code, _ = ReviewConsole(lambda: pool.service, lambda: auth).handle(flask.request)
    assert code == 200 and "Sender mailboxes" in page and ">shop<" in page and "3 / 100 messages" in page


def test_a_job_searched_after_its_turn_is_sent_in_that_turn_not_requeued_behind_the_backlog():
    """A queued job whose earlier attempt may have landed leaves the queue through a search (retry_wait);
    the attempt that follows is its turn: a backlog behind it must not send it to the back again."""
    pool = PoolWorld(pool_config(ids=("shop",)))
    pool.mailers["shop"].script = [classify_http(503, "backendError")]
    job, _ = pool.service.submit(pool.world.request())
    assert job.state is State.UNKNOWN and job.maybe_landed == 1
    shop = pool.directory.get("shop")
    pool.world.clock.advance(400)  # past the unknown window: a resend is due, but the budget is spent
    while not hasattr(pool.ledger.reserve(shop, 100, 1, pool.world.clock()), "next_free_at"):
        pass
    pool.service.advance(job.id)
    queued = pool.world.store.get(job.id)
    assert queued.state is State.QUEUED and queued.maybe_landed == 1
    for _ in range(3):  # a backlog forms behind it
        pool.ledger.book_turn(shop, queued.next_check_at, pool.world.clock())
    pool.run_queue()
    final = pool.world.store.get(job.id)
    assert final.state is State.SENT and [e["kind"] for e in final.events].count("queued") == 1


def test_a_mailbox_incident_that_cannot_be_published_still_alerts_and_shows_on_health(lines):
    """Never silent: the incident has no job and no outbox, so a failed publish is the alert
    "reviewers are not being told" (reviewer_notice_overdue) and /health's record, not a lone log line."""
    pool = PoolWorld(pool_config(per_minute=60_000, ids=("shop",)))
    pool.mailers["shop"].script = [DAILY_429]
    pool.world.publisher.fail_next = 1
    job, _ = pool.service.submit(pool.world.request())
    assert job.state is State.QUEUED and pool.world.publisher.items == []
    told = events(lines, "reviewer_notice_overdue")
    assert len(told) == 1 and told[0]["kind"] == "mailbox_exhausted" and told[0]["severity"] == "ERROR"
    record = pool.world.store.read_op("reviewer_notice_overdue")
    assert record is not None and record["kind"] == "mailbox_exhausted"
    assert record["notice_id"] == told[0]["notice_id"] and record["notice_id"].startswith("shop:")
