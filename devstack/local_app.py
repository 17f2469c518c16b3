"""Every entry point behind one local HTTP server (dev and tests only; never deployed).

    functions-framework --source devstack/local_app.py --target router --host 127.0.0.1 --port 8080

Routes /send, /reconcile, /sweep, /status and /notify to the real entry points in functions/main.py,
so the code under test is exactly what Cloud Functions runs.
"""

from __future__ import annotations

import sys
from pathlib import Path

_FUNCTIONS_DIR = Path(__file__).resolve().parent.parent / "functions"
if str(_FUNCTIONS_DIR) not in sys.path:
    sys.path.insert(0, str(_FUNCTIONS_DIR))

import functions_framework  # noqa: E402

import main  # noqa: E402  (functions/main.py)

ROUTES = {"/send": main.send, "/reconcile": main.reconcile, "/sweep": main.sweep, "/status": main.status,
          "/notify": main.notify}


@functions_framework.http
def router(request):
    if request.path in ("/", "/review") or request.path.startswith("/review/"):
        return main.review(request)
    handler = ROUTES.get(request.path.rstrip("/") or "/")
    if handler is None:
        return {"error": "not_found", "message": f"no route {request.path}; try {sorted(ROUTES)}"}, 404
    return handler(request)
