"""Issue 24's benchmarks: a burst against one paced mailbox, the same burst over a pool of three, and a
day past the daily limit (keys `burst`, `pool`, `daily` of bench/results.json).

How: an in-process SafeSendService with sender mailboxes (SenderMailboxes over the in-memory ledger,
which applies the same rules as the Firestore and PostgreSQL ledgers) and the real GmailMailer, one
per mailbox, against a GmailSimulator that enforces Gmail's limits per mailbox and shares a fake
clock: the simulated time of a 2,000-job burst (over half an hour) takes seconds. The driver plays
each mailbox's paced Cloud Tasks queue: a queued job's turn is dispatched at most at the queue's
rate (units per minute x safety share / 6,000 sends a second, as infra/ creates it), in the order the
turns were given; every other due job (a check, a verification) at its due time. The callers submit
all at the same instant (32 clients, round robin); submit() is synchronous as in a request.

What each reports (every count from the simulator, Gmail's side):
- burst: completion (last acceptance) over the physical limit, which is the quota units Gmail
  admitted (sends and our reads) divided by the rate; sends refused for rate; failed, review items,
  duplicates; every job settled and told (its state and, for the queued ones, a Retry-After).
- pool: the same burst over three mailboxes: throughput against one mailbox, each mailbox's share.
- daily: 2,500 jobs against 2,000 a day: sends today, daily refusals, the queued jobs' Retry-After
  against when they were actually sent (on the fake clock, a day later); then with a second mailbox.
- the single-send latency under budget with a paced mailbox against today's unconfigured path,
  wall-clock, in the same run.

Run: .venv/bin/python -m bench.pacing [--jobs 2000]   (or as part of scripts/bench.sh)
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import statistics
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

# isort: off
from .common import DOMAIN, SENDER, quiet_service_logs  # first: puts functions/ and the repo root on sys.path
from .instrument import CountingPublisher

from devstack.gmail_quota import METHOD_UNITS
from devstack.gmail_sim import GmailSimulator
from devstack.memory_ledger import InMemoryMailboxLedger
from devstack.memory_store import InMemoryJobStore
from safesend.adapters.gmail_mailer import GmailMailer
from safesend.config import DEFAULT_CHANNELS_FILE, Settings
from safesend.core.mailboxes import MailboxDirectory
from safesend.core.policy import ChannelPolicies
from safesend.usecases.senders import SenderMailboxes
from safesend.usecases.service import SafeSendService
from safesend.core.states import State
from safesend.core.validation import parse_send_request
from safesend.entrypoints.views import retry_after_s
from tests.fakes import FakeClock

# isort: on

CHANNEL = "transactional"
CLIENTS = 32
MAX_STEPS_PER_JOB = 60  # bounds the driver
SAFETY_SHARE = 0.95


@dataclass
class PacingReport:
    """One scenario's numbers (fake seconds)."""

    jobs: int
    mailboxes: int
    units_per_minute: int
    messages_per_day: int | None
    states: dict[str, int]
    duplicates: int
    gmail_refusals: dict[str, int]
    review_items: int
    units_admitted: int
    completion_s: float | None
    physical_limit_s: float
    shares: dict[str, int]
    sent_first_day: int
    queued_told: int  # queued jobs whose answer carried a Retry-After
    retry_after_error_max: float | None  # |estimate - actual| / actual wait, worst queued job
    steps: int
    notes: list[str] = field(default_factory=list)

    @property
    def sent(self) -> int:
        return self.states.get(State.SENT.value, 0)

    @property
    def rate_refusals(self) -> int:
        return self.gmail_refusals.get("rate", 0)

    @property
    def ratio_to_physical(self) -> float | None:
        return None if self.completion_s is None else self.completion_s / self.physical_limit_s

    @property
    def throughput(self) -> float:
        return self.sent / self.completion_s if self.completion_s else 0.0


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


def _config(ids: list[str], units_per_minute: int, per_day: int | None) -> dict[str, Any]:
    limits: dict[str, Any] = {"units_per_minute": units_per_minute}
    if per_day is not None:
        limits["messages_per_day"] = per_day
    return {
        "defaults": {"limits": limits, "safety_share": SAFETY_SHARE},
        "mailboxes": {
            m: {"address": f"{m}@example.com", "delegated_user": f"{m}@example.com", "send_as": ["shop@example.com"]}
            for m in ids
        },
    }


