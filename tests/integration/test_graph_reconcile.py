"""The service's reconcile, unchanged, over a Microsoft 365 mailbox: GraphMailer through the fault relay
in front of the Graph simulator, real HTTP. A dropped 202 is settled as sent once by the Sent Items
search (or by delta first, with a checkpoint); a lagging Sent Items keeps the job in doubt, never
resent, until it settles; a second copy is reported as a duplicate."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from devstack.graph_sim import GraphSimulator
from devstack.memory_store import InMemoryJobStore
from devstack.relay import FaultRelay
from safesend.adapters.graph_mailer import GraphMailer, first_copy_id
from safesend.config import Settings
from safesend.core.policy import ChannelPolicies
from safesend.core.states import State
from safesend.core.validation import parse_send_request
from safesend.usecases.service import SafeSendService
from tests.fakes import FakeClock, FakeNotifier, FakePublisher, FakeScheduler
from tests.unit.conftest import CALLBACKS, POLICIES, TIMING

USER = "shop@contoso.example"


@dataclass
class GraphWorld:
    clock: FakeClock
    sim: GraphSimulator
    relay: FaultRelay
    store: InMemoryJobStore
    service: SafeSendService

    def submit(self, key: str = "cust-1:order_paid:42", channel: str = "receipts") -> str:
        body = {"dedup_key": key, "channel": channel, "to": "ann@example.com", "subject": "Receipt", "text": "Thanks."}
        job, _ = self.service.submit(parse_send_request(body, f"Shop <{USER}>", callbacks=CALLBACKS))
        return job.id

    def copies(self, job_id: str) -> int:
        job = self.store.get(job_id)
        assert job is not None
        return sum(1 for e in self.sim.effects() if e["internetMessageId"] == job.message_id)

    def step(self, job_id: str) -> State:
        """Play Cloud Tasks once: jump to the job's next due time (the simulator's clock too) and advance."""
        job = self.store.get(job_id)
        assert job is not None and job.next_check_at is not None
        wait = max(0.0, (job.next_check_at - self.clock()).total_seconds()) + 0.001
        self.clock.advance(wait)
        self.service.advance(job_id)
        after = self.store.get(job_id)
        assert after is not None
        return after.state

    def settle(self, job_id: str, max_steps: int = 40) -> None:
        for _ in range(max_steps):
            job = self.store.get(job_id)
            assert job is not None
            if job.next_check_at is None:
                return
            self.step(job_id)
        raise AssertionError(f"job {job_id} not settled after {max_steps} steps")


def make_world(history_check_s: float = 0.0) -> Iterator[GraphWorld]:
    clock = FakeClock()
    sim = GraphSimulator(clock=lambda: clock().timestamp()).start()
    relay = FaultRelay(sim.url).start()
    try:
        mailer = GraphMailer(
            USER, None, api_endpoint=relay.url, send_timeout_s=1.5, read_timeout_s=3.0, sleep=clock.sleep, clock=clock
        )
        settings = Settings(
            project="test-project",
            message_id_domain="mail.example.com",
            default_from=f"Shop <{USER}>",
            request_budget_s=40,
            send_timeout_s=10,
            verify_message_id_every=1,
            **dataclasses.asdict(dataclasses.replace(TIMING, history_check_s=history_check_s)),
        )
        store = InMemoryJobStore()
        service = SafeSendService(
            store,
            mailer,
            FakeScheduler(),
            FakePublisher(),
            ChannelPolicies.from_mapping(POLICIES),
            settings,
            notifier=FakeNotifier(),
            checkpoint_in_background=False,
            clock=clock,
            monotonic=clock.monotonic,
            sleep=clock.sleep,
            uniform=lambda a, b: b,
        )
        yield GraphWorld(clock, sim, relay, store, service)
    finally:
        relay.stop()
        sim.stop()


@pytest.fixture
def world() -> Iterator[GraphWorld]:
    yield from make_world()


@pytest.fixture
def world_with_delta() -> Iterator[GraphWorld]:
    yield from make_world(history_check_s=5.0)


def test_a_dropped_202_is_settled_as_sent_once_by_the_search(world: GraphWorld) -> None:
    world.relay.set_mode("forward-then-drop-response", count=1, delay_s=0.1)
    job_id = world.submit()
    assert world.store.get(job_id).state is State.UNKNOWN  # type: ignore[union-attr]
    world.settle(job_id)
    job = world.store.get(job_id)
    assert job is not None and job.state is State.SENT
    assert job.known_copies == [first_copy_id(job.message_id)]
    assert world.copies(job_id) == 1 and job.attempts == 1
    assert "found_in_mailbox" in [e["kind"] for e in job.events]


def test_with_a_checkpoint_delta_settles_a_dropped_202_before_the_search_could(world_with_delta: GraphWorld) -> None:
    world = world_with_delta
    world.relay.set_mode("close-after-forward", count=1)
    job_id = world.submit()
    job = world.store.get(job_id)
    assert job is not None and job.state is State.UNKNOWN and job.history_start
    assert world.step(job_id) is State.SENT  # the first look, seconds after the attempt
    job = world.store.get(job_id)
    assert job is not None and "found_in_history" in [e["kind"] for e in job.events]
    assert job.known_copies == [first_copy_id(job.message_id)] and world.copies(job_id) == 1


def test_a_lagging_sent_items_keeps_the_job_in_doubt_and_never_resends(world: GraphWorld) -> None:
    world.sim.configure(index_lag_s=200)  # past the service's 90 s index lag, inside its 300 s window
    world.relay.set_mode("forward-then-drop-response", count=1, delay_s=0.1)
    job_id = world.submit()
    assert world.step(job_id) is State.UNKNOWN  # searched: nothing yet
    world.settle(job_id)
    job = world.store.get(job_id)
    assert job is not None and job.state is State.SENT and job.attempts == 1
    assert world.copies(job_id) == 1
    assert [e["kind"] for e in job.events].count("mailbox_checked") >= 2


def test_a_second_copy_in_sent_items_is_reported_as_a_duplicate(world: GraphWorld) -> None:
    world.relay.set_mode("forward-then-drop-response", count=1, delay_s=0.1)
    job_id = world.submit()
    job = world.store.get(job_id)
    assert job is not None
    world.clock.advance(1)
    world.sim.insert_message(USER, _raw(job.message_id))  # another client sent it again meanwhile
    world.settle(job_id)
    final = world.store.get(job_id)
    assert final is not None and final.state is State.REVIEW and final.review_reason == "duplicate"
    assert len(final.known_copies) == 2 and world.copies(job_id) == 2  # one from us, one inserted
    assert final.attempts == 1


def test_a_resend_after_the_window_then_a_late_copy_is_reported_as_a_duplicate(world: GraphWorld) -> None:
    world.sim.configure(index_lag_s=400)  # longer than the 300 s window: the retry channel resends
    world.relay.set_mode("forward-then-drop-response", count=1, delay_s=0.1)
    job_id = world.submit()
    world.settle(job_id)
    final = world.store.get(job_id)
    assert final is not None and final.attempts == 2 and world.copies(job_id) == 2
    assert final.state is State.REVIEW and final.review_reason == "duplicate"


def _raw(message_id: str) -> bytes:
    return (
        f"From: {USER}\r\nTo: ann@example.com\r\nSubject: Receipt\r\nMessage-ID: {message_id}\r\n\r\nThanks.\r\n"
    ).encode()


def test_a_202_is_verified_only_once_sent_items_shows_the_copy(world: GraphWorld) -> None:
    """A 202 says a draft was saved and handed to transport, not that the message went out
    (learn.microsoft.com/graph/outlook-things-to-know-about-send-mail): the copy must be seen."""
    job_id = world.submit()
    job = world.store.get(job_id)
    assert job is not None and job.state is State.SENT and job.verified is False and job.next_check_at is not None
    world.settle(job_id)
    final = world.store.get(job_id)
    assert final is not None and final.state is State.SENT and final.verified is True
    assert final.attempts == 1 and world.copies(job_id) == 1 and final.next_check_at is None


def test_a_202_whose_copy_never_reaches_sent_items_is_told_to_a_person(world: GraphWorld) -> None:
    # Transport refused it after the 202 (an NDR in the mailbox's Inbox, nothing sent) or a rule removed it.
    world.sim.configure(save_to_sent_items=False)
    job_id = world.submit()
    world.settle(job_id)
    final = world.store.get(job_id)
    assert final is not None and final.state is State.REVIEW and final.review_reason == "unverified"
    assert final.attempts == 1


def test_a_dropped_202_whose_draft_transport_holds_past_the_window_is_never_resent(world: GraphWorld) -> None:
    # A sendMail message is a draft until transport takes it (slow when throttled): past the 300 s window
    # a Sent Items search alone reads "not sent" and the retry channel would send a second email.
    world.sim.configure(transport_delay_s=400)
    world.relay.set_mode("forward-then-drop-response", count=1, delay_s=0.1)
    job_id = world.submit()
    world.settle(job_id)
    final = world.store.get(job_id)
    assert final is not None and final.attempts == 1 and world.copies(job_id) == 1
    assert final.state is State.SENT and final.verified is True
    assert final.known_copies == [first_copy_id(final.message_id)]
