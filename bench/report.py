"""Rows, stats, the one table, results.json and the dated markdown file of the issue-5 suite."""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .results import percentile
from .table import render_text_table


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else math.nan


def fmt_s(seconds: float) -> str:
    if seconds is None or math.isnan(seconds):
        return "-"
    if seconds >= 10:
        return f"{seconds:.1f} s"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    return f"{seconds * 1e3:.0f} ms" if seconds >= 0.1 else f"{seconds * 1e3:.1f} ms"


def fmt_num(value: float) -> str:
    if value is None or math.isnan(value):
        return "-"
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.1f}"


def fmt_rate(value: float) -> str:
    if value is None or math.isnan(value):
        return "-"
    return f"{value:.1f}/s"


FORMATS: dict[str, Callable[[float], str]] = {"s": fmt_s, "n": fmt_num, "rate": fmt_rate}


@dataclass
class Row:
    """One measured variant. `samples` are per run (or per call, for latency); `pairs` are the
    per-run ratios to the baseline row of the same benchmark, measured side by side."""

    variant: str
    unit: str = "s"  # s | n | rate
    samples: list[float] = field(default_factory=list)
    show_p95: bool = False
    baseline: bool = False
    ratio: float | None = None  # of medians, to the baseline row (set by finish())
    ratio_p95: float | None = None
    pairs: list[float] = field(default_factory=list)  # paired per-run ratios
    target: str = ""
    verdict: str = ""  # "ok", "MISS", "" (no target)
    check: str = ""
    text: str | None = None  # replaces the median cell (e.g. "3r + 3w")
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return len(self.samples)

    @property
    def median(self) -> float:
        return median(self.samples)

    @property
    def p95(self) -> float:
        return percentile(self.samples, 95) if self.samples else math.nan

    @property
    def lo(self) -> float:
        return min(self.samples) if self.samples else math.nan

    @property
    def hi(self) -> float:
        return max(self.samples) if self.samples else math.nan

    def cells(self) -> dict[str, str]:
        fmt = FORMATS[self.unit]
        ratio = "-"
        if self.baseline:
            ratio = "(baseline)"
        elif self.ratio is not None and not math.isnan(self.ratio):
            ratio = f"x{self.ratio:.2f}"
            if self.ratio_p95 is not None and not math.isnan(self.ratio_p95):
                ratio += f" (p95 x{self.ratio_p95:.2f})"
            if self.pairs:
                ratio += f" [{min(self.pairs):.2f}-{max(self.pairs):.2f}]"
        return {
            "n": str(self.n) if self.samples else "-",
            "median": self.text if self.text is not None else fmt(self.median),
            "p95": fmt(self.p95) if self.show_p95 else "",
            "min": fmt(self.lo),
            "max": fmt(self.hi),
            "ratio": ratio,
            "target": self.target,
            "verdict": self.verdict,
            "check": self.check,
        }

    def as_json(self) -> dict[str, Any]:
        def num(x: float | None) -> float | None:
            return None if x is None or (isinstance(x, float) and math.isnan(x)) else round(x, 6)

        return {
            "variant": self.variant,
            "unit": self.unit,
            "n": self.n,
            "median": num(self.median),
            "p95": num(self.p95) if self.show_p95 else None,
            "min": num(self.lo),
            "max": num(self.hi),
            "ratio_to_baseline": num(self.ratio),
            "ratio_p95": num(self.ratio_p95),
            "paired_ratio_min": num(min(self.pairs)) if self.pairs else None,
            "paired_ratio_max": num(max(self.pairs)) if self.pairs else None,
            "baseline": self.baseline,
            "target": self.target or None,
            "verdict": self.verdict or None,
            "check": self.check,
            "text": self.text,
            "samples": [round(s, 6) for s in self.samples],
            "detail": self.detail,
        }


