"""4. Service throughput over the in-memory fakes (the wiring of tests/unit/conftest.make_world).

A: SafeSendService.submit for M distinct keys: claim, build MIME, send, record, verify (happy path).
B: M duplicate submits of one key already sent: read the job back and return it (replay path).

Requests are parsed before timing. The two runs are interleaved in chunks of CHUNK submits.
safesend's INFO logs stay on (their JSON formatting is part of the path) but go to /dev/null.
Memory: a separate, untimed run of the distinct keys under tracemalloc; peak bytes / job
(the store keeps every job, the fake mailbox every effect: this is mostly retained state).
"""

from __future__ import annotations

import dataclasses
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable

from devstack.memory_store import InMemoryJobStore
from safesend.config import Settings
from safesend.core.keys import job_id_for
from safesend.core.model import Accepted, Failure
from safesend.core.policy import ChannelPolicies
from safesend.core.states import State
from safesend.core.validation import SendRequest, parse_send_request
from safesend.usecases.service import SafeSendService
from tests.fakes import FakeClock, FakeMailbox, FakeMailer, FakePublisher, FakeScheduler
from tests.unit.conftest import POLICIES, TIMING

from .common import CHANNELS, DOMAIN, SENDER, Budget, typical_body
from .results import Comparison, Variant

CHUNK = 100


class _IndexedMailer(FakeMailer):
    """FakeMailer whose stored_message_id is a dict lookup instead of a scan of every effect:
    the scan would make the distinct-keys run O(M^2) and measure the fake, not the service."""

    def __init__(self, mailbox: FakeMailbox):
        super().__init__(mailbox)
        self._stored: dict[str, str] = {}

    def send(self, raw: bytes) -> Accepted | Failure:
        outcome = super().send(raw)
        if isinstance(outcome, Accepted):
            self._stored[outcome.gmail_id] = self.mailbox.effects[-1]["message_id"]
        return outcome

    def stored_message_id(self, gmail_id: str) -> str | None:
        return self._stored.get(gmail_id)


class _World:
    def __init__(self) -> None:
        self.clock = FakeClock()
        self.mailbox = FakeMailbox(self.clock, index_lag_s=30.0)
        self.mailer = _IndexedMailer(self.mailbox)
        self.store = InMemoryJobStore()
        self.service = SafeSendService(
            self.store,
            self.mailer,
            FakeScheduler(),
            FakePublisher(),
            ChannelPolicies.from_mapping(POLICIES),
            Settings(
                project="bench",
                message_id_domain=DOMAIN,
                request_budget_s=40,
                send_timeout_s=10,
                verify_message_id_every=1,
                **dataclasses.asdict(TIMING),
            ),
            clock=self.clock,
            monotonic=self.clock.monotonic,
            sleep=self.clock.sleep,
            uniform=lambda lo, hi: hi,
        )


def _requests(m: int, tag: str) -> list[SendRequest]:
    return [parse_send_request(typical_body(f"bench-{tag}:order_paid:{i}"), SENDER, CHANNELS) for i in range(m)]


def run(m: int, budget_s: float) -> Comparison:
    a = Variant(f"submit, {m} distinct keys (send)")
    b = Variant(f"submit, {m} duplicates of 1 key (replay)")
    comp = Comparison("service", "4. service over fakes", "submit() call", "submits/s", a, b)

    distinct_world, replay_world = _World(), _World()
    distinct = _requests(m, "distinct")
    duplicate = _requests(1, "replay")[0]
    first, replayed = replay_world.service.submit(duplicate)  # the original send, untimed
    if replayed or first.state is not State.SENT:
        comp.failures.append(f"replay setup: first submit gave replayed={replayed} state={first.state.value}")

    def send_one(i: int) -> bool:
        job, was_replay = distinct_world.service.submit(distinct[i])
        return not was_replay and job.state is State.SENT

    def replay_one(i: int) -> bool:
        job, was_replay = replay_world.service.submit(duplicate)
        return was_replay and job.state is State.SENT and job.id == first.id

    sides = {"A": (a, send_one), "B": (b, replay_one)}
    outcomes, done = _chunks(comp, sides, m, Budget(budget_s))
    _check(comp, outcomes, done, distinct, distinct_world, replay_world, first.message_id)
    a.mem_bytes = _memory_per_job(done)
    a.check += "; memory = tracemalloc peak / job"
    return comp


def _chunks(
    comp: Comparison, sides: dict[str, tuple[Variant, Callable[[int], bool]]], m: int, budget: Budget
) -> tuple[Counter[str], int]:
    """A's and B's submits in alternating chunks of CHUNK, each timed: the outcomes by side and how many ran."""
    outcomes: Counter[str] = Counter()
    done = 0
    while done < m:
        if done and budget.exhausted:
            comp.notes.append(f"service: time budget {budget.seconds:.0f} s reached after {done} submits (asked {m})")
            break
        chunk = range(done, min(m, done + CHUNK))
        for tag in ("A", "B") if (done // CHUNK) % 2 == 0 else ("B", "A"):
            variant, submit = sides[tag]
            for i in chunk:
                start = time.perf_counter()
                ok = submit(i)
                elapsed = time.perf_counter() - start
                variant.latencies.append(elapsed)
                variant.ops += 1
                variant.busy_s += elapsed
                outcomes[tag + ("ok" if ok else "bad")] += 1
        done = chunk.stop
    return outcomes, done


def _check(
    comp: Comparison,
    outcomes: Counter[str],
    done: int,
    distinct: list[SendRequest],
    distinct_world: _World,
    replay_world: _World,
    replay_message_id: str,
) -> None:
    """Correctness, from the fake mailbox's acceptance log."""
    sent_ids = Counter(e["message_id"] for e in distinct_world.mailbox.effects)
    once = 0
    for request in distinct[:done]:
        job = distinct_world.store.get(job_id_for(request.dedup_key))
        once += job is not None and sent_ids[job.message_id] == 1
    if outcomes["Abad"] or once != done or len(distinct_world.mailbox.effects) != done:
        comp.failures.append(
            f"distinct: {outcomes['Abad']} bad results, {once}/{done} sent exactly once, "
            f"{len(distinct_world.mailbox.effects)} effects"
        )
    replay_copies = replay_world.mailbox.count(replay_message_id)
    if outcomes["Bbad"] or replay_copies != 1 or replay_world.mailer.sends != 1:
        comp.failures.append(
            f"replay: {outcomes['Bbad']} bad results, {replay_copies} copies sent, "
            f"{replay_world.mailer.sends} send calls"
        )
    comp.a.check = f"{once}/{done} sent exactly once"
    comp.b.check = f"{outcomes['Bok']}/{done} replayed, {replay_copies} copy sent in total"


def _memory_per_job(done: int) -> float:
    """Memory per job, untimed, on a fresh world: tracemalloc peak of `done` submits / done."""
    mem_world = _World()
    mem_requests = _requests(done, "memory")
    tracemalloc.start()
    try:
        base, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        for request in mem_requests:
            mem_world.service.submit(request)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return (peak - base) / max(done, 1)
