"""HTTP handlers: parse the request, call the service, map outcomes to status codes. No decisions here."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any

from flask import Request

from ..core.auth import AuthenticationError, PermissionDeniedError, Role
from ..core.errors import (
    CallbackNotStoredError,
    ConfigurationError,
    DecisionConflictError,
    DecisionNotAllowedError,
    IndexMissingError,
    MailboxUnavailableError,
    PayloadMismatchError,
    PublishError,
    RequestValidationError,
    StaleReviewError,
    StoreUnavailableError,
)
from ..core.index_lag import is_probe_step
from ..core.keys import is_job_id, job_id_for
from ..core.signals import INDEX_MISSING, INTERNAL_CALL_REFUSED, STORE_UNAVAILABLE, SWEEP_COMPLETED, emit
from ..core.validation import dedup_key_from_query, parse_send_request
from ..logs import log, mask_emails, set_trace_from_headers
from ..usecases.lag_watch import incident_text_from
from .api_decisions import allowed_decider, parse_decision_request, recorded_reviewer
from .request_body import detach_body, discard_rest, read_capped
from .views import http_status_for, job_view, retry_after_s

if TYPE_CHECKING:  # a type only: the composition root (bootstrap) sits above the entry points
    from ..bootstrap.runtime import Runtime

Response = tuple[dict[str, Any], int, dict[str, str]]
JSON = {"Content-Type": "application/json"}


def _error(status: int, code: str, message: str, **extra: Any) -> Response:
    headers = dict(JSON)
    if status == 503:
        headers["Retry-After"] = "5"
    return {"error": code, "message": message, **extra}, status, headers


def _method_not_allowed(allowed: str) -> Response:
    return {"error": "method_not_allowed", "message": f"use {allowed}"}, 405, {**JSON, "Allow": allowed}


class _Refused(Exception):  # noqa: N818 - a control-flow signal carrying the answer, not an error
    """Carries an error response out of the request guard."""

    def __init__(self, response: Response):
        super().__init__(response[0].get("error"))
        self.response = response


def _push_attributes(body: Any) -> dict[str, Any]:
    """The attributes of a Pub/Sub push envelope; {} for anything shaped otherwise (attacker input)."""
    message = body.get("message") if isinstance(body, dict) else None
    attributes = message.get("attributes") if isinstance(message, dict) else None
    return attributes if isinstance(attributes, dict) else {}


def _decisions_off(configured: bool) -> Response:
    why = (
        "this caller may not decide: SAFESEND_API_DECIDERS does not name it"
        if configured
        else "decisions by API are off on this deployment (SAFESEND_API_DECIDERS is not set)"
    )
    return _error(403, "decisions_off", f"{why}: decide in the review console, or ask the operator; do not retry")


def _internal_refused(request: Request, role: Role, status: int, reason: str) -> None:
    """The Scheduler, Cloud Tasks and Pub/Sub retry a refused call and then give up, so a refusal here
    (audience, invoker list, key) would stop the sweeps and checks with no 5xx; and the dead man's
    switch only arms once a sweep has completed. Only internal-ingress callers reach these endpoints."""
    if role is Role.INTERNAL:
        emit(
            INTERNAL_CALL_REFUSED,
            logging.ERROR,
            "internal call refused",
            path=request.path[:200],
            status=status,
            reason=reason,
        )


def _too_large(limit: int) -> _Refused:
    return _Refused(
        _error(
            413,
            "too_large",
            f"the request body is over {limit} bytes: send a smaller one "
            "(text and html are limited too); retrying it unchanged fails again",
        )
    )


class HttpApi:
    """One method per entry point. Each starts with `_guard`: size, then authentication,
    before any parsing or store access, so a refused request reads and writes nothing."""

    def __init__(self, runtime_factory: Callable[[], Runtime]):
        self._runtime_factory = runtime_factory

    def _guard(self, request: Request, role: Role, methods: tuple[str, ...]) -> tuple[Runtime, bytes]:
        runtime, body, _ = self._guard_caller(request, role, methods)
        return runtime, body

    def _guard_caller(self, request: Request, role: Role, methods: tuple[str, ...]) -> tuple[Runtime, bytes, str]:
        """`_guard`, also naming the verified caller (for endpoints that record who acted)."""
        wire = detach_body(request)  # first: every refusal below must leave the body unbuffered
        try:
            return self._admit(request, wire, role, methods)
        finally:
            discard_rest(request, wire)  # at end of stream already after a full read

    def _admit(
        self, request: Request, wire: IO[bytes], role: Role, methods: tuple[str, ...]
    ) -> tuple[Runtime, bytes, str]:
        """Method, size (declared, then while reading), authentication: the order matters."""
        if request.method not in methods:
            raise _Refused(_method_not_allowed(", ".join(methods)))
        try:
            runtime = self._runtime_factory()
        except ConfigurationError as exc:
            log(logging.CRITICAL, "configuration error", error=str(exc))
            raise _Refused(_error(500, "configuration_error", "the service is misconfigured")) from exc
        set_trace_from_headers(request.headers, runtime.settings.project)
        limit = runtime.settings.max_request_bytes
        if request.content_length is not None and request.content_length > limit:
            raise _too_large(limit)  # on the declared size, before reading a byte
        body = read_capped(wire, limit) if request.method == "POST" else b""
        if body is None:
            raise _too_large(limit)
        request.stream = io.BytesIO(body)  # what we accepted, for anyone reading the request later
        signed = body if request.method == "POST" else request.query_string
        try:
            caller = runtime.authenticator.check(role, request.headers, signed)
        except AuthenticationError as exc:  # fixed texts (auth.py): never a token or part of one
            log(logging.WARNING, "unauthenticated request refused", role=role.value, reason=str(exc))
            _internal_refused(request, role, 401, str(exc))
            raise _Refused(
                (
                    {
                        "error": "unauthenticated",
                        "reason": str(exc),
                        "message": f"{exc}: check the API key (n8n: the Bearer Auth credential) or the "
                        "signature, and do not retry until it is fixed",
                    },
                    401,
                    {**JSON, "WWW-Authenticate": 'Bearer realm="safesend"'},
                )
            ) from exc
        except PermissionDeniedError as exc:  # the verified caller goes to the log (masked), not the body
            log(logging.WARNING, "caller not allowed", role=role.value, reason=str(exc), caller=mask_emails(exc.caller))
            _internal_refused(request, role, 403, "caller not allowed")
            raise _Refused(
                _error(403, "forbidden", f"{exc}: ask the operator to allow this caller; do not retry")
            ) from exc
        log(logging.DEBUG, "authenticated", role=role.value, caller=caller)
        return runtime, body, caller

    @staticmethod
    def _json_body(request: Request, body: bytes, required: bool = True) -> Any:
        if not body and not required:
            return {}
        if request.mimetype != "application/json":
            raise _Refused(
                _error(415, "unsupported_media_type", "send the job as JSON with Content-Type: application/json")
            )
        try:
            return json.loads(body)
        except (ValueError, UnicodeDecodeError, RecursionError):
            raise _Refused(
                _error(
                    400,
                    "malformed_json",
                    "the body is not valid JSON: fix it and send again",
                    fields={"body": "malformed JSON"},
                )
            ) from None

    def send(self, request: Request) -> Response:
        try:
            runtime, raw = self._guard(request, Role.CALLER, ("POST",))
            body = self._json_body(request, raw)
        except _Refused as refused:
            return refused.response
        try:
            parsed = parse_send_request(
                body,
                runtime.settings.default_from,
                frozenset(runtime.policies.names()),
                runtime.settings.max_body_bytes,
                runtime.callbacks,
            )
            job, replayed = runtime.service.submit(parsed)
        except RequestValidationError as exc:
            return _error(
                400,
                "invalid_request",
                "fix the fields listed under `fields` and send again; the same request fails the same way",
                fields=exc.fields,
            )
        except PayloadMismatchError as exc:
            return _error(
                422,
                "payload_mismatch",
                f"{exc}: resend the original payload, or give a different email its own dedup key; do not retry",
                job_id=exc.job_id,
            )
        except CallbackNotStoredError as exc:  # a replay whose callback_url nothing could ever call
            log(logging.ERROR, "callback_url not stored on a replay", error=str(exc))
            return _error(
                503,
                "callback_not_registered",
                "the job exists but this callback_url could not be stored: retry after Retry-After seconds "
                "(the same request replays; only then will the callback come)",
            )
        except StoreUnavailableError as exc:  # raised only before a claim (service.submit)
            emit(STORE_UNAVAILABLE, logging.ERROR, "job store unavailable before claim", where="send", error=str(exc))
            return _error(
                503, "store_unavailable", "nothing was sent: retry after Retry-After seconds (n8n's Retry On Fail does)"
            )
        headers = dict(JSON)
        wait_s = retry_after_s(job, runtime.service.clock())
        if wait_s is not None:
            headers["Retry-After"] = str(wait_s)
        return job_view(job, replayed=replayed), http_status_for(job), headers

    def decide(self, request: Request) -> Response:
        """POST /decide: a caller's decision on a job in review, through the console's own path
        (service.decide). Off unless SAFESEND_API_DECIDERS names the caller (checked before parsing)."""
        try:
            runtime, raw, caller = self._guard_caller(request, Role.CALLER, ("POST",))
            decider = allowed_decider(caller, runtime.settings.api_deciders)
            if decider is None:
                log(logging.WARNING, "decision by API refused: caller not a decider", caller=mask_emails(caller))
                raise _Refused(_decisions_off(bool(runtime.settings.api_deciders)))
            body = self._json_body(request, raw)
        except _Refused as refused:
            return refused.response
        try:
            asked = parse_decision_request(body)
            outcome = runtime.service.decide(
                asked.job_id, asked.review_id, asked.decision, recorded_reviewer(decider, asked), asked.note
            )
        except RequestValidationError as exc:
            return _error(
                400, "invalid_request", "fix the fields listed under `fields` and send again", fields=exc.fields
            )
        except StaleReviewError as exc:
            return _error(
                409,
                "stale_review",
                f"{exc}: nothing was done; look the job up (/status) and decide on its current review_id, if any",
                current_review_id=exc.current,
            )
        except (DecisionConflictError, DecisionNotAllowedError) as exc:
            code = "already_decided" if isinstance(exc, DecisionConflictError) else "decision_not_allowed"
            return _error(409, code, f"{exc}: nothing was done; do not retry")
        except MailboxUnavailableError as exc:
            log(logging.WARNING, "decision by API deferred: mailbox unavailable", job_id=asked.job_id, error=str(exc))
            return _error(
                503,
                "mailbox_unavailable",
                "the mailbox could not be searched, so nothing was done: retry after Retry-After seconds",
            )
        except StoreUnavailableError as exc:
            emit(STORE_UNAVAILABLE, logging.ERROR, "decide could not use the store", where="decide", error=str(exc))
            return _error(503, "store_unavailable", "nothing was decided: retry after Retry-After seconds")
        replayed = not outcome.applied and outcome.result != "refused_copy_found"
        view = job_view(outcome.job, replayed=replayed)
        return {**view, "result": outcome.result, "copies": outcome.copies}, 200, dict(JSON)

    def reconcile(self, request: Request) -> Response:
        try:
            runtime, raw = self._guard(request, Role.INTERNAL, ("POST",))
            body = self._json_body(request, raw, required=False)
        except _Refused as refused:
            return refused.response
        job_id = body.get("job_id") if isinstance(body, dict) else None
        if not isinstance(job_id, str) or not is_job_id(job_id):
            return _error(
                400,
                "invalid_request",
                "job_id must be a job id (32 hex digits)",
                fields={"job_id": "32 lowercase hex digits"},
            )
        step = body.get("step") if isinstance(body, dict) else None
        try:
            if is_probe_step(step):  # an index-lag look (lag_watch.py), not a check of the job
                job, action = None, runtime.service.lag.probe(job_id, str(step))
            else:
                job, action = runtime.service.advance(job_id)
        except (MailboxUnavailableError, StoreUnavailableError, PublishError) as exc:
            log(logging.WARNING, "reconcile deferred", job_id=job_id, error=str(exc))
            return _error(503, "try_again", "a dependency is unavailable; Cloud Tasks will retry")
        except Exception as exc:  # noqa: BLE001 - a retryable answer, never a crash of the worker
            log(
                logging.ERROR,
                "reconcile hit an unexpected error",
                job_id=job_id,
                error_type=type(exc).__name__,
                exc_info=True,
            )
            return _error(
                503, "try_again", "unexpected error; Cloud Tasks will retry and the sweeper keeps the job due"
            )
        log(
            logging.INFO,
            "reconcile",
            job_id=job_id,
            action=action,
            task=request.headers.get("X-CloudTasks-TaskName"),
            retry=request.headers.get("X-CloudTasks-TaskRetryCount"),
        )
        return {"job_id": job_id, "action": action, "state": job.state.value if job else None}, 200, dict(JSON)

    def notify(self, request: Request) -> Response:
        """Pub/Sub push (OIDC-authenticated) of a review item: queue and post the reviewers' notices.
        2xx acknowledges; anything else is redelivered with backoff, then dead-lettered."""
        try:
            runtime, raw = self._guard(request, Role.INTERNAL, ("POST",))
            body = self._json_body(request, raw)
        except _Refused as refused:
            return refused.response
        attributes = _push_attributes(body)
        if attributes.get("kind") == "mailbox_incident" and isinstance(attributes.get("incident"), str):
            try:
                text = incident_text_from(attributes, runtime.settings.verify_horizon_s)
                action = runtime.service.notify_incident(str(attributes.get("mailbox")), attributes["incident"], text)
            except PublishError as exc:
                log(logging.WARNING, "mailbox incident notice deferred", error=str(exc))
                return _error(503, "try_again", "a reviewers' chat is unavailable; Pub/Sub will redeliver")
            return {"incident": attributes["incident"], "action": action}, 200, dict(JSON)
        job_id, review_id = attributes.get("job_id"), attributes.get("review_id")
        if not (isinstance(job_id, str) and is_job_id(job_id) and isinstance(review_id, str)):
            log(logging.ERROR, "notify: not a review item push (no job_id/review_id attributes)")
            return _error(400, "invalid_request", "expected a Pub/Sub push of a safesend review item")
        try:
            job, action = runtime.service.notify(job_id, review_id)
        except (MailboxUnavailableError, StoreUnavailableError, PublishError) as exc:
            log(logging.WARNING, "notify deferred", job_id=job_id, error=str(exc))
            return _error(503, "try_again", "a dependency is unavailable; Pub/Sub will redeliver")
        except Exception as exc:  # noqa: BLE001 - redelivered, then dead-lettered; never a crashed worker
            log(
                logging.ERROR,
                "notify hit an unexpected error",
                job_id=job_id,
                error_type=type(exc).__name__,
                exc_info=True,
            )
            return _error(503, "try_again", "unexpected error; Pub/Sub will redeliver")
        return (
            {"job_id": job_id, "review_id": review_id, "action": action, "state": job.state.value if job else None},
            200,
            dict(JSON),
        )

    def sweep(self, request: Request) -> Response:
        try:
            runtime, _ = self._guard(request, Role.INTERNAL, ("POST",))
        except _Refused as refused:
            return refused.response
        try:
            report = runtime.service.sweep(runtime.settings.sweep_batch, runtime.settings.sweep_budget_s)
        except IndexMissingError as exc:
            emit(
                INDEX_MISSING,
                logging.CRITICAL,
                "the sweeper cannot query due jobs: a Firestore index is missing (infra/firestore.indexes.json)",
                code="firestore_index_missing",
                error=str(exc),
            )
            return _error(
                500,
                "firestore_index_missing",
                "a Firestore composite index is missing or still "
                "building: deploy infra/firestore.indexes.json; no due job can be found until then",
            )
        except StoreUnavailableError as exc:
            emit(STORE_UNAVAILABLE, logging.ERROR, "sweep could not query the store", where="sweep", error=str(exc))
            return _error(503, "store_unavailable", "the job store is unavailable")
        emit(
            SWEEP_COMPLETED,
            logging.INFO,
            "sweep done",
            due=report.examined,
            advanced=report.advanced,
            overdue=report.overdue,
            oldest_overdue_s=round(report.oldest_overdue_s, 1),
            oldest_review_s=None if report.oldest_review_s is None else round(report.oldest_review_s, 1),
            errors=report.errors,
            examined=report.examined,
            actions=report.actions,
            stopped_early=report.stopped_early,
        )
        return (
            {
                "examined": report.examined,
                "actions": report.actions,
                "errors": report.errors,
                "stopped_early": report.stopped_early,
            },
            200,
            dict(JSON),
        )

    def health(self, request: Request) -> Response:
        """GET: last sweep, overdue jobs, oldest review item (health.py); 503 when the store cannot say."""
        try:
            runtime, _ = self._guard(request, Role.INTERNAL, ("GET",))
        except _Refused as refused:
            return refused.response
        try:
            view = runtime.service.health(runtime.settings.sweep_interval_s)
        except StoreUnavailableError as exc:
            emit(STORE_UNAVAILABLE, logging.ERROR, "health could not read the store", where="health", error=str(exc))
            return _error(503, "store_unavailable", "the job store is unavailable")
        return view, 200, dict(JSON)

    def mailboxes(self, request: Request) -> Response:
        """GET /mailboxes (served by the status function, same callers' credentials): each sender
        mailbox's used and limit for the minute and the day, backlog, next free slot and state."""
        try:
            runtime, _ = self._guard(request, Role.CALLER, ("GET",))
        except _Refused as refused:
            return refused.response
        try:
            report = runtime.service.mailboxes_report()
        except StoreUnavailableError as exc:
            log(logging.ERROR, "mailboxes could not read the store", error=str(exc))
            return _error(503, "store_unavailable", "the job store is unavailable")
        return report, 200, dict(JSON)

    def status(self, request: Request) -> Response:
        if request.path.rstrip("/").endswith("/mailboxes"):
            return self.mailboxes(request)
        try:
            runtime, _ = self._guard(request, Role.CALLER, ("GET",))
        except _Refused as refused:
            return refused.response
        job_id = request.args.get("job_id")
        if not job_id:
            key = dedup_key_from_query(request.args)
            if key is None:
                return _error(400, "invalid_request", "give job_id, dedup_key, or customer_id + event_type + order_id")
            job_id = job_id_for(key)
        if not is_job_id(job_id):
            return _error(404, "not_found", "no such job (a job id is 32 hex digits)")
        try:
            job = runtime.service.store.get(job_id)
        except StoreUnavailableError as exc:
            emit(STORE_UNAVAILABLE, logging.ERROR, "status could not read the store", where="status", error=str(exc))
            return _error(503, "store_unavailable", "the job store is unavailable")
        if job is None:
            return _error(404, "not_found", f"no job {job_id}", job_id=job_id)
        try:
            place = runtime.service.queue_place(job)
        except StoreUnavailableError:
            place = None
        return job_view(job, with_events=True, place=place), 200, dict(JSON)
