"""HTTP handlers: parse the request, call the service, map outcomes to status codes. No decisions here."""

from __future__ import annotations

import logging
import os
from typing import Any, Callable

from flask import Request

from .errors import (ConfigurationError, MailboxUnavailableError, PayloadMismatchError,
                     PublishError, RequestValidationError, SimulatedCrashError, StoreUnavailableError)
from .keys import job_id_for
from .logs import log, set_trace_from_headers
from .runtime import Runtime
from .service import FaultPlan
from .validation import dedup_key_from_query, parse_send_request
from .views import http_status_for, job_view

Response = tuple[dict[str, Any], int, dict[str, str]]
JSON = {"Content-Type": "application/json"}
FAULT_HEADER = "X-Safesend-Fault"


def _error(status: int, code: str, message: str, **extra: Any) -> Response:
    headers = dict(JSON)
    if status == 503:
        headers["Retry-After"] = "5"
    return {"error": code, "message": message, **extra}, status, headers


def _method_not_allowed(allowed: str) -> Response:
    return {"error": "method_not_allowed", "message": f"use {allowed}"}, 405, {**JSON, "Allow": allowed}


class HttpApi:
    def __init__(self, runtime_factory: Callable[[], Runtime]):
        self._runtime_factory = runtime_factory

    def _prepare(self, request: Request) -> Runtime:
        runtime = self._runtime_factory()
        set_trace_from_headers(request.headers, runtime.settings.project)
        return runtime

    def send(self, request: Request) -> Response:
        if request.method != "POST":
            return _method_not_allowed("POST")
        try:
            runtime = self._prepare(request)
        except ConfigurationError as exc:
            log(logging.CRITICAL, "configuration error", error=str(exc))
            return _error(500, "configuration_error", str(exc))
        body = request.get_json(silent=True)
        try:
            parsed = parse_send_request(body, runtime.settings.default_from,
                                        frozenset(runtime.policies.names()))
            job, replayed = runtime.service.submit(parsed, self._faults(request, runtime))
        except RequestValidationError as exc:
            return _error(400, "invalid_request", "the request has invalid fields", fields=exc.fields)
        except PayloadMismatchError as exc:
            return _error(422, "payload_mismatch", str(exc), job_id=exc.job_id)
        except StoreUnavailableError as exc:
            log(logging.ERROR, "job store unavailable before claim", error=str(exc))
            return _error(503, "store_unavailable", "nothing was sent; retry later")
        except SimulatedCrashError:
            log(logging.CRITICAL, "fault injection: terminating the instance")
            os._exit(70)
        return job_view(job, replayed=replayed), http_status_for(job), dict(JSON)

    def reconcile(self, request: Request) -> Response:
        if request.method != "POST":
            return _method_not_allowed("POST")
        runtime = self._prepare(request)
        body = request.get_json(silent=True) or {}
        job_id = body.get("job_id") if isinstance(body, dict) else None
        if not isinstance(job_id, str) or not job_id:
            return _error(400, "invalid_request", "job_id is required", fields={"job_id": "required"})
        try:
            job, action = runtime.service.advance(job_id, self._faults(request, runtime))
        except (MailboxUnavailableError, StoreUnavailableError, PublishError) as exc:
            log(logging.WARNING, "reconcile deferred", job_id=job_id, error=str(exc))
            return _error(503, "try_again", str(exc))  # Cloud Tasks retries with backoff
        except SimulatedCrashError:
            os._exit(70)
        log(logging.INFO, "reconcile", job_id=job_id, action=action,
            task=request.headers.get("X-CloudTasks-TaskName"),
            retry=request.headers.get("X-CloudTasks-TaskRetryCount"))
        return {"job_id": job_id, "action": action, "state": job.state.value if job else None}, 200, dict(JSON)

    def sweep(self, request: Request) -> Response:
        if request.method not in ("POST", "GET"):
            return _method_not_allowed("POST")
        runtime = self._prepare(request)
        try:
            report = runtime.service.sweep(runtime.settings.sweep_batch, runtime.settings.sweep_budget_s)
        except StoreUnavailableError as exc:
            return _error(503, "store_unavailable", str(exc))
        log(logging.INFO, "sweep done", examined=report.examined, actions=report.actions,
            errors=report.errors, stopped_early=report.stopped_early)
        return ({"examined": report.examined, "actions": report.actions, "errors": report.errors,
                 "stopped_early": report.stopped_early}, 200, dict(JSON))

    def status(self, request: Request) -> Response:
        if request.method != "GET":
            return _method_not_allowed("GET")
        runtime = self._prepare(request)
        job_id = request.args.get("job_id")
        if not job_id:
            key = dedup_key_from_query(request.args)
            if key is None:
                return _error(400, "invalid_request",
                              "give job_id, dedup_key, or customer_id + event_type + order_id")
            job_id = job_id_for(key)
        try:
            job = runtime.service.store.get(job_id)
        except StoreUnavailableError as exc:
            return _error(503, "store_unavailable", str(exc))
        if job is None:
            return _error(404, "not_found", f"no job {job_id}", job_id=job_id)
        return job_view(job, with_events=True), 200, dict(JSON)

    @staticmethod
    def _faults(request: Request, runtime: Runtime) -> FaultPlan | None:
        """Crash points for end-to-end tests; ignored unless SAFESEND_ENABLE_FAULT_INJECTION is on."""
        header = request.headers.get(FAULT_HEADER)
        if not header or not runtime.settings.enable_fault_injection:
            return None
        return FaultPlan({p.strip() for p in header.split(",") if p.strip()})
