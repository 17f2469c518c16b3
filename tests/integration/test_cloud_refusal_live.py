"""Issue 18.9 on the stack: the local app (devstack/local_app.py under functions-framework, the
entry points Cloud Functions runs) with K_SERVICE set and a local-only switch refuses to start and
never answers; the same environment without K_SERVICE serves (the switch itself is fine locally)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
import requests

from devstack.emulators import ManagedProcess, ProcessStartError, free_port

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 30.0


def local_app(log_dir: Path, name: str, **extra_env: str) -> tuple[ManagedProcess, str]:
    port = free_port()
    env = {
        "GOOGLE_CLOUD_PROJECT": "demo-safesend-cloud-refusal",
        "SAFESEND_DEFAULT_FROM": "Shop <shop@example.com>",
        "SAFESEND_GMAIL_API_ENDPOINT": "http://127.0.0.1:9/",
        "SAFESEND_REVIEW_DEV_IDENTITY": "dev@localhost",
        "SAFESEND_REVIEW_CSRF_SECRET": "c" * 64,
        "SAFESEND_REVIEW_CONSOLE_URL": f"http://127.0.0.1:{port}",
        "PATH": "/usr/bin:/bin",
        **extra_env,
    }
    argv = [sys.executable, "-m", "functions_framework", "--source", str(REPO / "devstack" / "local_app.py")]
    argv += ["--target", "router", "--host", "127.0.0.1", "--port", str(port)]
    return ManagedProcess(argv, name=name, log_dir=log_dir, env=env, cwd=REPO), f"http://127.0.0.1:{port}"


def answers(url: str) -> bool:
    """The app answers at all (an unknown route: the router's own 404, no store involved)."""
    try:
        return requests.get(f"{url}/no-such-route", timeout=2).status_code == 404
    except requests.RequestException:
        return False


@pytest.mark.parametrize("switch", ["SAFESEND_AUTH_DISABLED", "SAFESEND_CALLBACK_ALLOW_HTTP"])
def test_the_local_app_on_cloud_run_with_a_local_only_switch_refuses_to_start(tmp_path, switch):
    process, url = local_app(tmp_path, "cloud-refusal", K_SERVICE="safesend-send", **{switch: "1"})
    process.start()
    try:
        with pytest.raises(ProcessStartError, match="exited with code"):
            process.wait_ready(lambda: answers(url), timeout=START_TIMEOUT_S, what="serving HTTP")
        assert not answers(url)
        log = process.log_tail(max_lines=200)
        assert "refusing to start" in log and switch in log and "refused on Cloud Run" in log
    finally:
        process.stop()


def test_the_same_local_app_without_k_service_serves(tmp_path):
    process, url = local_app(tmp_path, "local-control", SAFESEND_AUTH_DISABLED="1", SAFESEND_CALLBACK_ALLOW_HTTP="1")
    process.start()
    try:
        started = time.monotonic()
        process.wait_ready(lambda: answers(url), timeout=START_TIMEOUT_S, what="serving HTTP")
        assert time.monotonic() - started < START_TIMEOUT_S
    finally:
        process.stop()
