"""safesend/bootstrap/warmup.py: the send function builds its runtime and Gmail client in the serving worker
while the instance starts (bench 7/8: send's cold start). functions-framework imports main.py in
gunicorn's master and forks the worker, so the build must start in the forked child, and only in
the send function: status and the others keep their cold start free of the Gmail client."""

from __future__ import annotations

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
    import main
    from safesend.bootstrap import runtime
    def state():
        mailer = runtime._runtime.service.mailer if runtime._runtime is not None else None
        return {
            "gmail_imported": "googleapiclient" in sys.modules,
            "runtime_built": runtime._runtime is not None,
            "mailer_built": mailer is not None and mailer._mailer is not None,
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


def test_the_send_worker_builds_its_runtime_and_gmail_client_before_any_request() -> None:
    seen = fork_probe("send")
    assert seen["worker"] == {"gmail_imported": True, "runtime_built": True, "mailer_built": True}
    # the master (gunicorn's arbiter: it never serves) imported no Gmail client and built nothing
    assert seen["master"] == {"gmail_imported": False, "runtime_built": False, "mailer_built": False}


@pytest.mark.parametrize("target", ["status", "reconcile", "sweep"])
def test_other_functions_warm_nothing(target: str) -> None:
    seen = fork_probe(target)
    assert seen["worker"] == {"gmail_imported": False, "runtime_built": False, "mailer_built": False}


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
