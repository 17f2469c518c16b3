"""Benchmark 1's Graph column (issue 22): the rows exist beside the Gmail ones, measured in the same rounds,
and safesend-through-Graph is paired with and divided by the direct sendMail, not the Gmail baseline.
The callers are stand-ins returning set durations: what is checked is the arithmetic on measurements."""

from __future__ import annotations

import math
from typing import Any

from bench import latency
from bench.report import Bench, Row

DURATIONS = {"direct": 0.30, "safesend": 0.33, "direct_graph": 0.40, "safesend_graph": 0.48}


class _StubCallers:
    """latency._Callers' surface: each side returns its set duration and is counted."""

    def __init__(self) -> None:
        self.graph: Any = object()  # a Graph side is present
        self.calls: dict[str, int] = dict.fromkeys(DURATIONS, 0)
        self.latencies: list[tuple[float, float | None]] = []

    def start(self, bench_key: str) -> None:
        self.bench_key = bench_key

    def set_latency(self, seconds: float, read_seconds: float | None = None) -> None:
        self.latencies.append((seconds, read_seconds))

    def _side(self, name: str) -> float:
        self.calls[name] += 1
        return DURATIONS[name]

    def direct(self) -> float:
        return self._side("direct")

    def safesend(self) -> float:
        return self._side("safesend")

    def direct_graph(self) -> float:
        return self._side("direct_graph")

    def safesend_graph(self) -> float:
        return self._side("safesend_graph")


def _rows(bench: Bench) -> dict[str, Row]:
    return {r.variant: r for r in bench.rows}


def test_the_graph_rows_are_measured_in_the_same_rounds_and_divided_by_the_direct_send_mail() -> None:
    callers = _StubCallers()
    bench, rows = latency._measure(None, callers, 0.05, 4, latency.Budget(60.0), with_pg=False)  # type: ignore[arg-type]
    by_name = _rows(bench)
    graph_base, on_graph = by_name["Graph: direct sendMail"], by_name["Graph: safesend /send, new job"]
    assert rows.graph_base is graph_base and rows.on_graph is on_graph
    # Same rounds: every side called WARMUP + n times, both providers' simulators told the latency.
    assert set(callers.calls.values()) == {latency.WARMUP + 4}
    assert (0.05, None) in callers.latencies
    assert graph_base.samples == [0.40] * 4 and on_graph.samples == [0.48] * 4
    assert on_graph.ratio is not None and math.isclose(on_graph.ratio, 0.48 / 0.40)
    assert all(math.isclose(p, 0.48 / 0.40) for p in on_graph.pairs) and len(on_graph.pairs) == 4
    assert graph_base.pairs == [] and graph_base.ratio is not None and math.isnan(graph_base.ratio)  # a baseline
    full = by_name["safesend /send, new job, Firestore"]
    assert full.ratio is not None and math.isclose(full.ratio, 0.33 / 0.30)  # the Gmail column is untouched


def test_at_300_ms_the_graph_row_is_judged_against_the_same_target() -> None:
    callers = _StubCallers()
    bench, rows = latency._measure(None, callers, 0.3, 3, latency.Budget(60.0), with_pg=False)  # type: ignore[arg-type]
    latency._judge(bench, rows, 0.3)
    assert rows.on_graph is not None
    assert rows.on_graph.target == f"p50 <= x{latency.TARGET_300:.2f}"
    assert rows.on_graph.verdict == "MISS"  # 0.48 / 0.40 = x1.20
    assert "ratio to direct sendMail" in rows.on_graph.check
