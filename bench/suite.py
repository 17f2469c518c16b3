"""The issue-5 suite: start the local stack, run benchmarks 1-7 side by side, print one table and
write bench/results.json plus bench/results/<date>.md. `python -m bench.run --help`."""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devstack.procs import alive

from .common import REPO_ROOT, progress, quiet_service_logs
from .report import Bench, render_text, write_json, write_markdown

BENCHES = ("latency", "paths", "throughput", "sweep", "certainty", "coldstart", "platform", "pacing")
SIZES = {
    "full": dict(
        runs=5, latency_n=20, tp_jobs=200, tp_clients=16, sweep_sizes=(0, 1000, 10000), sweep_due=100, pace_jobs=2000
    ),
    "quick": dict(
        runs=2, latency_n=6, tp_jobs=48, tp_clients=16, sweep_sizes=(0, 200, 1000), sweep_due=20, pace_jobs=200
    ),
}
BUDGETS_S = {  # per benchmark: a slow machine stops early (reported in the notes) instead of running on
    "full": dict(latency=150, paths=90, throughput=240, sweep=150, certainty=90, coldstart=150, platform=600),
    "quick": dict(latency=40, paths=40, throughput=60, sweep=60, certainty=60, coldstart=60, platform=240),
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="--micro runs the earlier micro-benchmarks instead (transport, claim, "
        "cpu, service): python -m bench.run --micro --help",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="small sizes and 2 runs, for development; writes no result files unless --out is given",
    )
    parser.add_argument("--only", default=",".join(BENCHES), help=f"comma-separated subset of {','.join(BENCHES)}")
    parser.add_argument("--runs", type=int, help="runs per benchmark (default 5; quick 2)")
    parser.add_argument(
        "--no-deployed", action="store_true", help="4: skip the second, as-deployed functions instance (THREADS unset)"
    )
    parser.add_argument(
        "--no-postgres",
        action="store_true",
        help="1-3: measure the Firestore store only (by default PostgreSQL runs side by side)",
    )
    parser.add_argument(
        "--cpu",
        type=float,
        default=None,
        help="7: run the cold start on this CPU share of one core (e.g. 0.333: taskset + a cgroup quota, needs root)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="directory for results.json and results/<date>.md (default: bench/ for a full run, nothing for --quick)",
    )
    args = parser.parse_args(argv)
    chosen = [c.strip() for c in args.only.split(",") if c.strip()]
    unknown = sorted(set(chosen) - set(BENCHES))
    if unknown or not chosen:
        parser.error(f"--only: unknown benchmark(s) {unknown}; choose from {','.join(BENCHES)}")
    args.only = [b for b in BENCHES if b in chosen]
    args.mode = "quick" if args.quick else "full"
    sizes = dict(SIZES[args.mode])
    if args.runs is not None:
        if args.runs < 1:
            parser.error("--runs must be >= 1")
        sizes["runs"] = args.runs
    args.sizes = sizes
    args.budgets = BUDGETS_S[args.mode]
    if args.out is None and not args.quick:
        args.out = REPO_ROOT / "bench"
    return args


def _load() -> str:
    try:
        return "/".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


def _terminate(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


STACK_PATTERNS = (
    "cloud-firestore-emulator",
    "pubsub-emulator",
    "tasks_emulator",
    "functions_framework",
    "safesend-pg-",
)  # the last: PostgreSQL servers of devstack/postgres.py (their data directory)


def _other_stack_processes() -> int:
    """Processes of other local stacks (other people's test runs) on this machine right now."""
    count = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmdline = fh.read().decode("utf-8", "replace")
        except OSError:
            continue
        if any(p in cmdline for p in STACK_PATTERNS):
            count += 1
    return count


@dataclass
class _Session:
    """One suite run: what it measured and what its header reports."""

    args: argparse.Namespace
    machine: str
    log_dir: Path
    started: float = field(default_factory=time.monotonic)
    started_at: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    load_start: str = field(default_factory=_load)
    others: int = field(default_factory=_other_stack_processes)
    results: list[Bench] = field(default_factory=list)
    loads: dict[str, str] = field(default_factory=dict)  # benchmark -> load average at its start
    pids: list[tuple[str, int | None]] = field(default_factory=list)
    stack_s: float = 0.0
    postgres_version: str | None = None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _terminate)
    quiet_service_logs()
    from . import run as micro  # machine line helpers
    from .certainty import attach_costs

    session = _Session(args, micro.machine_line(), Path(tempfile.mkdtemp(prefix="safesend-bench-stack-")))
    try:
        _run_on_stack(session)
    except KeyboardInterrupt:
        progress("interrupted; everything stopped")
        return 130
    left = [f"{name} pid {pid}" for name, pid in session.pids if alive(pid)]
    load_end = _load()
    total = time.monotonic() - session.started
    attach_costs(session.results)
    lines = _header_lines(session, load_end, total)
    _print_report(lines, session.results, left)
    if args.out is not None:
        _write_files(session, lines, {"load_avg_end": load_end, "total_s": round(total, 1)}, left, argv)
    return _exit_status(session.results, left, session.log_dir)


