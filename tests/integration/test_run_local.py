"""`scripts/run-local.sh` (devstack.stack's run_foreground) stops everything it started on Ctrl-C,
`kill` or a closed terminal, also when it was started in the background, where the shell hands it
SIGINT ignored (found by hand: `bash scripts/run-local.sh &` then `kill -INT` left it running)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from devstack.emulators import free_port
from devstack.procs import alive, descendants

REPO = Path(__file__).resolve().parents[2]
BANNER_END = "Ctrl-C stops everything."


def ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # what a non-interactive shell does to a `&` job


@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_run_local_stops_everything_it_started_on_a_signal_even_as_a_background_job(stop_signal, tmp_path):
    env = {**os.environ, "SAFESEND_PORT": str(free_port()), "PYTHONUNBUFFERED": "1"}
    env.pop("SAFESEND_GMAIL_CREDENTIALS_FILE", None)
    env.pop("SAFESEND_GMAIL_CREDENTIALS_JSON", None)
    out = (tmp_path / "out.txt").open("w+")
    proc = subprocess.Popen(
        [sys.executable, "-m", "devstack.stack", "--no-auth"],
        cwd=REPO,
        env=env,
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=ignore_sigint,  # noqa: PLW1509 - the point of the test: start it as a shell's `&` job would
    )
    try:
        deadline = time.monotonic() + 120
        while BANNER_END not in (tmp_path / "out.txt").read_text() and time.monotonic() < deadline:
            assert proc.poll() is None, (tmp_path / "out.txt").read_text()
            time.sleep(0.2)
        assert BANNER_END in (tmp_path / "out.txt").read_text(), "the stack did not start in 120 s"
        started = descendants(proc.pid)
        assert started, "the stack started no processes?"
        proc.send_signal(stop_signal)
        assert proc.wait(timeout=60) == 0
        deadline = time.monotonic() + 20
        while any(alive(p) for p in started) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not [p for p in started if alive(p)], "processes left running after the stack stopped"
    finally:
        if proc.poll() is None:  # a failed check: stop what it started, children first
            for pid in descendants(proc.pid):
                with_suppressed_kill(pid)
            with_suppressed_kill(proc.pid)
            proc.wait(timeout=30)
        out.close()


def with_suppressed_kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
