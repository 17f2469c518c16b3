"""The local app's gunicorn master imports the client libraries the service imports lazily, so every
worker it forks (the fault storm kills and respawns several a phase) inherits them instead of paying
~0.4 CPU-s again; and it starts no thread (no gRPC channel) before the fork."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LAZY = ("grpc", "google.cloud.tasks_v2", "google.cloud.pubsub_v1", "google.protobuf.timestamp_pb2")

PROBE = f"""
import json, sys, threading
sys.path[:0] = [{str(REPO / "devstack")!r}]
import local_app
print(json.dumps({{"threads": threading.active_count(), **{{name: name in sys.modules for name in {LAZY!r}}}}}))
"""


def test_the_local_app_imports_the_lazy_client_libraries_and_starts_no_thread() -> None:
    env = {
        "GOOGLE_CLOUD_PROJECT": "demo-safesend-preload",
        "SAFESEND_DEFAULT_FROM": "Shop <shop@example.com>",
        "SAFESEND_AUTH_DISABLED": "1",
        "PATH": "/usr/bin:/bin",
    }
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"threads": 1, **dict.fromkeys(LAZY, True)}
