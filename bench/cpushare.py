"""Run a benchmarked process on a Cloud Run CPU share: one core (taskset) and a CFS bandwidth quota.

Cloud Functions (2nd gen) gives a 512 MiB instance 0.333 vCPU: Cloud Run enforces it as a CPU
bandwidth quota (CFS), not as a slower core. The same is done here with the kernel's own quota, so
a CPU-bound import runs at full speed for `share` of every 100 ms period and is throttled for the
rest: a cgroup of the process's own, cgroup v2 `cpu.max` ("<quota> <period>") when the unified
hierarchy has the cpu controller, else cgroup v1 `cpu.cfs_quota_us`/`cpu.cfs_period_us` (the same
CFS bandwidth control, the older interface). Both need root. Without either the benchmark refuses
to run limited (CpuShareError): duty-cycling a process with SIGSTOP/SIGCONT (`cpulimit`) is not the
same scheduler behaviour and is not used.

The process joins its cgroup before it execs python (`sh -c 'echo $$ > cgroup.procs; exec taskset
...'`), so its imports are limited too, and every child it forks (gunicorn's worker) inherits it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
PERIOD_US = 100_000  # the kernel's default CFS period
SHARES = (
    0.333,
    1.0,
)  # Cloud Functions (2nd gen) CPU steps: a 512 MiB default, and the least that allows concurrency > 1
RMDIR_TRIES = 50  # a cgroup is removed once its last process has exited (bounded wait)


class CpuShareError(RuntimeError):
    """The CPU share cannot be enforced here (no writable cgroup cpu controller, or no taskset)."""


@dataclass(frozen=True)
class CpuShare:
    """A created cgroup with a CPU quota, and the core the process is pinned to."""

    share: float
    core: int
    procs_file: Path  # where the process writes its pid to join
    kind: str  # "cgroup v2 cpu.max" | "cgroup v1 cfs quota"

    @property
    def label(self) -> str:
        return f"{self.share:g} vCPU"

    def wrap(self, argv: Sequence[str]) -> list[str]:
        """argv run inside the cgroup, pinned to one core."""
        return wrap_argv(argv, self.procs_file, self.core)

    def describe(self) -> str:
        return f"{self.share:g} vCPU: taskset -c {self.core} + {self.kind} {quota_us(self.share)}/{PERIOD_US} us"


def quota_us(share: float) -> int:
    """The CFS quota per PERIOD_US for a share of one CPU (0 < share <= 1: one core at most)."""
    if not 0.0 < share <= 1.0:
        raise ValueError(f"a CPU share must be in (0, 1] of the one pinned core, not {share}")
    return max(1000, round(share * PERIOD_US))  # the kernel refuses quotas below 1 ms


def wrap_argv(argv: Sequence[str], procs_file: Path, core: int) -> list[str]:
    """`sh -c` that joins the cgroup (its own pid, which exec keeps) then execs taskset -c core argv."""
    return ["sh", "-c", f'echo $$ > "{procs_file}" && exec taskset -c {core} "$@"', "cpushare", *argv]


def controller(root: Path = CGROUP_ROOT) -> tuple[Path, str]:
    """The directory to create cgroups in and the interface: v2 if its cpu controller is enabled
    for children of the root, else v1's cpu hierarchy. Raises CpuShareError when neither is writable."""
    v2 = root / "cgroup.subtree_control"
    if v2.is_file() and "cpu" in v2.read_text().split():
        base, kind = root, "cgroup v2 cpu.max"
    elif (root / "cpu" / "cpu.cfs_quota_us").is_file():
        base, kind = root / "cpu", "cgroup v1 cfs quota"
    else:
        raise CpuShareError(f"no cgroup cpu controller under {root} (v2 cpu.max or v1 cpu.cfs_quota_us)")
    if not os.access(base, os.W_OK):
        raise CpuShareError(f"{base} is not writable: the CPU share needs root")
    if shutil.which("taskset") is None:
        raise CpuShareError("taskset (util-linux) is not installed")
    return base, kind


def set_quota(directory: Path, kind: str, share: float) -> None:
    if kind.startswith("cgroup v2"):
        (directory / "cpu.max").write_text(f"{quota_us(share)} {PERIOD_US}\n")
    else:
        (directory / "cpu.cfs_period_us").write_text(f"{PERIOD_US}\n")
        (directory / "cpu.cfs_quota_us").write_text(f"{quota_us(share)}\n")


def throttled_us(share: CpuShare) -> int:
    """Time the cgroup's processes were held back by the quota so far (cpu.stat), or -1."""
    try:
        text = (share.procs_file.parent / "cpu.stat").read_text()
    except OSError:
        return -1
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "throttled_usec":
            return int(value)
        if key == "throttled_time":  # v1: nanoseconds
            return int(value) // 1000
    return -1


@contextlib.contextmanager
def cpu_share(share: float, name: str, core: int | None = None, root: Path = CGROUP_ROOT) -> Iterator[CpuShare]:
    """A cgroup limited to `share` of one core for the processes started with `.wrap(argv)`; removed
    on exit (its processes must be stopped first: the caller stops them by pid)."""
    base, kind = controller(root)
    pinned = (os.cpu_count() or 1) - 1 if core is None else core  # the last core: least busy with the driver
    directory = base / f"safesend-bench-{os.getpid()}-{name}"
    directory.mkdir()
    try:
        set_quota(directory, kind, share)
        yield CpuShare(share, pinned, directory / "cgroup.procs", kind)
    finally:
        _remove(directory)


def _remove(directory: Path) -> None:
    for _ in range(RMDIR_TRIES):
        try:
            directory.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:  # still has processes: they are exiting
            time.sleep(0.1)
    raise CpuShareError(f"cgroup {directory} still has processes: {(directory / 'cgroup.procs').read_text()!r}")
