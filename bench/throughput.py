"""4. Throughput: `jobs` distinct jobs by `clients` concurrent clients through one local instance,
vs the same number of direct messages.send calls at the same concurrency.

Gmail latency: every simulator answer (send, list, get) is held LATENCY_S, as in benchmark 1.
Direct: `clients` threads, each with its own googleapiclient service (stock httplib2 keep-alive),
through the same relay. safesend: `clients` threads, each with a keep-alive requests.Session,
POST /send, a new dedup key per job. Two instances are measured, both functions-framework (gunicorn
gthread, 1 worker):
  - the stack's: devstack/stack.py sets THREADS=16;
  - "as deployed": functions/main.py --target send with THREADS unset, i.e. functions-framework's
    default os.cpu_count() * 4 (infra/ sets no THREADS).
A diagnostic variant repeats the stack's instance with list/get answered at once (sends still
at LATENCY_S): what the Message-ID verification read costs in throughput.
One sample = one run's jobs / wall time (barrier release to the last answer). Runs are
interleaved, order rotated; pairs are safesend_run / direct_run of the same round.
CPU: user + system seconds of the instance's process tree during the run, per job.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import requests

from safesend.core.mime import encode_raw

from .common import Budget, direct_gmail_client, progress, raw_for
from .report import Bench, Row, fmt_s, median
from .stackctl import REPO_ROOT, STACK_THREADS, LocalStack, functions_process, proc_tree_cpu_s, send_body, wait_http

LATENCY_S = 0.3
TARGET = 0.9
JOIN_TIMEOUT_S = 180.0


ERRORS: Counter[str] = Counter()


def _run_round(jobs: int, clients: int, work: Callable[[int, int], bool]) -> tuple[float, int, list[float]]:
    """`clients` threads pull job indexes 0..jobs-1; (wall seconds, failures, per-call latencies)."""
    barrier = threading.Barrier(clients + 1)
    lock = threading.Lock()
    next_index = [0]
    failures = [0]
    latencies: list[float] = []

    def worker(slot: int) -> None:
        try:
            barrier.wait(timeout=30)
        except threading.BrokenBarrierError:
            return
        while True:
            with lock:
                index = next_index[0]
                next_index[0] += 1
            if index >= jobs:
                return
            start = time.perf_counter()
            try:
                ok = work(slot, index)
            except Exception as exc:  # noqa: BLE001 - counted as a failure, kinds reported in the notes
                ok = False
                with lock:
                    ERRORS[f"{type(exc).__name__}: {exc}"[:160]] += 1
            elapsed = time.perf_counter() - start
            with lock:
                latencies.append(elapsed)
                if not ok:
                    failures[0] += 1

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    barrier.wait(timeout=30)
    start = time.perf_counter()
    deadline = time.monotonic() + JOIN_TIMEOUT_S
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    wall = time.perf_counter() - start
    hung = sum(1 for t in threads if t.is_alive())
    return wall, failures[0] + hung + max(0, jobs - len(latencies)), latencies


def _drop_idle_connections(https: list[Any], sessions: list[requests.Session]) -> None:
    """Untimed, before each round: keep-alive connections idle longer than the relay's (15 s) or
    gunicorn's (2 s) keep-alive timeout are closed on the other side; reopen them cleanly."""
    for http in https:
        http.close()
    for session in sessions:
        for adapter in session.adapters.values():
            adapter.close()


Side = tuple[Row, Callable[[int, int], bool], int | None]  # row, one job (slot, index), instance pid


class _Clients:
    """`clients` keep-alive clients of each kind (a Gmail API client, a requests.Session) and what
    their calls left behind for the checks."""

    def __init__(self, relay_url: str, clients: int):
        pairs = [direct_gmail_client(relay_url, 60) for _ in range(clients)]
        self.services = [service for service, _ in pairs]
        self.https = [http for _, http in pairs]
        self.sessions = [requests.Session() for _ in range(clients)]
        self.tag = uuid.uuid4().hex[:8]
        self.round_no = 0
        self.told: list[str] = []
        self.ours_ids: list[str] = []
        self.states: Counter[str] = Counter()
        self.lock = threading.Lock()

    def direct(self, slot: int, index: int) -> bool:
        raw, message_id = raw_for(f"bench-tp-direct:{self.tag}:{self.round_no}:{index}")
        message = self.services[slot].users().messages().send(userId="me", body={"raw": encode_raw(raw)})
        answer = message.execute(num_retries=0)
        with self.lock:
            self.told.append(message_id)
        return bool(answer.get("id"))

    def via(self, url: str, label: str) -> Callable[[int, int], bool]:
        def send(slot: int, index: int) -> bool:
            body = send_body(f"bench-tp-{label}:{self.tag}:{self.round_no}:{index}")
            response = self.sessions[slot].post(url, json=body, timeout=60)
            view = response.json()
            with self.lock:
                self.states[f"{label}:{response.status_code}:{view.get('state')}"] += 1
                if view.get("message_id"):
                    self.ours_ids.append(view["message_id"])
            return response.status_code == 200 and view.get("state") == "sent"

        return send

    def fresh_connections(self) -> None:
        _drop_idle_connections(self.https, self.sessions)

    def close(self) -> None:
        for session in self.sessions:
            session.close()


