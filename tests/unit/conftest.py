"""Unit-test wiring: the service over in-memory fakes and a hand-driven clock."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import pytest

from devstack.memory_store import InMemoryJobStore
from safesend.config import Settings
from safesend.core.callbacks import CallbackPolicy
from safesend.core.lifecycle import Timing
from safesend.core.notify import ReviewerTargets
from safesend.core.policy import ChannelPolicies
from safesend.core.validation import parse_send_request
from safesend.usecases.service import SafeSendService
from tests.fakes import FakeClock, FakeMailbox, FakeMailer, FakeNotifier, FakePublisher, FakeScheduler
from tests.graph_fakes import GraphNamingMailer

POLICIES = {
    "defaults": {"max_attempts": 3, "quick_retries": 2, "retry_base_s": 1.0, "retry_cap_s": 30.0},
    "channels": {
        "receipts": {"on_unknown": "retry"},
        "payments": {"on_unknown": "review"},
        "plain": {},
        "review-notifications": {"on_unknown": "retry", "notify": ["chat", "slack"]},
    },
}
CALLBACKS = CallbackPolicy(frozenset({"n8n.example.com", "*.app.n8n.cloud"}))
TIMING = Timing(lease_s=120, index_lag_s=90, unknown_window_s=300, recheck_s=60, publish_lease_s=60)


@dataclass
class World:
    clock: FakeClock
    mailbox: FakeMailbox
    mailer: FakeMailer
    store: InMemoryJobStore
    scheduler: FakeScheduler
    publisher: FakePublisher
    service: SafeSendService
    notifier: FakeNotifier
    pushed: int = 0

    def request(self, key: str = "cust-1:order_paid:42", channel: str = "receipts", **overrides: Any):
        body = {
            "dedup_key": key,
            "channel": channel,
            "to": "ann@example.com",
            "subject": "Receipt",
            "text": "Thanks for your order.",
            **overrides,
        }
        return parse_send_request(body, "Shop <shop@example.com>", callbacks=CALLBACKS)

    def effects(self, job_id_or_msgid: str) -> int:
        job = self.store.get(job_id_or_msgid)
        return self.mailbox.count(job.message_id if job else job_id_or_msgid)

    def run_until_settled(self, job_id: str, max_steps: int = 50) -> None:
        """Play Cloud Tasks: jump to the next due time and reconcile, a bounded number of times."""
        for _ in range(max_steps):
            job = self.store.get(job_id)
            due = [at for at in (job.next_check_at, job.notice_due_at) if at is not None]
            if not due:
                return
            wait = (min(due) - self.clock()).total_seconds()
            self.clock.advance(max(wait, 0) + 0.001)
            self.service.advance(job_id)
            self.push_review_items()
        raise AssertionError(f"job {job_id} not settled after {max_steps} steps")

    def push_review_items(self) -> None:
        """Play the Pub/Sub push subscription: hand each newly published review item to notify."""
        if not self.service.reviewers.enabled:
            return
        while self.pushed < len(self.publisher.items):
            _, attributes = self.publisher.items[self.pushed]
            self.pushed += 1
            self.service.notify(attributes["job_id"], attributes["review_id"])


def make_world(
    script: list | None = None,
    index_lag_s: float = 30.0,
    policies: dict | None = None,
    verify: bool = True,
    reviewers: ReviewerTargets = ReviewerTargets(),
    history_check_s: float = 0.0,
    history_lag_s: float = 0.0,
    provider: str = "gmail",
) -> World:
    """The service over fakes. The mailbox's change log is off unless `history_check_s` > 0: most
    tests are about the search path, which the service falls back to without a checkpoint."""
    clock = FakeClock()
    mailbox = FakeMailbox(clock, index_lag_s=index_lag_s, history_lag_s=history_lag_s)
    mailer = FakeMailer(mailbox, script)
    if provider == "graph":  # copies named as GraphMailer names them (a 202 has no message id)
        mailer = GraphNamingMailer(mailer)  # type: ignore[assignment]
    store = InMemoryJobStore()
    scheduler = FakeScheduler()
    publisher = FakePublisher()
    notifier = FakeNotifier()
    settings = Settings(
        project="test-project",
        message_id_domain="mail.example.com",
        default_from="Shop <shop@example.com>",
        request_budget_s=40,
        send_timeout_s=10,
        verify_message_id_every=1 if verify else 0,
        **dataclasses.asdict(dataclasses.replace(TIMING, history_check_s=history_check_s)),
    )
    service = SafeSendService(
        store,
        mailer,
        scheduler,
        publisher,
        ChannelPolicies.from_mapping(policies or POLICIES),
        settings,
        notifier=notifier,
        checkpoint_in_background=False,
        clock=clock,
        monotonic=clock.monotonic,
        sleep=clock.sleep,
        uniform=lambda a, b: b,
    )
    service.reviewers = reviewers  # the targets as given, without inventing webhook URLs for them
    return World(clock, mailbox, mailer, store, scheduler, publisher, service, notifier)


@pytest.fixture
def world() -> World:
    return make_world()
