"""7. Cold start: spawn functions-framework and time until the first answer, safesend vs hello world.

safesend: `--source functions/main.py --target status` (as deployed: the real entry module, THREADS
unset) with the stack's environment (emulators, simulator, auth disabled); the first request is
GET ?job_id=... (404: no such job), which builds the runtime (settings, the Firestore client; the
Gmail adapter and the Tasks and Pub/Sub clients wait for their first call) and reads Firestore once.
hello: bench/hello/main.py, functions-framework only.
Per run, per variant: spawn -> the port accepts TCP ("listening": main.py is imported before
gunicorn binds) -> first HTTP answer; then one more request (warm). Runs interleave, order rotated.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from typing import Any

from .common import Budget, progress
from .report import Bench, Row, fmt_s, median
from .stackctl import REPO_ROOT, LocalStack, functions_process, wait_http

START_TIMEOUT_S = 60.0
TARGET_RATIO = 2.0  # issue 12: first answer of a fresh instance <= 2x a hello-world function, same run
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
    rows = _Rows(
        hello=bench.add(Row("hello world: first answer", baseline=True)),
        ours=bench.add(Row("safesend main.py: first answer")),
        listen=bench.add(Row("  of which: listening (imports)")),
        request=bench.add(Row("  of which: first request")),
    )
    seen = _rounds(stack, runs, Budget(budget_s), rows, bench)
    bench.finish()
    if seen["hello"] and seen["safesend"]:
        _check_answers(bench, rows, seen)
        _judge(bench, rows)
    return bench


@dataclass
class _Rows:
    hello: Row
    ours: Row
    listen: Row
    request: Row


def _rounds(stack: LocalStack, runs: int, budget: Budget, rows: _Rows, bench: Bench) -> dict[str, list[dict[str, Any]]]:
    """`runs` rounds, each spawning both (order alternating); the samples go to `rows`."""
    variants = [
        ("hello", REPO_ROOT / "bench" / "hello" / "main.py", "hello"),
        ("safesend", REPO_ROOT / "functions" / "main.py", "status"),
    ]
    seen: dict[str, list[dict[str, Any]]] = {"hello": [], "safesend": []}
    for r in range(runs):
        if r and budget.exhausted:
            bench.notes.append(f"time budget reached after {r} runs (asked {runs})")
            break
        k = r % 2
        got: dict[str, dict[str, Any]] = {}
        for label, source, target in variants[k:] + variants[:k]:
            got[label] = _one(stack, source, target, f"cold-{label}-{r}")
            seen[label].append(got[label])
        rows.hello.samples.append(got["hello"]["first"])
        rows.ours.samples.append(got["safesend"]["first"])
        rows.ours.pairs.append(got["safesend"]["first"] / got["hello"]["first"])
        rows.listen.samples.append(got["safesend"]["listening"])
        rows.request.samples.append(got["safesend"]["request"])
        progress(
            f"cold start run {r + 1}/{runs}: hello {got['hello']['first']:.2f} s, "
            f"safesend {got['safesend']['first']:.2f} s"
        )
    return seen


def _check_answers(bench: Bench, rows: _Rows, seen: dict[str, list[dict[str, Any]]]) -> None:
    h, s = seen["hello"], seen["safesend"]
    rows.hello.check = (
        f"listening {fmt_s(median([x['listening'] for x in h]))}, warm request {fmt_s(median([x['warm'] for x in h]))}"
        f"; answers {sorted({x['status'] for x in h})}"
    )
    rows.ours.check = (
        f"warm request {fmt_s(median([x['warm'] for x in s]))}; answers {sorted({x['status'] for x in s})} "
        f"(404 = safesend's not_found)"
    )
    if any(x["status"] != 200 for x in h) or any(x["status"] != 404 or not x["not_found"] for x in s):
        bench.failures.append(
            f"unexpected first answers: hello {[x['status'] for x in h]}, safesend {[x['status'] for x in s]}"
        )
    rows.request.check = "runtime build (the Firestore client's import) + 1 Firestore read; no Gmail client"
    rows.listen.check = "python + functions-framework + main.py import"


def _judge(bench: Bench, rows: _Rows) -> None:
    ours = rows.ours
    ours.target = f"<= x{TARGET_RATIO:g}"
    ours.verdict = "ok" if ours.ratio is not None and ours.ratio <= TARGET_RATIO else "MISS"
    extra = ours.median - rows.hello.median
    bench.notes.append(
        f"safesend's first answer comes {fmt_s(extra)} after hello world's; its first request alone takes "
        f"{fmt_s(rows.request.median)}. What the first request does: build the runtime (settings, channel policies, "
        f"the Firestore client: google-cloud-firestore with grpc and protobuf, ~130-200 ms of imports here) and read "
        f"one document. What it no longer does (issue 12): import googleapiclient, httplib2, the Cloud Tasks and "
        f"Pub/Sub clients, google.auth.jwt, or look up Gmail credentials; runtime.LazyMailer builds the Gmail "
        f"adapter on the first Gmail call, the Tasks and Pub/Sub clients on their first use "
        f"(tests/unit/test_lazy_mailer.py keeps them out of main.py's import and of a built runtime)."
    )
    bench.notes.append(
        "min instances: `min_instance_count = 1` (infra: variable `send_min_instances`, the send function only) "
        "keeps one instance started: no cold start on the first request after an idle period; the cost is that "
        "instance, allocated and billed at the idle rate around the clock whether or not it serves anything. "
        "Importing the clients at module level would move the import into the start-up, not remove it."
    )
    if ours.verdict == "MISS":
        bench.findings.append(
            f"first answer x{ours.ratio:.2f} hello world's (target x{TARGET_RATIO:g}): what is left is the Firestore "
            f"client's import (grpc, protobuf, google-auth) and its first read, which the status request needs. "
            f"Cutting further means reading the job without the gRPC client (Firestore's REST API for status) or "
            f"keeping an instance warm (`send_min_instances`)."
        )