def run(
    jobs: int = 2000,
    mailboxes: int = 1,
    units_per_minute: int = 6000,
    messages_per_day: int | None = None,
    horizon_s: float = 3 * 24 * 3600.0,
) -> PacingReport:
    """One scenario; see the module docstring."""
    clock = FakeClock()
    start = clock()
    ids = [f"mbx{n + 1}" for n in range(mailboxes)]
    directory = MailboxDirectory.from_mapping(_config(ids, units_per_minute, messages_per_day))
    store = InMemoryJobStore()
    publisher = CountingPublisher()
    admitted: Counter[str] = Counter()
    with GmailSimulator(clock=lambda: clock().timestamp()) as sim:
        for m in ids:
            sim.add_mailbox(f"{m}@example.com")
            sim.set_limits(f"{m}@example.com", units_per_window=units_per_minute, messages_per_day=messages_per_day)
            _count_units(sim, f"{m}@example.com", admitted)
        settings = Settings(project="bench", message_id_domain=DOMAIN, request_budget_s=0.0, send_timeout_s=5.0)
        service = SafeSendService(
            store,
            GmailMailer(api_endpoint=sim.url, send_timeout_s=5.0, read_timeout_s=10.0),
            None,
            publisher,
            ChannelPolicies.load(DEFAULT_CHANNELS_FILE),
            settings,
            checkpoint_in_background=False,
            clock=clock,
            monotonic=clock.monotonic,
            sleep=clock.sleep,
        )
        service.senders = SenderMailboxes(
            directory,
            InMemoryMailboxLedger(),
            lambda: service.mailer,
            lambda mailbox: GmailMailer(
                user=mailbox.user_id, api_endpoint=sim.url, send_timeout_s=5.0, read_timeout_s=10.0
            ),
            clock,
        )
        told: dict[str, datetime] = {}  # queued job -> when its answer said to come back
        due: list[tuple[datetime, int, str]] = []
        order = 0
        for n in range(jobs):  # client n % CLIENTS's next job: the 32 clients in turn, all at one instant
            job, _ = service.submit(_request(f"pace-{n}"))
            if job.state is State.QUEUED:
                wait = retry_after_s(job, clock())
                if wait is not None:
                    told[job.id] = clock() + timedelta(seconds=wait)
            if job.next_check_at is not None:
                heapq.heappush(due, (job.next_check_at, order, job.id))
                order += 1
        steps = _drive(service, store, clock, due, order, units_per_minute, jobs, start, horizon_s)
        effects = sim.effects()
        usage = sim.usage()
    return _report(
        jobs, ids, units_per_minute, messages_per_day, store, effects, usage, publisher, admitted, start, steps, told
    )


def _count_units(sim: GmailSimulator, user: str, admitted: Counter[str]) -> None:
    """Tally the quota units the simulator admits for `user` (its window forgets them)."""
    quota = sim._box(user).quota  # the bench's own instrument of its own simulator
    charge = quota.charge

    def counted(method: str, now: float) -> Any:
        refusal = charge(method, now)
        if refusal is None:
            admitted[user] += METHOD_UNITS[method]
        return refusal

    quota.charge = counted  # type: ignore[method-assign]


def _drive(
    service: SafeSendService,
    store: InMemoryJobStore,
    clock: FakeClock,
    due: list[tuple[datetime, int, str]],
    order: int,
    units_per_minute: int,
    jobs: int,
    start: datetime,
    horizon_s: float,
) -> int:
    """Play Cloud Tasks: a queued job's turn no faster than its mailbox queue's rate, in turn order."""
    interval = timedelta(seconds=6000.0 / (units_per_minute * SAFETY_SHARE))  # one send per slot
    next_slot: dict[str, datetime] = {}
    steps = 0
    end = start + timedelta(seconds=horizon_s)
    while due and steps < jobs * MAX_STEPS_PER_JOB:
        at, _, job_id = heapq.heappop(due)
        current = store.get(job_id)
        if current is None or current.next_check_at is None or current.next_check_at != at:
            continue
        when = at
        if current.state is State.QUEUED:
            mailbox = current.mailboxes[-1] if current.mailboxes else ""
            when = max(at, next_slot.get(mailbox, at))
            next_slot[mailbox] = when + interval
        if when > end:
            break
        if when > clock():
            clock.advance((when - clock()).total_seconds() + 0.001)
        job, _ = service.advance(job_id)
        steps += 1
        if job is not None and job.next_check_at is not None:
            heapq.heappush(due, (job.next_check_at, order, job.id))
            order += 1
    return steps


