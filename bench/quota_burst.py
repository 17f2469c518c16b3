"""What a burst does to a rate-limited mailbox today (issue 24's first measurement).

safesend sends as fast as callers call. Here N jobs arrive at the same instant against one mailbox of
the Gmail simulator whose per-user window allows ``units_per_minute`` quota units a minute (Gmail's
6,000 for new projects), and the run reports what Gmail saw and what the callers got: sends refused
for rate, refusals per job, jobs failed with a review item at the retry horizon, completion time
against the physical limit (the units the accepted sends needed divided by the rate).

How: an in-process SafeSendService (production channel policy and timings, InMemoryJobStore, the
real GmailMailer) against a GmailSimulator sharing a fake clock. The driver plays Cloud Tasks:
it jumps the clock to the earliest job's next_check_at and calls service.advance() for it, so an
hour of retries takes seconds and the counts are exact. The request budget is 0 (no quick retries
inside submit): each retry is made by advance() at the time the quick retry would have slept to,
so Gmail sees the same attempts, and concurrent callers need no threads.

Run: .venv/bin/python -m bench.quota_burst [--jobs 1000] [--units-per-minute 6000]
"""

from __future__ import annotations

import argparse
import heapq
import json
import sys
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

# isort: off
from .common import DOMAIN, SENDER, quiet_service_logs  # first: puts functions/ and the repo root on sys.path
from .instrument import CountingPublisher

from devstack.gmail_quota import METHOD_UNITS
from devstack.gmail_sim import GmailSimulator
from devstack.memory_store import InMemoryJobStore
from safesend.adapters.gmail_mailer import GmailMailer
from safesend.config import DEFAULT_CHANNELS_FILE, Settings
from safesend.core.policy import ChannelPolicies
from safesend.usecases.service import SafeSendService
from safesend.core.states import State
from safesend.core.validation import parse_send_request
from tests.fakes import FakeClock

# isort: on

MAX_STEPS_PER_JOB = 200  # bounds the driver: a job is advanced at most this many times
CHANNEL = "transactional"  # order confirmations


@dataclass
class BurstReport:
    """The numbers of one burst (fake seconds; refusals as the simulator counted them)."""

    jobs: int
    units_per_minute: int
    sent: int
    failed: int
    other_states: dict[str, int]
    duplicates: int
    gmail_refusals: dict[str, int]
    review_items: int
    attempts_max: int
    attempts_total: int
    refusals_per_job_max: int
    completion_s: float | None  # the last acceptance, after the burst arrived
    physical_limit_s: float  # the units the accepted sends needed, at the rate
    steps: int
    states: dict[str, int] = field(default_factory=dict)

    @property
    def rate_refusals(self) -> int:
        return self.gmail_refusals.get("rate", 0)


def _request(key: str) -> Any:
    body = {
        "dedup_key": key,
        "channel": CHANNEL,
        "from": SENDER,
        "to": ["Ann Example <ann@example.com>"],
        "subject": f"Order confirmation {key}",
        "text": "Thank you for your order.",
    }
    return parse_send_request(body, SENDER, None)


def run(jobs: int = 1000, units_per_minute: int = 6000) -> BurstReport:
    """One burst of ``jobs`` against one mailbox limited to ``units_per_minute``; see the module docstring."""
    if not 1 <= jobs <= 100_000 or units_per_minute < METHOD_UNITS["send"]:
        raise ValueError("jobs must be within [1, 100000] and units_per_minute at least one send's units")
    clock = FakeClock()
    start = clock()
    store = InMemoryJobStore()
    publisher = CountingPublisher()
    with GmailSimulator(clock=lambda: clock().timestamp()) as sim:
        sim.set_limits(units_per_window=units_per_minute, window_s=60.0)
        service = SafeSendService(
            store,
            GmailMailer(api_endpoint=sim.url, send_timeout_s=5.0, read_timeout_s=10.0),
            None,
            publisher,
            ChannelPolicies.load(DEFAULT_CHANNELS_FILE),
            Settings(project="bench", message_id_domain=DOMAIN, request_budget_s=0.0, send_timeout_s=5.0),
            checkpoint_in_background=False,
            clock=clock,
            monotonic=clock.monotonic,
            sleep=clock.sleep,
        )
        due: list[tuple[datetime, str]] = []
        for i in range(jobs):  # every caller at the same instant
            job, _ = service.submit(_request(f"burst-{i}"))
            if job.next_check_at is not None:
                heapq.heappush(due, (job.next_check_at, job.id))
        steps = 0
        while due and steps < jobs * MAX_STEPS_PER_JOB:
            at, job_id = heapq.heappop(due)
            current = store.get(job_id)
            if current is None or current.next_check_at is None:
                continue
            if current.next_check_at != at:  # an older entry of a job that moved on
                continue
            wait = (at - clock()).total_seconds()
            if wait > 0:
                clock.advance(wait + 0.001)
            job, _ = service.advance(job_id)
            steps += 1
            if job is not None and job.next_check_at is not None:
                heapq.heappush(due, (job.next_check_at, job.id))
        effects = sim.effects()
        usage = sim.usage()
    return _report(jobs, units_per_minute, store, effects, usage, publisher, start, steps)


def _report(
    jobs: int,
    units_per_minute: int,
    store: InMemoryJobStore,
    effects: list[dict],
    usage: dict[str, dict],
    publisher: CountingPublisher,
    start: datetime,
    steps: int,
) -> BurstReport:
    all_jobs = store.all()
    states = Counter(job.state.value for job in all_jobs)
    copies = Counter(effect["message_id"] for effect in effects)
    refusals = [sum(1 for e in job.events if e.get("kind") == "attempt_failed") for job in all_jobs]
    (mailbox,) = usage.values()
    accepted_at = [effect["accepted_at"] for effect in effects]
    return BurstReport(
        jobs=jobs,
        units_per_minute=units_per_minute,
        sent=states.get(State.SENT.value, 0),
        failed=states.get(State.FAILED.value, 0),
        other_states={k: v for k, v in states.items() if k not in (State.SENT.value, State.FAILED.value)},
        duplicates=sum(n - 1 for n in copies.values() if n > 1),
        gmail_refusals=dict(mailbox["refused"]),
        review_items=len(publisher.items),
        attempts_max=max((job.attempts for job in all_jobs), default=0),
        attempts_total=sum(job.attempts for job in all_jobs),
        refusals_per_job_max=max(refusals, default=0),
        completion_s=round(max(accepted_at) - start.timestamp(), 3) if accepted_at else None,
        physical_limit_s=round(len(effects) * METHOD_UNITS["send"] * 60.0 / units_per_minute, 3),
        steps=steps,
        states=dict(states),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.quota_burst", description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--units-per-minute", type=int, default=6000)
    args = parser.parse_args(argv)
    quiet_service_logs()
    report = run(args.jobs, args.units_per_minute)
    print(json.dumps({**asdict(report), "rate_refusals": report.rate_refusals}, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
