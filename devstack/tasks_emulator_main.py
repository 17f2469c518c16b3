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
- SIGTERM is turned into a prompt, clean shutdown with a hard-exit watchdog.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import re
import signal
import sys
import threading
import types
import urllib.request
import warnings
from collections.abc import Sequence
from concurrent import futures
from typing import Any

BIND_HOST = "127.0.0.1"
EXIT_MISSING = 3
EXIT_BIND = 4
_SHUTDOWN_GRACE_SECONDS = 5.0
_QUEUE_RE = re.compile(r"^projects/[^/]+/locations/[^/]+/queues/[^/]+$")

logger = logging.getLogger("tasks_emulator_main")


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
    except ImportError as exc:
        print(
            f"tasks_emulator_main: cannot import gcloud_tasks_emulator ({exc}) with {sys.executable}; "
            f"run scripts/bootstrap.sh to create .venv-tasks",
            file=sys.stderr,
        )
        return EXIT_MISSING

    _patch_server(server_mod, grpc, args.dispatch_timeout)
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
