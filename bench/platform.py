"""8. The deployed platform: per-instance throughput, p95 latency and cold start on a Cloud Run CPU share.

Each function (send, status, reconcile) runs as deployed (`functions/main.py --target <fn>`, the
stack's environment) in a cgroup limited to a CPU share of one core (bench/cpushare.py: taskset +
a CFS quota, as Cloud Run enforces `available_cpu`), THREADS = the instance concurrency being
measured (what `max_instance_request_concurrency` lets one instance take). For each share and each
concurrency c in CONCURRENCIES: c clients, each sending requests back to back to the one instance;
throughput = requests / wall time, p95 of the latencies (nearest rank). Gmail answers sends after
GMAIL_SEND_S and reads after GMAIL_READ_S (the simulator's latency), so concurrency has I/O to
overlap, as deployed. The cold start (spawn -> first answer, as bench 7, hello world in the same
cgroup as the baseline) is measured at every share.

Requests: send, a new dedup key each (200 sent); status, a job sent before (200); reconcile, POST
{"job_id"} of a job sent before (200, nothing due: one read of the job).
"""

from __future__ import annotations

import json
import math
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .coldstart import MAIN, PROBE, _answer, _listening
from .common import Budget, progress
from .cpushare import SHARES, CpuShare, cpu_share, throttled_us
from .report import Bench, Row, fmt_s
from .stackctl import REPO_ROOT, LocalStack, functions_process, send_body, wait_http

FUNCTIONS = ("send", "status", "reconcile")
CONCURRENCIES = (1, 4, 8, 16)
GMAIL_SEND_S = 0.3  # bench 1's Gmail latency
GMAIL_READ_S = 0.05
START_TIMEOUT_S = 90.0
REQUEST_TIMEOUT_S = 60.0


@dataclass
class Load:
    """One instance at one share and concurrency: what its clients saw."""

    function: str
    share: float
    concurrency: int
    latencies: list[float] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)
    wall_s: float = 0.0
    throttled_s: float = 0.0

    @property
    def throughput(self) -> float:
        return len(self.latencies) / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def p95(self) -> float:
        return p95(self.latencies)