@dataclass
class _Samples:
    """Per row (by id): the median call latency of each run and the instance CPU per job."""

    busy: dict[int, list[float]] = field(default_factory=dict)
    cpu: dict[int, list[float]] = field(default_factory=dict)


def run(stack: LocalStack, jobs: int, clients: int, runs: int, budget_s: float, deployed: bool = True) -> Bench:
    sim, relay = stack.sim, stack.relay
    assert sim is not None and relay is not None and stack.functions is not None
    default_threads = (os.cpu_count() or 1) * 4
    bench = Bench(
        "throughput",
        f"4. throughput, {jobs} jobs x {clients} clients",
        f"one run: {jobs} jobs / wall time, Gmail {LATENCY_S * 1000:.0f} ms",
    )
    base = bench.add(Row("direct messages.send", unit="rate", baseline=True))
    ours = bench.add(Row(f"safesend, THREADS={STACK_THREADS} (stack)", unit="rate"))
    calls = _Clients(relay.url, clients)
    proc = None
    try:
        sides: list[Side] = [
            (base, calls.direct, None),
            (ours, calls.via(f"{stack.url}/send", "stack"), stack.functions.pid),
        ]
        if deployed:
            proc, url = _deployed_instance(stack)
            dep = bench.add(Row(f"safesend, THREADS unset (= {default_threads}, as deployed)", unit="rate"))
            sides.append((dep, calls.via(url, "deployed"), proc.pid))
        reads0 = bench.add(Row(f"  THREADS={STACK_THREADS}, list/get at 0 ms", unit="rate"))
        sides.append((reads0, calls.via(f"{stack.url}/send", "stack-reads0"), stack.functions.pid))
        read_latency = {id(reads0): 0.0}
        for row, work, _ in sides:  # warm-up: connections, gRPC channels, imports in the workers
            sim.set_latency(LATENCY_S, read_latency.get(id(row)))
            calls.fresh_connections()
            _run_round(min(jobs, clients * 2), clients, work)
        samples = _rounds(bench, sim, calls, sides, read_latency, jobs, clients, runs, Budget(budget_s))
        bench.finish()
        _judge(sides, base, reads0, samples)
        call_p50 = {key: median(values) for key, values in samples.busy.items()}
        _explain(bench, base, sides, samples.cpu, default_threads, clients, call_p50)
    finally:
        sim.set_latency(0.0)
        calls.close()
        if proc is not None:
            proc.stop()
    _check_effects(bench, sim, calls)
    return bench


def _deployed_instance(stack: LocalStack) -> tuple[Any, str]:
    """functions/main.py --target send as deployed (THREADS unset), started and answering."""
    proc, url = functions_process(stack, REPO_ROOT / "functions" / "main.py", "send", None, "functions-deployed")
    proc.start()
    if wait_http(f"{url}/", timeout_s=60) is None:
        proc.stop()
        raise RuntimeError(f"the as-deployed instance did not answer; log {proc.log_path}")
    return proc, url