@dataclass
class Bench:
    key: str
    title: str  # "1. happy-path latency @ 300 ms"
    what: str = ""  # one line: what one sample is
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)  # why a target was missed, and the fix
    failures: list[str] = field(default_factory=list)  # correctness problems: exit status 1
    skipped: str | None = None
    seconds: float = 0.0

    def add(self, row: Row) -> Row:
        self.rows.append(row)
        return row

    def finish(self, p95: bool = False) -> None:
        """Ratios of medians (and p95) to the baseline row."""
        base = next((r for r in self.rows if r.baseline), None)
        if base is None or not base.samples:
            return
        for row in self.rows:
            if row is base or not row.samples or row.ratio is not None:
                continue
            row.ratio = row.median / base.median if base.median else math.nan
            if p95 and row.show_p95 and base.p95:
                row.ratio_p95 = row.p95 / base.p95

    @property
    def missed(self) -> bool:
        return any(r.verdict == "MISS" for r in self.rows)

    def as_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "title": self.title,
            "what": self.what,
            "seconds": round(self.seconds, 1),
            "skipped": self.skipped,
            "rows": [r.as_json() for r in self.rows],
            "notes": self.notes,
            "findings": self.findings,
            "failures": self.failures,
        }


COLUMNS = (
    "benchmark",
    "variant",
    "n",
    "median",
    "p95",
    "min",
    "max",
    "ratio [paired min-max]",
    "target",
    "verdict",
    "checks",
)
_KEYS = (None, None, "n", "median", "p95", "min", "max", "ratio", "target", "verdict", "check")


def table_rows(benches: Sequence[Bench]) -> list[tuple[int, list[str]]]:
    """(index of the benchmark, cells) for every table line."""
    out: list[tuple[int, list[str]]] = []
    for b, bench in enumerate(benches):
        if bench.skipped:
            out.append((b, [bench.title, "NOT RUN", "", "", "", "", "", "", "", "", bench.skipped[:150]]))
            continue
        for i, row in enumerate(bench.rows):
            cells = row.cells()
            out.append((b, [bench.title if i == 0 else "", row.variant] + [cells[k] for k in _KEYS[2:]]))
    return out


def render_text(benches: Sequence[Bench]) -> str:
    groups: list[list[list[str]]] = []
    previous = None
    for b, row in table_rows(benches):
        if b != previous:
            groups.append([])
            previous = b
        groups[-1].append(row)
    return render_text_table(COLUMNS, groups, right={2, 3, 4, 5, 6}, rule_tail=30)


def render_markdown_table(benches: Sequence[Bench]) -> str:
    rows = table_rows(benches)
    esc = lambda s: s.replace("|", "\\|")  # noqa: E731
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "|".join("---" for _ in COLUMNS) + "|"]
    lines += ["| " + " | ".join(esc(c) for c in row) + " |" for _, row in rows]
    return "\n".join(lines)


def write_json(path: Path, header: dict[str, Any], benches: Sequence[Bench]) -> None:
    path.write_text(
        json.dumps({**header, "benchmarks": [b.as_json() for b in benches]}, indent=1, default=str) + "\n",
        encoding="utf-8",
    )


def write_markdown(
    path: Path, header_lines: Sequence[str], benches: Sequence[Bench], tail_lines: Sequence[str]
) -> None:
    out = ["# safesend benchmarks, " + path.stem, ""]
    out += [*header_lines, ""]
    out += [render_markdown_table(benches), ""]
    notes = [(b.title, n) for b in benches for n in b.notes]
    findings = [(b.title, f) for b in benches for f in b.findings]
    if findings:
        out += ["## Targets missed: why, and the fix", ""]
        out += [f"- **{t}**: {f}" for t, f in findings] + [""]
    if notes:
        out += ["## Notes", ""]
        out += [f"- {t}: {n}" for t, n in notes] + [""]
    out += list(tail_lines)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(out).rstrip() + "\n", encoding="utf-8")
