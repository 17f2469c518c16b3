"""safesend benchmarks.

`python -m bench.run [--quick]` runs the issue-5 suite (bench/suite.py: the local stack, benchmarks
1-7, one table, bench/results.json and bench/results/<date>.md).
`python -m bench.run --micro [--quick]` runs the earlier micro-benchmarks (transport, claim, cpu,
service; this module) and prints their table.

Exit status: 0 when every correctness check held, 1 when one failed (or a benchmark could
not run, e.g. an emulator did not start), 2 on bad arguments, 130 when interrupted.
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import sys
import time
from collections.abc import Callable
from importlib import metadata
from typing import Any

from .common import progress, quiet_service_logs  # also puts functions/ and the repo root on sys.path
from .results import Comparison, Variant, render_table

COMPARISONS = ("transport", "claim", "cpu", "service")
SIZES = {
    #            sends  claim K  rounds  cpu batches  service M
    "full": dict(sends=300, threads=10, rounds=5, repeats=30, jobs=2000),
    "quick": dict(sends=80, threads=10, rounds=2, repeats=10, jobs=300),
}
BUDGETS_S = {  # per comparison, so a slow machine stops early instead of running on
    "full": dict(transport=60, claim=150, cpu=30, service=45),
    "quick": dict(transport=10, claim=60, cpu=5, service=8),
}


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be >= 1")
    return value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.run --micro", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, about 30 s in all")
    parser.add_argument(
        "--only",
        default=",".join(COMPARISONS),
        help=f"comma-separated subset of {','.join(COMPARISONS)} (default: all)",
    )
    parser.add_argument("--sends", type=_positive, help="1: messages.send calls per variant")
    parser.add_argument("--threads", type=_positive, help="2: concurrent claims per round (K)")
    parser.add_argument("--rounds", type=_positive, help="2: claim rounds per variant (R)")
    parser.add_argument("--repeats", type=_positive, help="3: timed batches per variant")
    parser.add_argument("--jobs", type=_positive, help="4: submits per variant (M)")
    parser.add_argument(
        "--claim-timeout",
        type=float,
        default=120.0,
        help="2: seconds a claim round may take before it counts as hung (default 120)",
    )
    args = parser.parse_args(argv)
    chosen = [c.strip() for c in args.only.split(",") if c.strip()]
    unknown = sorted(set(chosen) - set(COMPARISONS))
    if unknown or not chosen:
        parser.error(f"--only: unknown comparison(s) {unknown}; choose from {','.join(COMPARISONS)}")
    args.only = [c for c in COMPARISONS if c in chosen]
    mode = "quick" if args.quick else "full"
    for name, value in SIZES[mode].items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    args.mode = mode
    args.budgets = BUDGETS_S[mode]
    return args


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _mem_total() -> str:
    try:
        with open("/proc/meminfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB RAM"
    except (OSError, ValueError):
        pass
    return "RAM ?"


def _cores() -> str:
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count() or 0
    return f"{usable} usable cores ({os.cpu_count()} online)"


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "?"


def _load() -> str:
    try:
        return "/".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


def machine_line() -> str:
    return (
        f"machine: {_cpu_model()}, {_cores()}, {_mem_total()}, {platform.system()} "
        f"{platform.release()}, Python {platform.python_version()}; load avg 1/5/15 min at start {_load()}"
    )


def measured_line(args: argparse.Namespace) -> str:
    parts = []
    if "transport" in args.only:
        parts.append(
            f"1) {args.sends} sequential messages.send per variant, interleaved, googleapiclient "
            f"{_version('google-api-python-client')} + httplib2 {_version('httplib2')} -> in-process "
            f"GmailSimulator on 127.0.0.1"
        )
    if "claim" in args.only:
        parts.append(
            f"2) {args.rounds} round(s) x {args.threads} threads claiming one new job id, Firestore "
            f"emulator; safesend's store on its REST client (standard library), the transactional baseline "
            f"on google-cloud-firestore {_version('google-cloud-firestore')} (gRPC)"
        )
    if "cpu" in args.only:
        parts.append(f"3) {args.repeats} timed batches per variant, single thread")
    if "service" in args.only:
        parts.append(f"4) {args.jobs} submits per variant over in-memory fakes, single thread")
    return f"measured ({args.mode}): " + "; ".join(parts)


def _skipped(key: str, title: str, reason: str) -> Comparison:
    comp = Comparison(key, title, "", "", Variant("-"), Variant("-"), skipped=reason[:200])
    comp.failures.append(reason)
    return comp


def _terminate(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--micro" in argv:
        argv.remove("--micro")
        return micro_main(argv)
    from . import suite

    return suite.main(argv)


def micro_main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    for sig in (signal.SIGTERM, signal.SIGHUP):  # so `finally` blocks stop the emulator
        signal.signal(sig, _terminate)
    quiet_service_logs()
    header = machine_line()
    started = time.monotonic()

    from . import claim, cpu, service_tp, transport

    runners: dict[str, tuple[str, Callable[[], Comparison]]] = {
        "transport": ("1. send transport", lambda: transport.run(args.sends, args.budgets["transport"])),
        "claim": (
            "2. claim, dup webhooks",
            lambda: claim.run(args.threads, args.rounds, args.budgets["claim"], args.claim_timeout),
        ),
        "cpu": ("3. request-path CPU", lambda: cpu.run(args.repeats, args.budgets["cpu"])),
        "service": ("4. service over fakes", lambda: service_tp.run(args.jobs, args.budgets["service"])),
    }
    results: list[Comparison] = []
    for key in args.only:
        title, runner = runners[key]
        progress(f"running {title} ...")
        t0 = time.monotonic()
        try:
            comp = runner()
        except KeyboardInterrupt:
            progress("interrupted")
            return 130
        except Exception as exc:  # noqa: BLE001 - report it in the table, carry on with the rest
            progress(f"{title} could not run: {type(exc).__name__}: {exc}")
            comp = _skipped(key, title, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
        progress(f"{title} done in {time.monotonic() - t0:.1f} s")
        results.append(comp)

    print(header)
    print(measured_line(args))
    print(
        "median/p95 are per sample (see the line under each title); p95 is nearest-rank. "
        "throughput = ops / time spent in them. ratio = A / B."
    )
    print(render_table(results))
    notes = [n for c in results for n in c.notes]
    for note in notes:
        print(f"note: {note}")
    failures = [(c.title, f, c.skipped is not None) for c in results for f in c.failures]
    print(f"total {time.monotonic() - started:.1f} s; load avg at end {_load()}")
    if failures:
        print()
        print("!" * 78)
        for title, failure, not_run in failures:
            what = "COULD NOT RUN" if not_run else "CORRECTNESS CHECK FAILED in"
            print(f"!!! {what} {title.strip()}: {failure}")
        print("!" * 78)
        return 1
    print("all correctness checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
