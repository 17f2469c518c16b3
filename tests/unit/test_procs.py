"""devstack.procs: the /proc reader that decides what the stack, its tests and the benchmarks stop
and count. Checked on real processes: a shell with a sleeping child, and a zombie."""

from __future__ import annotations

import os
import subprocess
import time

from devstack.procs import alive, children_of, descendants, tree_cpu_s


def wait_for(predicate, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def test_a_tree_of_processes_is_found_and_its_end_is_seen():
    shell = subprocess.Popen(["sh", "-c", "sleep 30 & sleep 30 & wait"])
    try:
        assert wait_for(lambda: len(children_of(shell.pid)) == 2)
        sleepers = children_of(shell.pid)
        assert descendants(os.getpid()) >= {shell.pid, *sleepers}
        assert descendants(shell.pid) == set(sleepers)
        assert all(alive(p) for p in sleepers) and tree_cpu_s(shell.pid) >= 0.0
    finally:
        shell.kill()
        shell.wait(timeout=10)
    assert not alive(shell.pid)  # reaped
    for pid in sleepers:  # orphans now: stop them ourselves
        os.kill(pid, 9)
    assert wait_for(lambda: not any(alive(p) for p in sleepers))


def test_a_zombie_is_gone_and_nonsense_pids_are_not_alive():
    child = subprocess.Popen(["true"])
    assert wait_for(lambda: not alive(child.pid))  # exited, not yet reaped: a zombie
    assert child.pid not in children_of(os.getpid())
    child.wait(timeout=10)
    assert not alive(None) and not alive(0) and not alive(2**22 + 1)
