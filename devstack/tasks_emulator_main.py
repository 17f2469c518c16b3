"""Run gcloud-tasks-emulator bound to 127.0.0.1 only.

Runs INSIDE .venv-tasks (gcloud-tasks-emulator==0.6.2 pins protobuf<5, which
the project's venv cannot have). Started by devstack.emulators.CloudTasksEmulator.

Why not `python -m gcloud_tasks_emulator start`:
- upstream binds the gRPC server to [::] (every interface, no auth) and has no
  host flag; we replace APIThread.run to bind 127.0.0.1:PORT only and to fail
  loudly (exit 4) when the port cannot be bound, instead of running deaf;
- upstream retries failed tasks forever by default (every ~0.1 s); here
  --max-retries defaults to 5 and must be >= 0;
- upstream dispatches with urlopen() without a timeout and through any
  configured HTTP proxy; here dispatch is direct and bounded (--dispatch-timeout);
- SIGTERM is turned into a prompt, clean shutdown with a hard-exit watchdog;
- upstream ignores a queue's rate_limits and dispatches one task at a time; a queue created (or
  updated) with rate_limits is dispatched here as Cloud Tasks documents it (devstack/task_pacing.py:
  token bucket of max_burst_size refilled at max_dispatches_per_second, at most
  max_concurrent_dispatches in flight, retries count as dispatches), and GetQueue shows the derived
  max_burst_size. A queue without rate_limits keeps upstream's one-at-a-time dispatch.
  Each paced dispatch carries X-Devstack-Dispatch-Granted: the CLOCK_MONOTONIC second (system-wide
  on Linux) at which the pacer granted it, so a test checks the pacing itself and not the loopback
  and thread scheduling between the grant and the receiver (a busy machine bunches those).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import logging
import os
import re
import signal
import sys
import threading
import time
import types
import urllib.error
import urllib.request
import warnings
from collections.abc import Sequence
from concurrent import futures
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

BIND_HOST = "127.0.0.1"
EXIT_MISSING = 3
EXIT_BIND = 4
_SHUTDOWN_GRACE_SECONDS = 5.0
_QUEUE_RE = re.compile(r"^projects/[^/]+/locations/[^/]+/queues/[^/]+$")
_LOOP_SLEEP_S = 0.1  # upstream's poll interval
_WAIT_STEP_S = 0.01  # re-check interval while a paced queue waits for a token or a free slot
_DISPATCH_WORKERS = 64  # threads per paced queue: the local ceiling of max_concurrent_dispatches
GRANTED_HEADER = "X-Devstack-Dispatch-Granted"

_dispatch_context = threading.local()  # the grant time of the paced dispatch this thread is sending

logger = logging.getLogger("tasks_emulator_main")


def _load_task_pacing() -> Any:
    """devstack/task_pacing.py by file: this runs with -I (no script directory on sys.path)."""
    path = Path(__file__).resolve().with_name("task_pacing.py")
    spec = importlib.util.spec_from_file_location("safesend_task_pacing", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


task_pacing = _load_task_pacing()


def _queue_path(value: str) -> str:
    if not _QUEUE_RE.match(value):
        raise argparse.ArgumentTypeError(f"{value!r} is not a full queue path (projects/P/locations/L/queues/Q)")
    return value


def _non_negative(value: str) -> int:
    number = int(value)
    if number < 0:
        raise argparse.ArgumentTypeError("must be >= 0 (retrying forever is not allowed)")
    return number


def _port(value: str) -> int:
    number = int(value)
    if not 0 < number < 65536:
        raise argparse.ArgumentTypeError("must be in 1..65535")
    return number


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Cloud Tasks emulator on 127.0.0.1 (runs in .venv-tasks)")
    parser.add_argument("--port", type=_port, required=True, help="gRPC port on 127.0.0.1")
    parser.add_argument(
        "--max-retries",
        type=_non_negative,
        default=5,
        help="retries after a failed dispatch before the task is dropped (default 5)",
    )
    parser.add_argument(
        "--queue", type=_queue_path, action="append", default=[], help="queue to create at start, full path; repeatable"
    )
    parser.add_argument(
        "--dispatch-timeout", type=float, default=60.0, help="seconds to wait for a task target to answer (default 60)"
    )
    return parser.parse_args(argv)


class _Response:
    """What upstream reads from a dispatch response: only .status."""

    def __init__(self, status: int) -> None:
        self.status = status


def _make_request_shim(timeout: float) -> types.SimpleNamespace:
    """Stand-in for the `urllib.request` module inside gcloud_tasks_emulator.server.

    No proxies, a timeout, and the response is read and closed right away.
    HTTPError (4xx/5xx) still propagates, which upstream turns into a retry.
    """
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def urlopen(req: urllib.request.Request) -> _Response:
        granted = getattr(_dispatch_context, "granted_at", None)
        if granted is not None:
            req.add_header(GRANTED_HEADER, f"{granted:.6f}")
        with opener.open(req, timeout=timeout) as resp:
            resp.read()
            return _Response(int(resp.status))

    return types.SimpleNamespace(Request=urllib.request.Request, urlopen=urlopen)


def _patch_server(server_mod: Any, grpc: Any, dispatch_timeout: float) -> None:
    """Bind loopback only and bound the dispatch; see the module docstring."""

    def run(self: Any) -> None:  # replaces APIThread.run
        httpd = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        server_mod.add_CloudTasksServicer_to_server(server_mod.Greeter(self._state), httpd)
        address = f"{BIND_HOST}:{self._port}"
        try:
            bound = httpd.add_insecure_port(address)
        except RuntimeError as exc:  # grpcio >= 1.50 raises instead of returning 0
            logger.error("cannot bind %s: %s", address, exc)
            bound = 0
        if bound != self._port:
            logger.error("cannot listen on %s (port in use?); exiting", address)
            logging.shutdown()
            os._exit(EXIT_BIND)
        self._httpd = httpd
        httpd.start()
        logger.info("Cloud Tasks emulator listening on %s", address)

    server_mod.APIThread.run = run
    server_mod.request = _make_request_shim(dispatch_timeout)


def _limits_of(queue: Any) -> Any:
    """The queue's effective QueueRateLimits, or None when it was created without rate_limits."""
    rate = float(queue.rate_limits.max_dispatches_per_second)
    concurrent = int(queue.rate_limits.max_concurrent_dispatches)
    if not rate and not concurrent:
        return None
    return task_pacing.QueueRateLimits.from_queue(rate, concurrent)