def _report(
    jobs: int,
    ids: list[str],
    units_per_minute: int,
    messages_per_day: int | None,
    store: InMemoryJobStore,
    effects: list[dict],
    usage: dict[str, dict],
    publisher: CountingPublisher,
    admitted: Counter[str],
    start: datetime,
    steps: int,
    told: dict[str, datetime],
) -> PacingReport:
    all_jobs = store.all()
    states = Counter(job.state.value for job in all_jobs)
    copies = Counter(effect["message_id"] for effect in effects)
    refusals: Counter[str] = Counter()
    for box in usage.values():
        refusals.update(box["refused"])
    accepted_at = sorted(effect["accepted_at"] for effect in effects)
    first_day = start.timestamp() + 24 * 3600
    by_message = {e["message_id"]: e["accepted_at"] for e in effects}
    errors = []
    for job in all_jobs:
        if job.id in told and job.message_id in by_message:
            waited = by_message[job.message_id] - start.timestamp()
            estimate = (told[job.id] - start).total_seconds()
            errors.append(abs(estimate - waited) / max(waited, 1.0))
    shares = {
        m: sum(1 for j in all_jobs if j.mailboxes and j.mailboxes[-1] == m and j.state is State.SENT) for m in ids
    }
    rate_per_s = units_per_minute * len(ids) / 60.0
    return PacingReport(
        jobs=jobs,
        mailboxes=len(ids),
        units_per_minute=units_per_minute,
        messages_per_day=messages_per_day,
        states=dict(states),
        duplicates=sum(n - 1 for n in copies.values() if n > 1),
        gmail_refusals=dict(refusals),
        review_items=len(publisher.items),
        units_admitted=sum(admitted.values()),
        completion_s=round(accepted_at[-1] - start.timestamp(), 3) if accepted_at else None,
        physical_limit_s=round(sum(admitted.values()) / rate_per_s, 3),
        shares=shares,
        sent_first_day=sum(1 for at in accepted_at if at <= first_day),
        queued_told=len(told),
        retry_after_error_max=round(max(errors), 4) if errors else None,
        steps=steps,
    )


def single_send_latency(samples: int = 30) -> tuple[list[float], list[float]]:
    """Wall-clock of one submit() under budget: today's unconfigured path vs a paced mailbox (the
    in-memory ledger: the shared ledgers add their store's one read-and-commit). The two paths take
    turns, send by send, so a burst of load on the machine slows both alike instead of one half."""
    out: tuple[list[float], list[float]] = ([], [])
    with GmailSimulator() as sim:
        sim.add_mailbox("mbx1@example.com")
        services = []
        for paced in (False, True):
            service = SafeSendService(
                InMemoryJobStore(),
                GmailMailer(api_endpoint=sim.url, send_timeout_s=5.0, read_timeout_s=10.0),
                None,
                CountingPublisher(),
                ChannelPolicies.load(DEFAULT_CHANNELS_FILE),
                Settings(project="bench", message_id_domain=DOMAIN, verify_message_id_every=0),
                checkpoint_in_background=False,
            )
            if paced:
                service.senders = SenderMailboxes(
                    MailboxDirectory.from_mapping(_config(["mbx1"], 6000, 2000)),
                    InMemoryMailboxLedger(),
                    lambda service=service: service.mailer,
                    lambda mailbox: GmailMailer(user=mailbox.user_id, api_endpoint=sim.url),
                )
                service.senders.set_clock(service.clock)
            services.append(service)
        for n in range(samples):
            for paced, service in enumerate(services):
                t0 = time.perf_counter()
                job, _ = service.submit(_request(f"lat-{bool(paced)}-{n}"))
                out[paced].append(time.perf_counter() - t0)
                assert job.state is State.SENT  # under budget: synchronous
    return out


