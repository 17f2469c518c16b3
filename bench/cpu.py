"""3. Request-path CPU: parse_send_request + build_mime vs json.loads of the same body.

A: parse_send_request(dict) + build_mime(...) for the typical request (text + html, 2 to + 1 cc):
   the CPU safesend adds to a send request before any I/O.
B: json.loads(body) of the same request body, the baseline every JSON endpoint pays.

timeit-style: after calibration, `repeats` timed batches of `loops` calls per variant,
interleaved batch by batch; one sample is the mean time per call in one batch (gc stays on).
Memory: tracemalloc peak of one call (after warm-up), measured apart from the timings.
"""

from __future__ import annotations

import json
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

from safesend.core.keys import job_id_for, message_id_for
from safesend.core.mime import build_mime
from safesend.core.validation import parse_send_request

from .common import CHANNELS, CREATED_AT, DOMAIN, SENDER, Budget, typical_body
from .results import Comparison, Variant, fmt_time

TARGET_BATCH_S = 0.05  # calibrate `loops` so one batch of the slower variant takes about this long


def _batch(fn: Callable[[], Any], loops: int) -> float:
    start = time.perf_counter()
    for _ in range(loops):
        fn()
    return (time.perf_counter() - start) / loops


def _peak_bytes(fn: Callable[[], Any]) -> int:
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base, _ = tracemalloc.get_traced_memory()
        fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak - base


Work = list[tuple[Variant, Callable[[], Any]]]


def run(repeats: int, budget_s: float) -> Comparison:
    a = Variant("parse_send_request + build_mime")
    b = Variant("json.loads(body) alone")
    comp = Comparison("cpu", "3. request-path CPU", "mean of one timed batch", "ops/s", a, b)

    body_dict = typical_body()
    body_text = json.dumps(body_dict)
    key = body_dict["dedup_key"]
    message_id, job_id = message_id_for(key, DOMAIN), job_id_for(key)

    def request_path() -> bytes:
        request = parse_send_request(body_dict, SENDER, CHANNELS)
        return build_mime(request.message, message_id, job_id, CREATED_AT)

    def baseline() -> Any:
        return json.loads(body_text)

    def parse_only() -> Any:
        return parse_send_request(body_dict, SENDER, CHANNELS)

    raw = request_path()
    _check(comp, body_dict, body_text, raw, message_id, baseline)
    sides: Work = [(a, request_path), (b, baseline)]
    # Diagnostic, interleaved but not in the table (see the notes): A's validation part alone.
    parse_part = Variant("parse_send_request alone")
    extra: Work = [(parse_part, parse_only)]
    loops = _calibrate(sides + extra)
    _batches(comp, sides, extra, loops, repeats, Budget(budget_s))
    for variant, fn in sides:
        variant.mem_bytes = float(_peak_bytes(fn))
        variant.check = f"{loops[variant.name]:,} calls/batch; memory = tracemalloc peak of 1 call"
    if parse_part.n:
        comp.notes.append(
            f"cpu: of A's median {fmt_time(a.median)}, parse_send_request alone takes "
            f"{fmt_time(parse_part.median)} (measured interleaved); build_mime is the rest"
        )
    a.check = f"{len(raw):,} B of MIME, 3 recipients; " + a.check
    b.check = f"{len(body_text):,} B of JSON; " + b.check
    return comp


def _check(
    comp: Comparison,
    body_dict: dict[str, Any],
    body_text: str,
    raw: bytes,
    message_id: str,
    baseline: Callable[[], Any],
) -> None:
    """Correctness: the request validates, has its 3 recipients, and the MIME keeps our Message-ID."""
    parsed = parse_send_request(json.loads(body_text), SENDER, CHANNELS)
    recipients = len(parsed.message.to) + len(parsed.message.cc)
    if recipients != 3:
        comp.failures.append(f"typical request has {recipients} recipients, expected 3")
    if f"Message-ID: {message_id}\r\n".encode() not in raw or b"text/html" not in raw:
        comp.failures.append("build_mime output lacks the Message-ID or the html part")
    if baseline() != body_dict:
        comp.failures.append("json.loads round trip differs")


def _calibrate(work: Work) -> dict[str, int]:
    """After a warm-up (regex caches, email package imports): loops per batch for each variant."""
    for _, fn in work:
        _batch(fn, 50)
    loops = {}
    for variant, fn in work:
        per_call = _batch(fn, 200)
        loops[variant.name] = max(10, min(200_000, int(TARGET_BATCH_S / max(per_call, 1e-9))))
    return loops


def _batches(comp: Comparison, sides: Work, extra: Work, loops: dict[str, int], repeats: int, budget: Budget) -> None:
    """`repeats` timed batches per variant, the two sides alternating in order, the diagnostic last."""
    for r in range(repeats):
        if r and budget.exhausted:
            comp.notes.append(f"cpu: time budget {budget.seconds:.0f} s reached after {r} batches (asked {repeats})")
            break
        order = (sides if r % 2 == 0 else sides[::-1]) + extra
        for variant, fn in order:
            n = loops[variant.name]
            start = time.perf_counter()
            per_call = _batch(fn, n)
            variant.busy_s += time.perf_counter() - start
            variant.ops += n
            variant.latencies.append(per_call)
