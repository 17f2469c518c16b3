"""The local stack the issue-5 suite runs against, with production delays scaled down by TIME_SCALE.

Production defaults (safesend.config / lifecycle.Timing): send timeout 20 s, lease 120 s, index lag
90 s, unknown window 300 s, recheck 60 s, publish lease 60 s, change-log check 5 s. Here every one
of them is divided by TIME_SCALE, and so are the simulator's lags (Gmail's search index 60 s, its
change log 2 s), so a reconcile cycle keeps its shape (same number of checks, same order of events)
in a tenth of the time. Only benchmark 6 (time to certainty) depends on these delays; it reports
production-equivalent (x TIME_SCALE) times.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from devstack.emulators import ManagedProcess, free_port
from devstack.procs import tree_cpu_s
from devstack.stack import PROJECT, REPO_ROOT, LocalStack, StackConfig

from .bytecode import compile_like_the_buildpack
from .common import typical_body
from .cpushare import CpuShare

TIME_SCALE = 10.0
GMAIL_INDEX_LAG_S = 60.0  # what benchmark 6 models (scaled: 6 s)
# Gmail's change log (history.list) lists a message as it is added; 2 s is a margin over "at once",
# under the 5 s SAFESEND_HISTORY_CHECK_S (scaled: 0.2 s). Not measured on real Gmail: the drill does.
GMAIL_HISTORY_LAG_S = 2.0
PRODUCTION = {  # env var -> production default (seconds)
    "SAFESEND_SEND_TIMEOUT_S": 20.0,
    "SAFESEND_LEASE_S": 120.0,
    "SAFESEND_INDEX_LAG_S": 90.0,
    "SAFESEND_UNKNOWN_WINDOW_S": 300.0,
    "SAFESEND_RECHECK_S": 60.0,
    "SAFESEND_PUBLISH_LEASE_S": 60.0,
    "SAFESEND_VERIFY_HORIZON_S": 1800.0,
    "SAFESEND_HISTORY_CHECK_S": 5.0,
}
STACK_THREADS = 16  # devstack/stack.py starts functions-framework with THREADS=16
CHANNEL = "transactional"  # on_unknown = retry (functions/channels.toml)
REVIEW_CHANNEL = "payments"  # on_unknown = review


def stack_config(log_dir: Path) -> StackConfig:
    base = StackConfig()
    env = dict(base.service_env)  # keeps the short read timeout, budget and quick-retry backoff
    for name, seconds in PRODUCTION.items():
        env[name] = f"{seconds / TIME_SCALE:g}"
    # Auth off: the benchmarks compare the send path with a direct Gmail send; an API-key check is
    # one sha256 (microseconds) and would only add a header to every client here.
    return StackConfig(log_dir=log_dir, sim_index_lag_s=GMAIL_INDEX_LAG_S / TIME_SCALE, service_env=env, auth=False)


def scaled_env_text() -> str:
    return ", ".join(f"{k.removeprefix('SAFESEND_').lower()} {v / TIME_SCALE:g}" for k, v in PRODUCTION.items())


def send_body(key: str, channel: str = CHANNEL) -> dict:
    """The typical request (text + html, 2 to + 1 cc) on a stack channel."""
    body = typical_body(key)
    body["channel"] = channel
    return body


@contextlib.contextmanager
def firestore_env(stack: LocalStack) -> Iterator[None]:
    """In-process Firestore clients talk to the stack's emulator while this is open."""
    previous = os.environ.get("FIRESTORE_EMULATOR_HOST")
    os.environ["FIRESTORE_EMULATOR_HOST"] = stack.emulators.firestore.host
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("FIRESTORE_EMULATOR_HOST", None)
        else:
            os.environ["FIRESTORE_EMULATOR_HOST"] = previous


SIM_BACKLOG = 128


def prepare_sim(sim: Any) -> None:
    """The stack's simulator as the suite needs it: a wide accept backlog and Gmail's change-log lag."""
    widen_sim_backlog(sim)
    sim.set_history_lag(GMAIL_HISTORY_LAG_S / TIME_SCALE)