def _run_on_stack(session: _Session) -> None:
    """Start the stack (and PostgreSQL), run the chosen benchmarks, stop everything (KeyboardInterrupt
    passes through, after the stop)."""
    from devstack.stack import LocalStack

    from .stackctl import firestore_env, prepare_sim, stack_config

    args = session.args
    stack = LocalStack(stack_config(session.log_dir))
    postgres: Any = None
    try:
        progress(
            f"starting the local stack (Firestore, Pub/Sub, Cloud Tasks emulators, simulator, relay, "
            f"functions); logs in {session.log_dir}"
        )
        t0 = time.monotonic()
        stack.start()
        session.stack_s = time.monotonic() - t0
        prepare_sim(stack.sim)
        session.pids = [(e.name, e.pid) for e in stack.emulators.emulators] + [("functions", stack.functions.pid)]
        progress(f"stack up in {session.stack_s:.1f} s at {stack.url}")
        if not args.no_postgres and {"latency", "paths"} & set(args.only):
            postgres, failure = _start_postgres(session.log_dir)
            if postgres is not None:
                session.pids.append(("postgres", postgres.pid))
                session.postgres_version = postgres.version
            else:
                session.results.append(Bench("postgres", "PostgreSQL store", skipped=failure, failures=[failure]))
        with firestore_env(stack):
            runners = _runners(stack, args, postgres)
            for key in args.only:
                title, runner = runners[key]
                session.loads[key] = _load()
                session.results += _run_one(title, key, runner, session.loads[key])
    finally:
        progress("stopping the local stack")
        stack.stop()
        if postgres is not None:
            postgres.stop()


def _run_one(title: str, key: str, runner: Callable[[], list[Bench]], load: str) -> list[Bench]:
    """One benchmark; one that raises is a NOT RUN row with its failure, and the suite goes on."""
    progress(f"running {title} (load avg {load}) ...")
    t1 = time.monotonic()
    try:
        got = runner()
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # noqa: BLE001 - report it in the table, carry on
        progress(f"{title} could not run: {type(exc).__name__}: {exc}")
        first = str(exc).splitlines()[0] if str(exc) else ""
        reason = f"{type(exc).__name__}: {first}"
        got = [Bench(key, title, skipped=reason, failures=[f"could not run: {reason}"])]
    elapsed = time.monotonic() - t1
    for bench in got:
        bench.seconds = elapsed / len(got)
    progress(f"{title} done in {elapsed:.1f} s")
    return got


def _measured_line(session: _Session) -> str:
    from .stackctl import TIME_SCALE, scaled_env_text

    args, sizes = session.args, session.args.sizes
    line = (
        f"measured ({args.mode}): {sizes['runs']} runs each; 1) {sizes['latency_n']} calls per variant "
        f"per latency; 4) {sizes['tp_jobs']} jobs x {sizes['tp_clients']} clients; 5) sweep of "
        f"{sizes['sweep_due']} due among {'/'.join(f'{s:,}' for s in sizes['sweep_sizes'])} finished; "
        f"delays scaled 1/{TIME_SCALE:g} on the stack ({scaled_env_text()}), production delays on a "
        f"fake clock in 2-3"
    )
    if session.postgres_version is not None:
        line += (
            f"; 1-3 also on PostgreSQL {session.postgres_version} (Debian's, on this machine's disk, durable "
            f"defaults: fsync and synchronous_commit on) next to the Firestore emulator (in memory)"
        )
    return line


def _header_lines(session: _Session, load_end: str, total: float) -> list[str]:
    """The lines above the table: machine, sizes, load, how to read it, and whether the machine was busy."""
    loads = [x.split("/")[0] for x in (session.load_start, load_end)]
    busy = max(float(x) for x in loads) if "?" not in loads else 0.0
    lines = [
        session.machine,
        _measured_line(session),
        f"stack start {session.stack_s:.1f} s; load avg 1/5/15 min at start {session.load_start}, at end "
        f"{load_end}; total {total:.0f} s",
        "load avg (1 min) at the start of each benchmark: "
        + (", ".join(f"{k} {v.split('/')[0]}" for k, v in session.loads.items()) or "-")
        + f"; processes of other local stacks running when the suite started: {session.others}",
        "median/p95/min/max over the samples (n); ratio = median / baseline median (benchmarks 2-3: / target), "
        "[paired min-max] = per-round ratios measured side by side",
    ]
    if busy > (os.cpu_count() or 1):
        lines.append(
            f"machine busy: load average above the core count ({os.cpu_count()}) at start or end; "
            f"ratios are side by side, absolute times are inflated"
        )
    return lines


