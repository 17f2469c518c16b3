"""7. Cold start: spawn functions-framework and time until the first answer, safesend vs hello world.

safesend: `--source functions/main.py --target status` (as deployed: the real entry module, THREADS
unset) with the stack's environment (emulators, simulator, auth disabled); the first request is
GET ?job_id=... (404: no such job), which builds the runtime (Google client imports, settings,
Firestore client) and reads Firestore once. hello: bench/hello/main.py, functions-framework only.
Per run, per variant: spawn -> the port accepts TCP ("listening": main.py is imported before
gunicorn binds) -> first HTTP answer; then one more request (warm). Runs interleave, order rotated.
"""

from __future__ import annotations

import socket
import time
from typing import Any

from .common import Budget, progress
from .report import Bench, Row, fmt_s, median
from .stackctl import REPO_ROOT, LocalStack, functions_process, wait_http

START_TIMEOUT_S = 60.0
PROBE = "?job_id=" + "0" * 32  # a well-formed job id that does not exist: safesend reads Firestore, answers 404


def _listening(port: int, timeout_s: float) -> float | None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return time.monotonic()
        except OSError:
            time.sleep(0.005)
    return None


def _one(stack: LocalStack, source: Any, target: str, name: str) -> dict[str, Any]:
    proc, url = functions_process(stack, source, target, None, name)
    port = int(url.rsplit(":", 1)[1])
    start = time.monotonic()
    proc.start()
    try:
        listening = _listening(port, START_TIMEOUT_S)
        if listening is None:
            raise RuntimeError(f"{name} did not listen within {START_TIMEOUT_S:.0f} s; log {proc.log_path}")
        answer: dict[str, Any] = {}
        first = wait_http(f"{url}/{PROBE}", START_TIMEOUT_S, interval_s=0.005, answer=answer)
        if first is None:
            raise RuntimeError(f"{name} did not answer within {START_TIMEOUT_S:.0f} s; log {proc.log_path}")
        warm_start = time.monotonic()
        wait_http(f"{url}/{PROBE}", 10)
        warm = time.monotonic() - warm_start
    finally:
        proc.stop()
    return {
        "listening": listening - start,
        "first": first - start,
        "request": first - listening,
        "warm": warm,
        "status": answer.get("status"),
        "not_found": '"not_found"' in answer.get("body", ""),
    }


def run(stack: LocalStack, runs: int, budget_s: float) -> Bench:
    bench = Bench("coldstart", "7. cold start", "spawn -> first HTTP answer")
    hello = bench.add(Row("hello world: first answer", baseline=True))
    ours = bench.add(Row("safesend main.py: first answer"))
    ours_listen = bench.add(Row("  of which: listening (imports)"))
    ours_request = bench.add(Row("  of which: first request"))
    variants = [
        ("hello", REPO_ROOT / "bench" / "hello" / "main.py", "hello"),
        ("safesend", REPO_ROOT / "functions" / "main.py", "status"),
    ]
    seen: dict[str, list[dict[str, Any]]] = {"hello": [], "safesend": []}
    budget = Budget(budget_s)
    for r in range(runs):
        if r and budget.exhausted:
            bench.notes.append(f"time budget reached after {r} runs (asked {runs})")
            break
        k = r % 2
        got: dict[str, dict[str, Any]] = {}
        for label, source, target in variants[k:] + variants[:k]:
            got[label] = _one(stack, source, target, f"cold-{label}-{r}")
            seen[label].append(got[label])
        hello.samples.append(got["hello"]["first"])
        ours.samples.append(got["safesend"]["first"])
        ours.pairs.append(got["safesend"]["first"] / got["hello"]["first"])
        ours_listen.samples.append(got["safesend"]["listening"])
        ours_request.samples.append(got["safesend"]["request"])
        progress(
            f"cold start run {r + 1}/{runs}: hello {got['hello']['first']:.2f} s, "
            f"safesend {got['safesend']['first']:.2f} s"
        )
    bench.finish()
    h, s = seen["hello"], seen["safesend"]
    if h and s:
        hello.check = (
            f"listening {fmt_s(median([x['listening'] for x in h]))}, "
            f"warm request {fmt_s(median([x['warm'] for x in h]))}"
        )
        ours.check = f"warm request {fmt_s(median([x['warm'] for x in s]))}"
        hello.check += f"; answers {sorted({x['status'] for x in h})}"
        ours.check += f"; answers {sorted({x['status'] for x in s})} (404 = safesend's not_found)"
        if any(x["status"] != 200 for x in h) or any(x["status"] != 404 or not x["not_found"] for x in s):
            bench.failures.append(
                "unexpected first answers: hello "
                + str([x["status"] for x in h])
                + ", safesend "
                + str([x["status"] for x in s])
            )
        ours_request.check = "runtime build (Google client imports) + 1 Firestore read"
        ours_listen.check = "python + functions-framework + main.py import"
        extra = median(ours.samples) - median(hello.samples)
        bench.notes.append(
            f"safesend's first answer comes {fmt_s(extra)} after hello world's; its first request alone takes "
            f"{fmt_s(median(ours_request.samples))}: `runtime.get_runtime()` builds adapters lazily on the first "
            f"request (google-cloud-firestore, googleapiclient, tasks, pubsub imports, the Firestore client) "
            f"and reads Firestore. Cloud Functions min instances (`send_min_instances`) hide it; importing the "
            f"clients at module level would move it into the start-up, not remove it. No target in the issue."
        )
    return bench