def _patch_rate_limits(server_mod: Any, exceptions: Any) -> None:
    """Queues keep (and show) their rate limits; queues that have them are dispatched paced."""
    original_create = server_mod.QueueState.create_queue
    tasks_lock = threading.Lock()  # taking a task out of / back into a paced queue's list

    def checked(queue: Any) -> Any:
        try:
            limits = _limits_of(queue)
        except ValueError as exc:
            raise exceptions.InvalidArgument(str(exc)) from None
        if limits is not None:
            queue.rate_limits.max_burst_size = limits.max_burst_size  # output only: derived
        return limits

    def create_queue(self: Any, parent: Any, queue: Any) -> Any:
        if queue.name not in self._queues:
            checked(queue)
        return original_create(self, parent, queue)

    def update_queue(self: Any, queue: Any) -> Any:
        if queue.name not in self._queues:
            return create_queue(self, None, queue)
        if queue.rate_limits.max_dispatches_per_second or queue.rate_limits.max_concurrent_dispatches:
            checked(queue)
            self._queues[queue.name].rate_limits = queue.rate_limits
        return self._queues[queue.name]

    def dispatch(state: Any, queue_name: str, task: Any, pacer: Any, granted_at: float) -> None:
        """Upstream's submit_task for one task already taken out of the list, then the slot is freed."""
        _dispatch_context.granted_at = granted_at
        try:
            task.dispatch_count += 1
            try:
                status = int(
                    server_mod._make_task_request(queue_name, task, state._target_host, state._target_port).status
                )
            except urllib.error.HTTPError as exc:
                status = exc.code
            except Exception:  # a failed dispatch is retried like upstream's
                logger.exception("[TASKS] dispatch of %s failed", task.name)
                status = 500
            if 400 <= status < 600 and task.dispatch_count <= state._max_retries:
                with tasks_lock:
                    tasks = state._queue_tasks.get(queue_name)
                    if tasks is not None:
                        tasks.append(task)
        finally:
            _dispatch_context.granted_at = None
            pacer.release()

    def take(state: Any, queue_name: str, task: Any) -> bool:
        with tasks_lock:
            tasks = state._queue_tasks.get(queue_name)
            for i, candidate in enumerate(tasks or ()):
                if candidate is task:
                    del tasks[i]
                    return True
        return False

    def due(task: Any) -> bool:
        return not task.schedule_time or task.schedule_time < datetime.now(UTC)

    def process_queue(self: Any, queue_name: str) -> None:  # replaces Processor._process_queue
        pool = futures.ThreadPoolExecutor(max_workers=_DISPATCH_WORKERS, thread_name_prefix="tasks-dispatch")
        pacer: Any = None
        try:
            while self._is_running.is_set():
                state = self._state
                if queue_name not in state._queues or queue_name not in state._queue_tasks:
                    break
                queue = state.queue(queue_name)
                if queue.state == server_mod.Queue.State.RUNNING:
                    limits = _limits_of(queue)
                    if limits is None:  # upstream's behaviour, unchanged
                        for task in state._queue_tasks[queue_name][:]:
                            state.submit_task(task.name)
                    else:
                        if pacer is None or pacer.limits != limits:
                            pacer = task_pacing.DispatchPacer(limits)
                        for task in [t for t in state._queue_tasks[queue_name][:] if due(t)]:
                            if not self._wait_for_slot(pacer):
                                break
                            granted_at = time.monotonic()
                            if take(state, queue_name, task):
                                pool.submit(dispatch, state, queue_name, task, pacer, granted_at)
                            else:
                                pacer.release()  # purged or run meanwhile: the token is spent anyway
                time.sleep(_LOOP_SLEEP_S)
        finally:
            pool.shutdown(wait=False, cancel_futures=True)

    def wait_for_slot(self: Any, pacer: Any) -> bool:
        """Block until the pacer grants a dispatch (True), or the processor stops (False)."""
        while self._is_running.is_set():
            wait = pacer.try_acquire()
            if wait == 0.0:
                return True
            time.sleep(_WAIT_STEP_S if wait is None else min(max(wait, 0.001), _LOOP_SLEEP_S))
        return False

    server_mod.QueueState.create_queue = create_queue
    server_mod.QueueState.update_queue = update_queue
    server_mod.Processor._process_queue = process_queue
    server_mod.Processor._wait_for_slot = wait_for_slot