def _print_report(lines: list[str], results: list[Bench], left: list[str]) -> None:
    print("\n".join(lines))
    print(render_text(results))
    for bench in results:
        for note in bench.notes:
            print(f"note: {bench.title}: {note}")
    for bench in results:
        for finding in bench.findings:
            print(f"MISSED {bench.title}: {finding}")
    print(f"processes left running: {', '.join(left) if left else 'none'}")


def _write_files(
    session: _Session, lines: list[str], end: dict[str, Any], left: list[str], argv: list[str] | None
) -> None:
    """bench/results.json (every sample) and bench/results/<date>.md (the table, findings, notes)."""
    from .stackctl import TIME_SCALE, scaled_env_text

    args = session.args
    json_path = args.out / "results.json"
    md_path = args.out / "results" / f"{time.strftime('%Y-%m-%d')}.md"
    header = {
        "started_at": session.started_at,
        "machine": session.machine,
        "measured": lines[1],
        "mode": args.mode,
        "load_avg_start": session.load_start,
        **end,
        "load_avg_per_benchmark": session.loads,
        "stack_start_s": round(session.stack_s, 1),
        "time_scale": TIME_SCALE,
        "scaled_env": scaled_env_text(),
        "sizes": {k: list(v) if isinstance(v, tuple) else v for k, v in args.sizes.items()},
        "processes_left": left,
        "other_stack_processes_at_start": session.others,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(json_path, header, session.results)
    command = "bash scripts/bench.sh" + "".join(f" {a}" for a in (argv if argv is not None else sys.argv[1:]))
    write_markdown(
        md_path,
        [f"`{command}` on {session.started_at}", "", *[f"- {line}" for line in lines]],
        session.results,
        ["Full data: `bench/results.json`. How to run and read: `bench/README.md`."],
    )
    print(f"wrote {_shown(json_path)} and {_shown(md_path)}")


def _shown(path: Path) -> Path:
    return path.relative_to(REPO_ROOT) if path.is_relative_to(REPO_ROOT) else path


def _exit_status(results: list[Bench], left: list[str], log_dir: Path) -> int:
    """0 when every correctness check held (the stack's logs are removed), else 1 (they are kept)."""
    failures = [(b.title, f) for b in results for f in b.failures]
    if left:
        failures.append(("cleanup", f"still running: {left}"))
    if not failures:
        shutil.rmtree(log_dir, ignore_errors=True)
        print("all correctness checks passed")
        return 0
    print()
    print("!" * 78)
    for title, failure in failures:
        print(f"!!! {title}: {failure}")
    print(f"!!! stack logs kept in {log_dir}")
    print("!" * 78)
    return 1


def _start_postgres(log_dir: Path) -> tuple[Any, str]:
    """A durable PostgreSQL server of the suite's own (devstack/postgres.py), or why there is none."""
    from devstack.emulators import DevstackError
    from devstack.postgres import PostgresServer

    progress("starting PostgreSQL (Debian's server, durable defaults) for the store side of 1-3")
    server = PostgresServer(log_dir=log_dir, durable=True)
    try:
        server.start()
    except DevstackError as exc:
        server.stop()
        first = str(exc).splitlines()[0]
        return None, f"PostgreSQL could not start (bash scripts/install-postgres.sh, or --no-postgres): {first}"
    progress(f"PostgreSQL {server.version} up in {server.startup_seconds:.1f} s on {server.host}")
    return server, ""


def _runners(
    stack: Any, args: argparse.Namespace, postgres: Any = None
) -> dict[str, tuple[str, Callable[[], list[Bench]]]]:
    from . import certainty, coldstart, latency, pacing, paths, platform, sweep, throughput

    s, b = args.sizes, args.budgets
    return {
        "latency": ("1. latency", lambda: latency.run(stack, s["latency_n"], (0.3, 0.05), b["latency"], postgres)),
        "paths": ("2-3. store ops and Gmail units by path", lambda: paths.run(stack, s["runs"], b["paths"], postgres)),
        "throughput": (
            "4. throughput",
            lambda: [
                throughput.run(
                    stack, s["tp_jobs"], s["tp_clients"], s["runs"], b["throughput"], deployed=not args.no_deployed
                )
            ],
        ),
        "sweep": (
            "5. sweeper scaling",
            lambda: [sweep.run(stack, s["sweep_sizes"], s["sweep_due"], s["runs"], b["sweep"])],
        ),
        "certainty": ("6. time to certainty", lambda: [certainty.run(stack, s["runs"], b["certainty"])]),
        "coldstart": ("7. cold start", lambda: [coldstart.run(stack, s["runs"], b["coldstart"], args.cpu)]),
        "platform": ("8. platform", lambda: [platform.run(stack, min(s["runs"], 3), b["platform"])]),
        # Issue 24 (keys burst, pool, daily): in process, on a fake clock; the stack is not used.
        "pacing": ("9. mailbox pacing", lambda: pacing.benches(s["pace_jobs"])),
    }


if __name__ == "__main__":
    sys.exit(main())