def record(jobs: int, out_dir: Any) -> str:
    """Run the three benchmarks and record them: their entries (keys burst, pool, daily) replace any
    of the same keys in `out_dir`/results.json, and `out_dir`/results/<date>-pacing-simulator.md
    holds their table. Returns the table."""
    from pathlib import Path

    from .report import render_text, write_markdown

    found = benches(jobs)
    path = Path(out_dir) / "results.json"
    data = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {"benchmarks": []}
    keys = {b.key for b in found}
    data["benchmarks"] = [b for b in data.get("benchmarks", []) if b.get("key") not in keys]
    data["benchmarks"] += [{**b.as_json(), "measured_on": "simulator (fake clock)"} for b in found]
    path.write_text(json.dumps(data, indent=1, default=str) + "\n", encoding="utf-8")
    stamp = datetime.now().astimezone().date().isoformat()
    header = [
        f"Measured on the Gmail simulator (devstack/gmail_sim.py) with a fake clock: {jobs} jobs, "
        f"{CLIENTS} clients; `python -m bench.pacing --record` (bench/pacing.py says how)."
    ]
    write_markdown(Path(out_dir) / "results" / f"{stamp}-pacing-simulator.md", header, found, [])
    return render_text(found)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pacing", description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument(
        "--record", action="store_true", help="write the burst, pool and daily entries into bench/results.json"
    )
    args = parser.parse_args(argv)
    quiet_service_logs()
    if args.record:
        from .common import REPO_ROOT

        print(record(args.jobs, REPO_ROOT / "bench"))
        return 0
    out: dict[str, Any] = {}
    for key, kwargs in (
        ("burst", dict(jobs=args.jobs)),
        ("pool", dict(jobs=args.jobs, mailboxes=3)),
        ("daily", dict(jobs=args.jobs * 5 // 4, messages_per_day=2000)),
        ("daily_pool", dict(jobs=args.jobs * 5 // 4, messages_per_day=2000, mailboxes=2)),
    ):
        report = run(**kwargs)  # type: ignore[arg-type]
        out[key] = {**asdict(report), "ratio_to_physical": report.ratio_to_physical}
    plain, paced = single_send_latency()
    out["latency"] = {"unconfigured_median_s": statistics.median(plain), "paced_median_s": statistics.median(paced)}
    print(json.dumps(out, indent=2, sort_keys=True))
    return 0


# ---------------------------------------------------------------- the suite's rows (bench.suite)
def _verdict(ok: bool) -> str:
    return "ok" if ok else "MISS"


def benches(jobs: int = 2000, runs: int = 1) -> list[Any]:
    """Issue 24's three benchmarks as bench.suite rows (keys burst, pool, daily); `runs` repeats each
    scenario (the fake clock makes them deterministic but for the wall-clock latency)."""
    burst = [run(jobs=jobs) for _ in range(runs)]
    pool = [run(jobs=jobs, mailboxes=3) for _ in range(runs)]
    day = [run(jobs=jobs * 5 // 4, messages_per_day=2000) for _ in range(runs)]
    day_pool = [run(jobs=jobs * 5 // 4, messages_per_day=2000, mailboxes=2) for _ in range(runs)]
    return [_burst_bench(jobs, burst), _pool_bench(jobs, burst, pool), _daily_bench(jobs, day, day_pool)]


def _burst_bench(jobs: int, burst: list[PacingReport]) -> Any:
    from .report import Bench, Row

    plain, paced = single_send_latency()
    b = Bench("burst", "8. burst, one paced mailbox", f"{jobs} jobs from {CLIENTS} clients at 6,000 units/min")
    b.add(Row("physical limit (units admitted / rate)", samples=[r.physical_limit_s for r in burst], baseline=True))
    done = b.add(Row("completion, simulated s", samples=[r.completion_s or math.inf for r in burst]))
    done.ratio = statistics.median(r.ratio_to_physical or math.inf for r in burst)
    done.target, done.verdict = "<= 1.15x", _verdict(done.ratio <= 1.15)
    refused = b.add(
        Row("sends refused for rate, %", unit="n", samples=[100.0 * r.rate_refusals / r.jobs for r in burst])
    )
    refused.target, refused.verdict = "< 1%", _verdict(max(refused.samples) < 1.0)
    bad = [r.states.get("failed", 0) + r.review_items + r.duplicates for r in burst]
    told = b.add(Row("failed + review items + duplicates", unit="n", samples=[float(x) for x in bad]))
    told.target, told.verdict = (
        "0, every job settled",
        _verdict(all(x == 0 for x in bad) and all(r.sent == r.jobs for r in burst)),
    )
    told.check = (
        f"queued jobs told a Retry-After: {burst[0].queued_told}; worst estimate error {burst[0].retry_after_error_max}"
    )
    lat = b.add(Row("single send under budget, unconfigured", samples=plain, baseline=False))
    lat_paced = b.add(Row("single send under budget, paced mailbox", samples=paced))
    lat_paced.ratio = statistics.median(paced) / statistics.median(plain)
    lat_paced.target, lat_paced.verdict = "within noise (<= 1.25x)", _verdict(lat_paced.ratio <= 1.25)
    lat.check = "wall clock, in process, the same simulator"
    b.notes.append(
        "simulated time on a fake clock (the simulator enforces the same limits); the paced queues are "
        "played at their Cloud Tasks rate; the shared ledgers add one store read-and-commit per send"
    )

    return b


def _pool_bench(jobs: int, burst: list[PacingReport], pool: list[PacingReport]) -> Any:
    from .report import Bench, Row

    p = Bench("pool", "8. burst over a pool of 3", f"the same {jobs} jobs over 3 mailboxes")
    one = p.add(Row("one mailbox, sends/s", unit="rate", samples=[r.throughput for r in burst], baseline=True))
    three = p.add(Row("pool of 3, sends/s", unit="rate", samples=[r.throughput for r in pool]))
    three.ratio = statistics.median(three.samples) / statistics.median(one.samples)
    three.target, three.verdict = ">= 2.8x", _verdict(three.ratio >= 2.8)
    shares = pool[0].shares
    spread = (max(shares.values()) - min(shares.values())) / max(min(shares.values()), 1)
    even = p.add(Row("largest share over smallest - 1, %", unit="n", samples=[100.0 * spread]))
    even.target, even.verdict, even.check = "<= 10%", _verdict(spread <= 0.10), json.dumps(shares)

    return p


def _daily_bench(jobs: int, day: list[PacingReport], day_pool: list[PacingReport]) -> Any:
    from .report import Bench, Row

    d = Bench("daily", "8. a day past the daily limit", f"{jobs * 5 // 4} jobs against 2,000 a day")
    allowance = math.floor(2000 * SAFETY_SHARE)
    today = d.add(Row("sent the first day, one mailbox", unit="n", samples=[float(r.sent_first_day) for r in day]))
    today.target, today.verdict = f"<= {allowance} (the safety share)", _verdict(max(today.samples) <= allowance)
    daily = d.add(
        Row(
            "sends refused for the daily limit",
            unit="n",
            samples=[float(r.gmail_refusals.get("daily", 0)) for r in day],
        )
    )
    daily.target, daily.verdict = "0", _verdict(max(daily.samples) == 0)
    honest = d.add(
        Row(
            "worst Retry-After error, % of the wait",
            unit="n",
            samples=[100.0 * (r.retry_after_error_max or 0.0) for r in day],
        )
    )
    honest.target, honest.verdict = "<= 10%", _verdict(max(honest.samples) <= 10.0)
    later = d.add(Row("sent once the window allowed (fake clock)", unit="n", samples=[float(r.sent) for r in day]))
    later.target, later.verdict = (
        f"all {jobs * 5 // 4}",
        _verdict(all(r.sent == r.jobs and r.duplicates == 0 for r in day)),
    )
    pooled = d.add(Row("sent the first day, pool of 2", unit="n", samples=[float(r.sent_first_day) for r in day_pool]))
    pooled.target, pooled.verdict = f"all {jobs * 5 // 4}", _verdict(all(r.sent_first_day == r.jobs for r in day_pool))
    return d


if __name__ == "__main__":
    sys.exit(main())
