"""Every entry point behind one local HTTP server (dev and tests only; never deployed).

    functions-framework --source devstack/local_app.py --target router --host 127.0.0.1 --port 8080

Routes /send, /decide (the send function serves it, as deployed), /reconcile, /sweep, /status,
/notify, /health and /review to the real entry points in functions/main.py, so the code under test
is exactly what Cloud Functions runs, plus one thing production never has: crash points
(devstack/crash_points.py), armed by the X-Safesend-Fault header.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

_REPO_ROOT = Path(__file__).resolve().parent.parent
for _path in (_REPO_ROOT / "functions", _REPO_ROOT):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import functions_framework  # noqa: E402
from flask import Request  # noqa: E402

import main  # noqa: E402  (functions/main.py)
from devstack import crash_points  # noqa: E402
from safesend.bootstrap.runtime import Runtime, get_runtime  # noqa: E402
from safesend.entrypoints.http_api import HttpApi  # noqa: E402


def _runtime_with_crash_points() -> Runtime:
    runtime = get_runtime()
    crash_points.install(runtime.service)
    return runtime


main._api = HttpApi(_runtime_with_crash_points)  # the entry points read main._api at call time


def _preload_client_libraries() -> None:
    """Import, in gunicorn's master, the client libraries the service imports lazily on its first task
    or review item (~0.4 CPU-s): each worker the master forks inherits them instead of importing them
    again, and the fault storm's chaos kills and respawns workers several times a phase. Imports only,
    no channel or client: gRPC must not start before the fork. Deployed functions keep them lazy."""
    import grpc  # noqa: F401
    from google.api_core import exceptions  # noqa: F401
    from google.cloud import pubsub_v1, tasks_v2  # noqa: F401
    from google.cloud.tasks_v2.services.cloud_tasks.transports import CloudTasksGrpcTransport  # noqa: F401
    from google.protobuf import timestamp_pb2  # noqa: F401


_preload_client_libraries()

ROUTES = {
    "/send": main.send,
    "/decide": main.send,
    "/reconcile": main.reconcile,
    "/sweep": main.sweep,
    "/status": main.status,
    "/mailboxes": main.status,  # the status function serves GET /mailboxes (HttpApi.status)
    "/notify": main.notify,
    "/health": main._api.health,  # local only: no deployed function serves it
}


@functions_framework.http
def router(request: Request) -> Any:  # an entry point's answer, or a 404
    if request.path in ("/", "/review") or request.path.startswith("/review/"):
        return main.review(request)
    handler = ROUTES.get(request.path.rstrip("/") or "/")
    if handler is None:
        return {"error": "not_found", "message": f"no route {request.path}; try {sorted(ROUTES)}"}, 404
    with crash_points.armed(request.headers.get(crash_points.CRASH_HEADER)):
        return handler(request)