def _rounds(
    bench: Bench,
    sim: Any,
    calls: _Clients,
    sides: list[Side],
    read_latency: dict[int, float],
    jobs: int,
    clients: int,
    runs: int,
    budget: Budget,
) -> _Samples:
    """`runs` rounds of every side (order rotated): `jobs` jobs by `clients` clients each."""
    samples = _Samples({id(row): [] for row, _, _ in sides}, {id(row): [] for row, _, _ in sides})
    for r in range(runs):
        if r and budget.exhausted:
            bench.notes.append(f"time budget reached after {r} runs (asked {runs})")
            break
        k = r % len(sides)
        walls: dict[int, float] = {}
        for row, work, pid in sides[k:] + sides[:k]:
            sim.set_latency(LATENCY_S, read_latency.get(id(row)))
            calls.fresh_connections()
            calls.round_no += 1
            cpu0 = proc_tree_cpu_s(pid)
            wall, failures, lat = _run_round(jobs, clients, work)
            samples.cpu[id(row)].append((proc_tree_cpu_s(pid) - cpu0) / jobs if pid else 0.0)
            walls[id(row)] = wall
            row.samples.append(jobs / wall)
            samples.busy[id(row)].append(median(lat) if lat else float("nan"))
            if failures:
                bench.failures.append(f"{row.variant} run {r + 1}: {failures} of {jobs} jobs failed")
            progress(
                f"throughput run {r + 1}/{runs} {row.variant}: {jobs / wall:.1f} jobs/s "
                f"({wall:.1f} s, {failures} failed)"
            )
        base = sides[0][0]
        for row, _, _ in sides[1:]:
            row.pairs.append(walls[id(base)] / walls[id(row)])
    return samples


def _judge(sides: list[Side], base: Row, reads0: Row, samples: _Samples) -> None:
    for row, _, pid in sides:
        row.check = f"call p50 {fmt_s(median(samples.busy[id(row)]))}"
        if pid:
            row.check += f", instance CPU {median(samples.cpu[id(row)]) * 1e3:.0f} ms/job"
        if row is reads0:
            row.check += "; diagnostic: verification read made free"
        elif row is not base:
            row.target = f">= x{TARGET}"
            row.verdict = "ok" if row.ratio is not None and row.ratio >= TARGET else "MISS"


def _check_effects(bench: Bench, sim: Any, calls: _Clients) -> None:
    """Every send, direct or through safesend, is exactly one message at the simulator."""
    effects = Counter(e["message_id"] for e in sim.effects())
    bad = sum(1 for m in calls.told if effects[m] != 1) + sum(1 for m in calls.ours_ids if effects[m] != 1)
    if bad:
        bench.failures.append(f"{bad} sends without exactly one effect")
    if ERRORS:
        bench.notes.append(f"exceptions: {dict(ERRORS.most_common(3))}")
    not_sent = {k: v for k, v in calls.states.items() if not k.endswith(":200:sent")}
    if not_sent:
        bench.notes.append(f"answers other than 200 sent: {not_sent}")


def _explain(
    bench: Bench,
    base: Row,
    sides: list,
    cpu: dict[int, list[float]],
    default_threads: int,
    clients: int,
    call_p50: dict[int, float],
) -> None:
    misses = [row for row, _, _ in sides if row.verdict == "MISS"]
    if not misses:
        return
    stack_row = sides[1][0]
    reads0 = sides[-1][0]
    text = (
        f"with every client busy, throughput is concurrency / time per call: a safesend call takes "
        f"{fmt_s(call_p50[id(stack_row)])} (p50) against {fmt_s(call_p50[id(base)])} for a direct send, because "
        f"it waits on the Gmail send ({LATENCY_S * 1000:.0f} ms), plus two Firestore writes and the HTTP hop "
        f"(the Message-ID read-back runs on an instance's first send and then 1 in 100)"
    )
    cpus = [median(cpu[id(row)]) for row, _, pid in sides if pid]
    if cpus:
        text += (
            f"; the instance spends about {median(cpus) * 1e3:.0f} ms CPU per job in one Python process "
            f"(GIL), so CPU is not the limit at this rate"
        )
    if default_threads < clients:
        text += (
            f". As deployed (THREADS unset) gunicorn runs os.cpu_count() * 4 = {default_threads} threads on "
            f"this machine, so only {default_threads} of the {clients} clients are served at a time and the "
            f"rest queue"
        )
    text += (
        ". In production each Cloud Functions instance takes one request at a time "
        "(max_instance_request_concurrency = 1) and concurrent clients fan out over up to send_max_instances "
        "instances, so this single-instance figure is a floor: the limit here is the thread count, not "
        "safesend's work"
    )
    if reads0.ratio is not None:
        text += (
            f"; with THREADS=16 the same instance reaches x{stack_row.ratio:.2f}" if stack_row.ratio is not None else ""
        )
    text += "."
    bench.findings.append(text)
