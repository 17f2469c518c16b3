"""Start-up warm-up: the send function builds its runtime and Gmail client while the instance starts.

Why: a send's cold start was x2.2-2.5 of a hello-world function (bench 7), nearly all of it
importing googleapiclient, httplib2 and google-auth on the first request. Importing them when
functions/main.py is imported would only move the cost into the start-up, and every other function
(status above all) would pay it too. Instead the send function's serving process starts one
background thread that builds the runtime and the Gmail adapter, so the work overlaps the worker's
start and the first request's own waits (parsing, the claim's round trip to the store); the first
request takes the runtime's and the mailer's locks, i.e. it joins the build if it is still running.

functions-framework imports main.py in gunicorn's master process, then forks the worker that
serves requests: a thread started at import would not exist in the worker (threads do not survive
fork) and could be forked while holding an import lock. So the thread is started in the child, by
an `os.register_at_fork(after_in_child=...)` hook (once per worker: gunicorn starts a new one if a
worker dies). A process that never forks (functions-framework --debug, tests) builds on first use,
as before. A warm-up that fails is logged and left to the first request, which builds again.

The build is mostly imports (googleapiclient, httplib2, google-auth: ~10^5 objects that live as long
as the instance), and the cyclic garbage collector's passes over them while they are created find
nothing to free: paused for the build, it costs about a fifth less CPU
(bench/results/2026-12-01-send-coldstart-simulator.md). The pause is process-wide for those
~0.1 s; reference counting still frees everything that is not in a cycle. Resumed as it was, the
collector would then owe a full pass over every object (~25 ms at the build's ~70,000), on the
first request's path: so what exists by then is frozen first (gc.freeze: moved to a generation the
collector never scans, the pattern Python's documentation gives for pre-fork servers, where the
master also freezes before forking). Those objects are the instance's modules and clients, kept
for its lifetime anyway.
"""

from __future__ import annotations

import gc
import logging
import os
import threading
from collections.abc import Callable, Mapping

from ..logs import log

WARM_TARGETS = frozenset({"send"})  # functions whose every request needs the Gmail client
THREAD_NAME = "warm-up"


def function_target(env: Mapping[str, str] | None = None) -> str:
    """The function this process serves (functions-framework sets FUNCTION_TARGET before importing main.py)."""
    env = os.environ if env is None else env
    return env.get("GOOGLE_FUNCTION_TARGET") or env.get("FUNCTION_TARGET") or ""


def run_warm_up(warm: Callable[[], None]) -> None:
    """Run `warm` with the cyclic collector paused, logging instead of raising: the first request
    builds what it could not."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        warm()
    except Exception as exc:  # noqa: BLE001 - an optimisation: never take the worker down
        log(logging.WARNING, "start-up warm-up failed; the first request builds instead", error_type=type(exc).__name__)
    finally:
        gc.freeze()
        if collecting:
            gc.enable()


def start_warm_up(warm: Callable[[], None]) -> threading.Thread:
    thread = threading.Thread(target=run_warm_up, args=(warm,), name=THREAD_NAME, daemon=True)
    thread.start()
    return thread


def warm_after_fork(target: str, warm: Callable[[], None]) -> bool:
    """Arrange `warm` to run in a background thread of each forked child when `target` is one of
    WARM_TARGETS (the master freezing its imports before it forks); False (nothing arranged) for
    the others."""
    if target not in WARM_TARGETS:
        return False

    def in_child() -> None:
        start_warm_up(warm)

    os.register_at_fork(before=gc.freeze, after_in_child=in_child)
    return True
