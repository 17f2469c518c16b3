"""safesend/bootstrap/warmup.py: the send function builds its runtime and Gmail client in the serving worker
while the instance starts (bench 7/8: send's cold start). functions-framework imports main.py in
gunicorn's master and forks the worker, so the build must start in the forked child, and only in
the send function: status and the others keep their cold start free of the Gmail client."""

from __future__ import annotations

import gc
import json
import logging
import subprocess
import sys
import textwrap

import pytest

from safesend.bootstrap import warmup
from safesend.bootstrap.warmup import WARM_TARGETS, function_target, run_warm_up, warm_after_fork
from tests.unit.test_lazy_mailer import ROOT, stack_like_env

# In the child: wait (bounded) for the warm-up thread, then say what the worker has. The parent
# says what the master has: main.py's import must still import no Gmail client.
FORK_PROBE = textwrap.dedent(
    """
    import json, os, sys, threading, time
    OTHERS = ("grpc", "google.protobuf", "google.cloud.pubsub_v1", "google.cloud.tasks_v2", "google.cloud.firestore",
              "psycopg", "psycopg_pool", "msal", "requests", "safesend.entrypoints.console",
              "safesend.entrypoints.reviewer_auth")
    import main
    from safesend.bootstrap import runtime
    def state():
        mailer = runtime._runtime.service.mailer if runtime._runtime is not None else None
        adapter = mailer._mailer if mailer is not None else None
        return {
            "gmail_imported": "googleapiclient" in sys.modules,
            "runtime_built": runtime._runtime is not None,
            "mailer_built": adapter is not None,
            "discovery_client_built": getattr(adapter, "_service", None) is not None,
            "other_functions_libraries": sorted(
                lib for lib in OTHERS if any(m == lib or m.startswith(lib + ".") for m in sys.modules)
            ),
        }
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and any(t.name == "warm-up" for t in threading.enumerate()):
            time.sleep(0.01)
        time.sleep(0.2)  # a thread that was never started has had time to show its work, too
        os.write(write, json.dumps(state()).encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    child = json.loads(os.read(read, 4096))
    print(json.dumps({"master": state(), "worker": child}))
    """
)


def fork_probe(target: str) -> dict[str, dict[str, bool]]:
    env = {**stack_like_env(), "FUNCTION_TARGET": target}
    done = subprocess.run(
        [sys.executable, "-c", FORK_PROBE],
        cwd=ROOT / "functions",
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result: dict[str, dict[str, bool]] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


NOTHING = {"gmail_imported": False, "runtime_built": False, "mailer_built": False, "discovery_client_built": False}
BUILT = dict.fromkeys(NOTHING, True)


def test_the_send_worker_builds_its_runtime_and_gmail_client_before_any_request() -> None:
    """...the discovery client included (from the bundled static document): the first send builds
    nothing (bench 7: the first request's client build)."""
    seen = fork_probe("send")
    # send's import graph, warmed: none of the libraries only other functions (or the PostgreSQL
    # store, or Graph mailboxes) need: gRPC, protobuf, the Pub/Sub and Tasks clients, psycopg, msal,
    # requests, the console
    assert seen["worker"] == {**BUILT, "other_functions_libraries": []}
    # the master (gunicorn's arbiter: it never serves) imported no Gmail client and built nothing
    assert seen["master"] == {**NOTHING, "other_functions_libraries": []}


@pytest.mark.parametrize("target", ["status", "reconcile", "sweep"])
def test_other_functions_warm_nothing(target: str) -> None:
    seen = fork_probe(target)
    assert seen["worker"] == {**NOTHING, "other_functions_libraries": []}


def test_only_send_is_warmed_and_others_register_no_fork_hook() -> None:
    assert frozenset({"send"}) == WARM_TARGETS
    assert warm_after_fork("status", lambda: None) is False


def test_target_comes_from_the_environment_functions_framework_sets() -> None:
    assert function_target({"FUNCTION_TARGET": "send"}) == "send"
    assert function_target({"GOOGLE_FUNCTION_TARGET": "status", "FUNCTION_TARGET": "send"}) == "status"
    assert function_target({}) == ""


def test_a_failed_warm_up_is_logged_and_left_to_the_first_request(monkeypatch: pytest.MonkeyPatch) -> None:
    logged: list[tuple[int, str, dict[str, object]]] = []
    monkeypatch.setattr(warmup, "log", lambda level, message, **fields: logged.append((level, message, fields)))

    def broken() -> None:
        raise RuntimeError("no credentials yet")

    run_warm_up(broken)  # does not raise
    assert logged == [
        (logging.WARNING, "start-up warm-up failed; the first request builds instead", {"error_type": "RuntimeError"})
    ]
    assert gc.isenabled()  # the collector is back after a failed warm-up too


def test_the_warm_up_builds_with_the_cyclic_collector_paused_and_resumes_it() -> None:
    """The build is imports of long-lived objects: collector passes during it are wasted CPU, and
    what it built is frozen before the collector resumes (no full pass over it on the first request)."""
    seen: list[bool] = []
    gc.unfreeze()
    built = [object(), {}]  # stands for the build's long-lived objects (tracked containers)
    try:
        run_warm_up(lambda: seen.append(gc.isenabled()))
        assert seen == [False] and gc.isenabled()
        assert gc.get_freeze_count() >= len(built)
    finally:
        gc.unfreeze()
    gc.disable()  # a process that had it off keeps it off
    try:
        run_warm_up(lambda: None)
        assert not gc.isenabled()
    finally:
        gc.enable()