def widen_sim_backlog(sim: object) -> bool:
    """Re-listen the simulator's socket with a backlog of SIM_BACKLOG. Its ThreadingHTTPServer keeps
    socketserver's default request_queue_size of 5: 16 concurrent fresh connections from the relay
    overflow it and some get ConnectionResetError (a 502 from the relay). Only the benchmark does
    this; devstack/ is left as it is."""
    server = getattr(sim, "_server", None)
    sock = getattr(server, "socket", None)
    if sock is None:
        return False
    sock.listen(SIM_BACKLOG)
    return True


def functions_process(
    stack: LocalStack,
    source: Path,
    target: str,
    threads: int | None,
    name: str,
    port: int | None = None,
    extra_env: dict[str, str] | None = None,
    cpu: CpuShare | None = None,
) -> tuple[ManagedProcess, str]:
    """functions-framework for `source`/`target` with the stack's environment (plus `extra_env`, e.g.
    another job store). threads=None leaves THREADS unset, i.e. functions-framework's default
    (os.cpu_count() * 4), as deployed. `cpu`: run it on that CPU share (bench/cpushare.py). The
    source directory is byte-compiled first, as the deployed platform's build does (bench/bytecode.py)."""
    compile_like_the_buildpack(source.parent)
    port = port or free_port()
    env = {**os.environ, **stack.service_env(), "PYTHONUNBUFFERED": "1", **(extra_env or {})}
    env.pop("THREADS", None)
    if threads is not None:
        env["THREADS"] = str(threads)
    argv = [
        sys.executable,
        "-m",
        "functions_framework",
        "--source",
        str(source),
        "--target",
        target,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    if cpu is not None:
        argv = cpu.wrap(argv)
    proc = ManagedProcess(argv, name=name, log_dir=stack.log_dir, env=env, cwd=REPO_ROOT)
    return proc, f"http://127.0.0.1:{port}"


def app_instance(
    stack: LocalStack, name: str, extra_env: dict[str, str], timeout_s: float = 60.0
) -> tuple[ManagedProcess, str]:
    """Another instance of the stack's app (devstack/local_app.py, THREADS=16, the stack's environment
    plus `extra_env`) with Cloud Tasks calling back into itself, started and answering."""
    port = free_port()
    env = {"SAFESEND_RECONCILE_URL": f"http://127.0.0.1:{port}/reconcile", **extra_env}
    source = REPO_ROOT / "devstack" / "local_app.py"
    proc, url = functions_process(stack, source, "router", STACK_THREADS, name, port=port, extra_env=env)
    proc.start()
    if wait_http(f"{url}/status?job_id={'0' * 32}", timeout_s=timeout_s) is None:  # builds the runtime
        proc.stop()
        raise RuntimeError(f"functions instance {name} did not answer in {timeout_s:.0f} s: {proc.log_tail()}")
    return proc, url


def wait_http(url: str, timeout_s: float, interval_s: float = 0.01, answer: dict | None = None) -> float | None:
    """Poll until `url` answers anything over HTTP; the monotonic time of the answer, or None.
    `answer`, if given, receives the status and the first bytes of the body."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                body = response.read(300)
                status = response.status
        except urllib.error.HTTPError as exc:
            body, status = exc.read(300), exc.code
        except OSError:
            time.sleep(interval_s)
            continue
        if answer is not None:
            answer.update(status=status, body=body.decode("utf-8", "replace"))
        return time.monotonic()
    return None


def proc_tree_cpu_s(pid: int | None) -> float:
    """user + system CPU seconds of `pid` and its descendants (from /proc); 0.0 if unavailable."""
    if pid is None:
        return 0.0
    try:
        return tree_cpu_s(pid)
    except (OSError, ValueError, IndexError):
        return 0.0


__all__ = [
    "CHANNEL",
    "GMAIL_HISTORY_LAG_S",
    "GMAIL_INDEX_LAG_S",
    "PROJECT",
    "REPO_ROOT",
    "REVIEW_CHANNEL",
    "STACK_THREADS",
    "TIME_SCALE",
    "LocalStack",
    "app_instance",
    "firestore_env",
    "functions_process",
    "prepare_sim",
    "proc_tree_cpu_s",
    "scaled_env_text",
    "send_body",
    "stack_config",
    "wait_http",
]
