"""bench/cpushare.py: the CPU share bench 7 and 8 run functions on (taskset + a CFS quota in a
cgroup), and bench/platform.py's arithmetic. The cgroup itself needs root; what is checked here is
everything around it: the quota, the interface chosen, the files written, and that the wrapped
process joins the cgroup with the pid it then runs python under, pinned to one core."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.cpushare import PERIOD_US, CpuShare, CpuShareError, controller, quota_us, set_quota, wrap_argv
from bench.platform import Load, p95, requests_for


@pytest.mark.parametrize(("share", "quota"), [(0.333, 33300), (0.583, 58300), (1.0, 100000), (0.001, 1000)])
def test_quota_is_the_share_of_one_period(share: float, quota: int) -> None:
    assert quota_us(share) == quota
    assert PERIOD_US == 100_000


@pytest.mark.parametrize("share", [0.0, -1.0, 1.5])
def test_a_share_outside_one_core_is_refused(share: float) -> None:
    with pytest.raises(ValueError, match="CPU share"):
        quota_us(share)


def test_the_wrapped_process_joins_with_its_own_pid_and_runs_on_one_core(tmp_path: Path) -> None:
    procs = tmp_path / "cgroup.procs"
    code = "import os, json; print(json.dumps([os.getpid(), sorted(os.sched_getaffinity(0))]))"
    done = subprocess.run(wrap_argv([sys.executable, "-c", code], procs, 0), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    pid, cores = json.loads(done.stdout)
    assert int(procs.read_text()) == pid  # exec kept the pid that joined the cgroup: python is limited
    assert cores == [0]


def test_v2_is_preferred_when_its_cpu_controller_is_enabled(tmp_path: Path) -> None:
    (tmp_path / "cgroup.subtree_control").write_text("cpuset cpu io memory pids\n")
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    base, kind = controller(tmp_path)
    assert (base, kind) == (tmp_path, "cgroup v2 cpu.max")
    group = tmp_path / "g"
    group.mkdir()
    set_quota(group, kind, 0.333)
    assert (group / "cpu.max").read_text() == "33300 100000\n"


def test_v1_cfs_quota_is_used_without_a_v2_cpu_controller(tmp_path: Path) -> None:
    (tmp_path / "cgroup.subtree_control").write_text("memory pids\n")
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    base, kind = controller(tmp_path)
    assert (base, kind) == (tmp_path / "cpu", "cgroup v1 cfs quota")
    group = base / "g"
    group.mkdir()
    set_quota(group, kind, 0.333)
    assert (group / "cpu.cfs_quota_us").read_text() == "33300\n"
    assert (group / "cpu.cfs_period_us").read_text() == "100000\n"
    share = CpuShare(0.333, 1, group / "cgroup.procs", kind)
    assert share.describe() == "0.333 vCPU: taskset -c 1 + cgroup v1 cfs quota 33300/100000 us"
    assert share.wrap(["python"])[-1] == "python"


def test_no_cpu_controller_refuses_instead_of_duty_cycling(tmp_path: Path) -> None:
    with pytest.raises(CpuShareError, match="no cgroup cpu controller"):
        controller(tmp_path)


def test_p95_is_nearest_rank_and_throughput_is_per_wall_second() -> None:
    assert p95([float(x) for x in range(1, 21)]) == 19.0
    assert p95([0.5]) == 0.5
    load = Load("send", 0.333, 4, latencies=[0.1] * 24, wall_s=2.0)
    assert load.throughput == 12.0
    assert requests_for(1) == 24 and requests_for(16) == 64