def _install_signal_handlers() -> None:
    """SIGTERM/SIGINT -> KeyboardInterrupt, which upstream Server.run() handles by stopping.

    A daemon watchdog hard-exits if the clean shutdown takes too long (e.g. a
    dispatch thread stuck on a slow target).
    """

    def handler(signum: int, frame: object) -> None:
        watchdog = threading.Timer(_SHUTDOWN_GRACE_SECONDS, os._exit, args=(128 + signum,))
        watchdog.daemon = True
        watchdog.start()
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # google-api-core nags about Python 3.11 end of life on every start; keep the log readable.
    warnings.filterwarnings("ignore", message="You are using a Python version", category=FutureWarning)
    try:
        import grpc
        from gcloud_tasks_emulator import server as server_mod
        from google.api_core import exceptions
    except ImportError as exc:
        print(
            f"tasks_emulator_main: cannot import gcloud_tasks_emulator ({exc}) with {sys.executable}; "
            f"run scripts/bootstrap.sh to create .venv-tasks",
            file=sys.stderr,
        )
        return EXIT_MISSING

    _patch_server(server_mod, grpc, args.dispatch_timeout)
    _patch_rate_limits(server_mod, exceptions)
    _install_signal_handlers()
    logger.info("starting: port=%s max_retries=%s queues=%s", args.port, args.max_retries, args.queue)
    server = server_mod.create_server(
        BIND_HOST,
        args.port,
        default_queue_names=args.queue,
        max_retries=args.max_retries,
    )
    with contextlib.suppress(KeyboardInterrupt):
        server.run()  # returns after KeyboardInterrupt, having called server.stop()
    logger.info("stopped")
    return 0


if __name__ == "__main__":
    code = main()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    # Hard exit: upstream leaves non-daemon worker threads that would delay interpreter exit.
    os._exit(code)
