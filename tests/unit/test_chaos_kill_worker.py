"""The storm's worker kill on a loaded machine: a gunicorn master between two workers (one just died
at a crash point, the next not yet forked) is not a harness error; the kill waits for the respawn."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from devstack.chaos import kill_gunicorn_worker
from devstack.procs import children_of

# A stand-in gunicorn master: no worker for its first second, then one `sleep` worker at a time,
# respawned when it dies (at most 5, then it stops).
MASTER = """
import subprocess, time
time.sleep(1.0)
for _ in range(5):
    subprocess.Popen(["sleep", "60"]).wait()
"""


@pytest.fixture
def master() -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen([sys.executable, "-c", MASTER])
    yield process
    for child in children_of(process.pid):
        os.kill(child, signal.SIGKILL)
    process.kill()
    process.wait(timeout=10)


def test_a_kill_while_the_master_respawns_waits_for_the_new_worker(master):
    assert children_of(master.pid) == []  # between two workers, as after a crash point
    result = kill_gunicorn_worker(master.pid, respawn_timeout_s=20.0)
    assert "error" not in result, result
    assert result["old_pid"] != result["new_pid"] and result["new_pid"] in children_of(master.pid)


def test_a_master_without_a_worker_is_still_an_error_after_the_bound(master):
    master.send_signal(signal.SIGSTOP)  # never forks: no worker ever comes
    try:
        result = kill_gunicorn_worker(master.pid, respawn_timeout_s=1.5)
    finally:
        master.send_signal(signal.SIGCONT)
    assert result["error"].startswith(f"no worker under gunicorn master {master.pid}"), result
