"""Result records and percentiles of the micro-benchmarks (--micro), and their table (bench/table.py renders it)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from .table import render_text_table


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile (p95 of 5 samples is the largest one): no interpolation games."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100.0 * len(ordered)))
    return ordered[rank - 1]


@dataclass
class Variant:
    """One side of a comparison. Latencies are seconds per op (a send, a round, a call)."""

    name: str
    latencies: list[float] = field(default_factory=list)
    ops: int = 0  # operations behind `throughput` (a claim round counts K claims)
    busy_s: float = 0.0  # time those operations took
    mem_bytes: float | None = None  # memory per op/job, where measured
    check: str = ""  # what the correctness checks saw, short

    @property
    def n(self) -> int:
        return len(self.latencies)

    @property
    def median(self) -> float:
        return statistics.median(self.latencies) if self.latencies else math.nan

    @property
    def p95(self) -> float:
        return percentile(self.latencies, 95)

    @property
    def throughput(self) -> float:
        return self.ops / self.busy_s if self.busy_s > 0 else math.nan


@dataclass
class Comparison:
    key: str  # transport, claim, cpu, service
    title: str
    latency_of: str  # what one latency sample is ("send", "round of 10 claims", ...)
    throughput_unit: str  # "sends/s", "claims/s", ...
    a: Variant
    b: Variant
    failures: list[str] = field(default_factory=list)  # correctness failures: make the run exit 1
    notes: list[str] = field(default_factory=list)
    skipped: str | None = None  # why the comparison could not run at all


def fmt_time(seconds: float) -> str:
    if seconds is None or math.isnan(seconds):
        return "-"
    if seconds >= 1.0:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} us"


def fmt_rate(rate: float, unit: str) -> str:
    if rate is None or math.isnan(rate):
        return "-"
    if rate >= 100:
        return f"{rate:,.0f} {unit}"
    return f"{rate:.2f} {unit}"


def fmt_bytes(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "-"
    if value >= 1024 * 1024:
        return f"{value / (1024 * 1024):.2f} MiB"
    if value >= 1024:
        return f"{value / 1024:.1f} KiB"
    return f"{value:.0f} B"


def fmt_ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or math.isnan(a) or math.isnan(b) or b == 0:
        return "-"
    r = a / b
    return f"x{r:.3g}" if r < 1000 else f"x{r:,.0f}"


HEADERS = ("comparison", "variant", "n", "median", "p95", "throughput", "memory", "checks")


def _comparison_rows(c: Comparison) -> list[tuple[str, ...]]:
    """A, B and the ratio line of one comparison (one line if it could not run)."""
    if c.skipped:
        return [(c.title, "NOT RUN", "", "", "", "", "", c.skipped)]
    rows = [
        (
            c.title if label == "A" else f"  (1 sample = {c.latency_of})",
            f"{label}: {v.name}",
            str(v.n),
            fmt_time(v.median),
            fmt_time(v.p95),
            fmt_rate(v.throughput, c.throughput_unit),
            fmt_bytes(v.mem_bytes),
            v.check,
        )
        for label, v in (("A", c.a), ("B", c.b))
    ]
    status = "FAILED: " + "; ".join(c.failures) if c.failures else "ok"
    ratios = (
        fmt_ratio(c.a.median, c.b.median),
        fmt_ratio(c.a.p95, c.b.p95),
        fmt_ratio(c.a.throughput, c.b.throughput),
        fmt_ratio(c.a.mem_bytes, c.b.mem_bytes),
    )
    return [*rows, ("", "ratio A/B", "", *ratios, status)]


def table_rows(comparisons: Sequence[Comparison]) -> list[list[tuple[str, ...]]]:
    """One group of lines per comparison."""
    return [_comparison_rows(c) for c in comparisons]


def render_table(comparisons: Sequence[Comparison]) -> str:
    return render_text_table(
        HEADERS, table_rows(comparisons), right={2, 3, 4, 5, 6}, rule_tail=max(len(HEADERS[-1]), 20)
    )