def p95(values: Sequence[float]) -> float:
    """Nearest-rank 95th percentile (the report's convention); nan for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def requests_for(concurrency: int) -> int:
    """Requests per load: enough for a p95 (>= 20) and a few rounds of every client."""
    return max(24, 4 * concurrency)


def _request(function: str, url: str, sent: Sequence[str]) -> tuple[str, dict[str, Any] | None]:
    if function == "send":
        return f"{url}/", send_body(f"bench-platform:{uuid.uuid4().hex}")
    job_id = sent[hash(uuid.uuid4()) % len(sent)]
    if function == "status":
        return f"{url}/?job_id={job_id}", None
    return f"{url}/", {"job_id": job_id}


def drive(load: Load, call: Callable[[], tuple[float, int]], total: int) -> None:
    """`load.concurrency` client threads call `call` until `total` calls are made; bounded by count and
    REQUEST_TIMEOUT_S per call (the HTTP client's timeout)."""
    lock = threading.Lock()
    left = [total]

    def client() -> None:
        while True:
            with lock:
                if left[0] <= 0:
                    return
                left[0] -= 1
            seconds, status = call()
            with lock:
                load.latencies.append(seconds)
                load.statuses[status] = load.statuses.get(status, 0) + 1

    threads = [threading.Thread(target=client, daemon=True) for _ in range(load.concurrency)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(REQUEST_TIMEOUT_S * total)
    load.wall_s = time.monotonic() - start


def _measure_load(stack: LocalStack, cpu: CpuShare, function: str, concurrency: int, sent: Sequence[str]) -> Load:
    name = f"platform-{function}-{cpu.share:g}-c{concurrency}"
    proc, url = functions_process(stack, MAIN, function, concurrency, name, cpu=cpu)
    proc.start()
    try:
        if wait_http(f"{url}/{PROBE}", timeout_s=START_TIMEOUT_S) is None:
            raise RuntimeError(f"{name} did not answer within {START_TIMEOUT_S:.0f} s; log {proc.log_path}")
        for _ in range(2):  # warm: runtime built, Gmail client built, connections open
            _answer(*_request(function, url, sent), REQUEST_TIMEOUT_S)
        load = Load(function, cpu.share, concurrency)
        before = throttled_us(cpu)

        def call() -> tuple[float, int]:
            t0 = time.monotonic()
            got = _answer(*_request(function, url, sent), REQUEST_TIMEOUT_S)
            return time.monotonic() - t0, got[1] if got else 0

        drive(load, call, requests_for(concurrency))
        load.throttled_s = max(0, throttled_us(cpu) - before) / 1e6
        return load
    finally:
        proc.stop()


def _cold(stack: LocalStack, cpu: CpuShare, label: str, sent: Sequence[str], r: int) -> float:
    """Spawn -> first answer of one fresh instance on `cpu` (hello: bench/hello; else functions/main.py)."""
    source, target = (REPO_ROOT / "bench" / "hello" / "main.py", "hello") if label == "hello" else (MAIN, label)
    proc, url = functions_process(stack, source, target, None, f"platform-cold-{label}-{cpu.share:g}-{r}", cpu=cpu)
    port = int(url.rsplit(":", 1)[1])
    start = time.monotonic()
    proc.start()
    try:
        if _listening(port, START_TIMEOUT_S) is None:
            raise RuntimeError(f"{label} did not listen; log {proc.log_path}")
        request = (f"{url}/", None) if label == "hello" else _request(label, url, sent)
        got = _answer(*request, START_TIMEOUT_S)
        if got is None or got[1] != 200:
            raise RuntimeError(f"{label} first answer {got[1] if got else None}; log {proc.log_path}")
        return got[0] - start
    finally:
        proc.stop()


def _seed(stack: LocalStack, n: int) -> list[str]:
    """Jobs sent through the stack's instance: what status and reconcile read."""
    ids = []
    for i in range(n):
        got = _answer(f"{stack.url}/send", send_body(f"bench-platform:seed:{i}:{uuid.uuid4().hex[:8]}"), 30)
        if got is None or got[1] != 200:
            raise RuntimeError(f"seeding a job through the stack failed: {got}")
        ids.append(str(_job_id(got[2])))
    return ids


def _job_id(body: str) -> str:
    return str(json.loads(body)["job_id"])


def run(
    stack: LocalStack,
    runs: int,
    budget_s: float,
    shares: Sequence[float] = SHARES,
    concurrencies: Sequence[int] = CONCURRENCIES,
    functions: Sequence[str] = FUNCTIONS,
) -> Bench:
    bench = Bench("platform", "8. platform", "per instance, on a CPU share")
    budget = Budget(budget_s)
    sim = stack.sim
    if sim is None:
        raise RuntimeError("the platform benchmark needs the stack's Gmail simulator")
    sent = _seed(stack, 8)
    sim.set_latency(GMAIL_SEND_S, GMAIL_READ_S)
    try:
        for share in shares:
            with cpu_share(share, f"s{share:g}") as cpu:
                bench.notes.append(f"CPU share {cpu.describe()}")
                _cold_rows(bench, stack, cpu, functions, sent, runs, budget)
                for function in functions:
                    for c in concurrencies:
                        if budget.exhausted:
                            bench.notes.append(f"time budget reached: {function} at {share:g} vCPU, c={c} not run")
                            continue
                        load = _measure_load(stack, cpu, function, c, sent)
                        bench.add(_load_row(load))
                        bad = {s: n for s, n in load.statuses.items() if s != 200}
                        if bad:
                            bench.failures.append(f"{function} {share:g} vCPU c={c}: answers {load.statuses}")
                        progress(
                            f"platform {function} {share:g} vCPU c={c}: {load.throughput:.1f}/s, "
                            f"p95 {fmt_s(load.p95)}{' ' + str(bad) if bad else ''}"
                        )
    finally:
        sim.set_latency(0.0)
    bench.finish()
    return bench


def _cold_rows(
    bench: Bench,
    stack: LocalStack,
    cpu: CpuShare,
    functions: Sequence[str],
    sent: Sequence[str],
    runs: int,
    budget: Budget,
) -> None:
    """Cold start of hello and each function at this share, interleaved, order rotated."""
    labels = ["hello", *functions]
    rows = {label: Row(f"{cpu.label} cold start: {label}", baseline=label == "hello") for label in labels}
    for r in range(runs):
        if r and budget.exhausted:
            break
        k = r % len(labels)
        got = {label: _cold(stack, cpu, label, sent, r) for label in labels[k:] + labels[:k]}
        for label in labels:
            rows[label].samples.append(got[label])
            if label != "hello":
                rows[label].pairs.append(got[label] / got["hello"])
        progress(f"platform cold {cpu.label} run {r + 1}: " + ", ".join(f"{x} {got[x]:.2f} s" for x in labels))
    group = [rows[label] for label in labels]
    for row in group:
        bench.add(row)
    hello = rows["hello"]
    for row in group[1:]:
        row.ratio = row.median / hello.median if hello.samples and row.samples else math.nan
        row.check = "ratio: to hello world's first answer at the same share"
    if "send" in rows and rows["send"].samples:
        send = rows["send"]
        send.target = "<= x2"
        send.verdict = "ok" if send.ratio is not None and send.ratio <= 2.0 else "MISS"


def _load_row(load: Load) -> Row:
    row = Row(f"{load.share:g} vCPU {load.function} c={load.concurrency}", show_p95=True, ratio=math.nan)
    row.samples = list(load.latencies)
    row.detail = {"throughput": round(load.throughput, 3), "p95": round(load.p95, 6), "wall_s": load.wall_s}
    row.check = (
        f"throughput {load.throughput:.1f} req/s, p95 {fmt_s(load.p95)}, {len(load.latencies)} requests, "
        f"quota throttled {load.throttled_s * 1e3:.0f} ms, answers {dict(sorted(load.statuses.items()))}"
    )
    return row
