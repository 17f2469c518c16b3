"""The review console: the web page where a person settles a job that ended in `review` or `failed`.

Served by the `review` function; plain server-rendered HTML with a few lines of JavaScript,
usable on a phone. One method per route, each taking a Flask request and returning
(body, status, headers), like http_api.HttpApi:

    GET  /review                              open items, oldest first; ?channel=&reason= filter
    GET  /review/health                       what GET /health answers: sweep, overdue, notices, index lag
    GET  /review/items/<job_id>               one item's evidence and the decision form
    POST /review/items/<job_id>/decision      a decision (form post), then 303 back to the item
    GET  /review/assets/console.css|.js|icon.svg   the page's only assets (no external ones)

Every route but the assets identifies the reviewer first (reviewer_auth: IAP assertion, or the
development identity on a local stack), before the store is touched. GET never changes
anything. A decision must carry the CSRF token of the page it was made on (bound to the reviewer
and the review_id) and come from our own origin; the service checks the review_id is still
current (else 409) and replays a repeated decision instead of applying it twice.

The pages are Jinja2 templates (templates/console/), the stylesheet, script and icon real files
(static/console/). Everything shown is attacker-influenced (subject, names, dedup key, Gmail's
error texts): the templates autoescape every value, so no value can be written unescaped by
forgetting to escape it, and the Content-Security-Policy allows no inline script or style and
nothing from elsewhere. Recipients and error texts are masked like logs are; the message body is
never shown.
"""

from __future__ import annotations

import html
import json
import logging
import re
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode

import jinja2
from flask import Request
from markupsafe import Markup

from ..core import lifecycle
from ..core.errors import (
    ConfigurationError,
    DecisionConflictError,
    DecisionNotAllowedError,
    MailboxUnavailableError,
    RequestValidationError,
    StaleReviewError,
    StoreUnavailableError,
)
from ..core.keys import is_job_id
from ..core.mailbox_search import MailboxSearch
from ..core.model import Job
from ..core.review import not_sent_hits
from ..core.states import HUMAN_STATES
from ..logs import log, mask_emails
from .request_body import detach_body, discard_rest, read_capped
from .reviewer_auth import CsrfError, Reviewer, ReviewerAuth, ReviewerAuthError, ReviewerForbiddenError

Response = tuple[str, int, dict[str, str]]

BASE = "/review"
CSS_PATH = f"{BASE}/assets/console.css"
JS_PATH = f"{BASE}/assets/console.js"
ICON_PATH = f"{BASE}/assets/icon.svg"
# The worst note the form allows: MAX_NOTE_CHARS characters of 4 UTF-8 bytes each, every byte
# percent-encoded as %XX (12 bytes a character), plus room for the other fields of the form.
MAX_FORM_BYTES = lifecycle.MAX_NOTE_CHARS * 4 * 3 + 4 * 1024
LIST_LIMIT = 200
_ITEM = re.compile(r"/review/items/([^/]+)")
_DECISION = re.compile(r"/review/items/([^/]+)/decision")
_REVIEW_ID = re.compile(r"([0-9a-f]{32}):([0-9]{1,9})")
_GMAIL_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")

CSP = (
    "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cache-Control": "no-store",
}
HTML_HEADERS = {"Content-Type": "text/html; charset=utf-8", **SECURITY_HEADERS}

DECISIONS = {  # what each button does, in the reviewer's words
    "resend": (
        "Resend",
        "A fresh mailbox search runs first: if any copy is found, nothing is sent and you are shown the copy.",
    ),
    "mark_sent": ("Mark as sent", "You checked the mailbox and the message is there: the job ends sent."),
    "cancel": ("Cancel", "Never send this message. The job ends cancelled; this cannot be undone."),
    "acknowledge": (
        "Acknowledge duplicate",
        "More than one copy went out; nothing can unsend it. Record that the recipients have been taken care of.",
    ),
}
RESULTS = {  # the flash shown after a decision (from the redirect's ?result=)
    "resent": ("ok", "Resent: a fresh mailbox search found no copy, so the message was sent again."),
    "marked_sent": ("ok", "Marked as sent."),
    "cancelled": ("ok", "Cancelled: nothing more will be sent."),
    "acknowledged": ("ok", "Duplicate acknowledged."),
    "refused_copy_found": (
        "warn",
        "Resend refused: the mailbox already holds a copy of this message. Nothing "
        "was sent. Look at the copy below; if it is the message, mark the job as sent.",
    ),
    "replayed": ("info", "This decision had already been made (a second click, or a retry): it was not applied twice."),
    "reopened": (
        "warn",
        "Your decision was recorded, but the job is back in review: the mailbox search made for it found "
        "a copy this page had not shown you. Read the new reason and the copies below.",
    ),
}
REASONS = {
    "ambiguous": "Gmail may or may not have accepted an attempt, and this channel never resends on a guess. "
    "Search the mailbox: if the message is there, mark it sent; if not, resend.",
    "duplicate": "More than one copy of this message is known to exist.",
    "unverified": "At the end of the verification horizon the mailbox did not show exactly one copy.",
    "late_accept": "An attempt that had been given up on was accepted by Gmail after all: the message went out.",
    "max_attempts": "Out of attempts that may have landed, and no copy was found in the mailbox.",
    "permanent_error": "Gmail refused the message for good; nothing went out.",
    "retry_horizon": "Gmail kept refusing (rate limits, or the mailbox's daily sending limit) past the retry "
    "horizon; nothing went out.",
    "sent_after_cancel": "A reviewer cancelled this job, but a copy of it is in the mailbox: it was there already, "
    "or it landed anyway (an attempt still in flight). The message went out: tell the recipient if the cancel "
    "mattered, then acknowledge.",
}
EVENT_LABELS = {
    "created": "Job created",
    "attempt_started": "Send attempt started",
    "accepted": "Gmail accepted",
    "attempt_failed": "Attempt refused (will retry)",
    "outcome_unknown": "Outcome unknown",
    "late_failure": "Late failure of an earlier attempt",
    "late_accept": "Late acceptance",
    "mailbox_checked": "Mailbox searched",
    "found_in_mailbox": "Found in the mailbox",
    "entered_review": "Entered review",
    "entered_failed": "Failed",
    "verification_checked": "Verification search",
    "verified": "Verified: one copy",
    "review_published": "Review item published",
    "decision": "Reviewer decision",
    "message_id_rewritten": "Gmail stored a different Message-ID",
    "callback_registered": "Callback registered",
    "notice_delivered": "Notice delivered",
    "notice_given_up": "Notice given up",
}
_EVENT_KEYS_SHOWN_ELSEWHERE = {"at", "kind", "state", "attempt"}


def item_path(job_id: str) -> str:
    return f"{BASE}/items/{job_id}"


class ReviewConsole:
    """The console's routes. Factories are called per request (both are cached singletons in main.py)."""

    def __init__(self, service_factory: Callable[[], Any], auth_factory: Callable[[], ReviewerAuth]):
        self._service_factory = service_factory
        self._auth_factory = auth_factory

    # ------------------------------------------------------------------ routing
    def handle(self, request: Request) -> Response:
        path = request.path
        if path in ("", "/"):
            return "", 302, {"Location": BASE, **SECURITY_HEADERS}
        if path.rstrip("/") == BASE:
            return self.index(request)
        if path in ASSETS:
            return self.asset(request)
        if path.rstrip("/") == f"{BASE}/mailboxes":
            return self.mailboxes(request)
        if path.rstrip("/") == f"{BASE}/health":
            return self.health(request)
        match = _DECISION.fullmatch(path)
        if match:
            return self.decision(request, match.group(1))
        match = _ITEM.fullmatch(path)
        if match:
            return self.item(request, match.group(1))
        return self._error(
            404, "Not found", "There is no such page in the review console.", None, link=(BASE, "Open items")
        )

    # ------------------------------------------------------------------ GET /review
    def index(self, request: Request) -> Response:
        refused = self._only(request, ("GET", "HEAD"))
        if refused:
            return refused
        _auth, reviewer, failure = self._identify(request)
        if failure:
            return failure
        service = self._service()
        if isinstance(service, tuple):
            return service
        channel = (request.args.get("channel") or "").strip()
        reason = (request.args.get("reason") or "").strip()
        try:
            jobs = service.open_reviews(LIST_LIMIT)
        except StoreUnavailableError as exc:
            log(logging.ERROR, "review console could not list open items", error=str(exc))
            return self._unavailable(reviewer)
        now = service.clock()
        shown = [j for j in jobs if (not channel or j.channel == channel) and (not reason or j.review_reason == reason)]
        channels = sorted(set(service.policies.names()) | {j.channel for j in jobs} | ({channel} - {""}))
        reasons = sorted(set(REASONS) | {j.review_reason or "" for j in jobs} | ({reason} - {""}) - {""})
        entries = [{"job": job, "path": item_path(job.id), "to": _to_line(job)} for job in shown]
        return self._page(
            "index.html",
            "Open items",
            reviewer,
            channels=channels,
            channel=channel,
            reasons=reasons,
            reason=reason,
            filtered=bool(channel or reason),
            entries=entries,
            limit=LIST_LIMIT,
            truncated=len(jobs) >= LIST_LIMIT,
            now=now,
        )

    # ------------------------------------------------------------------ GET /review/mailboxes
    def mailboxes(self, request: Request) -> Response:
        """The sender mailboxes' budgets (GET /mailboxes' data): used and limit for the minute and
        the day, backlog, next free slot, state. Read-only."""
        return self._read_only_page(
            request, "mailboxes.html", "Sender mailboxes", "mailboxes", lambda s: {"report": s.mailboxes_report()}
        )

    # ------------------------------------------------------------------ GET /review/health
    def health(self, request: Request) -> Response:
        """What GET /health answers (the questions the alerts ask), for a person: the last sweep,
        overdue jobs, the oldest review item, notices nobody heard, each mailbox's index lag."""
        return self._read_only_page(
            request, "health.html", "Health", "health", lambda s: {"health": s.health(s.sweep_interval_s)}
        )

    def _read_only_page(
        self, request: Request, template: str, title: str, what: str, read: Callable[[Any], dict[str, Any]]
    ) -> Response:
        """A GET-only page of one store read: the same identity, refusal and outage answers as the
        queue's, so a new read-only page cannot forget one of them."""
        refused = self._only(request, ("GET", "HEAD"))
        if refused:
            return refused
        _auth, reviewer, failure = self._identify(request)
        if failure:
            return failure
        service = self._service()
        if isinstance(service, tuple):
            return service
        try:
            context = read(service)
        except StoreUnavailableError as exc:
            log(logging.ERROR, f"review console could not read the {what}", error=str(exc))
            return self._unavailable(reviewer)
        return self._page(template, title, reviewer, **context)

    # ------------------------------------------------------------------ GET /review/items/<id>
    def item(self, request: Request, job_id: str) -> Response:
        refused = self._only(request, ("GET", "HEAD"))
        if refused:
            return refused
        auth, reviewer, failure = self._identify(request)
        if failure:
            return failure
        if not is_job_id(job_id):
            return self._not_found(reviewer)
        service = self._service()
        if isinstance(service, tuple):
            return service
        try:
            job = service.store.get(job_id)
        except StoreUnavailableError as exc:
            log(logging.ERROR, "review console could not read a job", job_id=job_id, error=str(exc))
            return self._unavailable(reviewer)
        if job is None:
            return self._not_found(reviewer)
        flash = _flash(request.args.getlist("result")[:1], request.args.getlist("copy"))
        subject = job.payload.get("subject") or "(no subject)"
        return self._page(
            "item.html",
            job.payload.get("subject") or "Item",
            reviewer,
            **_item_context(job, service.clock(), service.senders.search_for(job)),
            subject=subject,
            flash=flash,
            form=self._form(job, auth, reviewer),
        )

    def _form(self, job: Job, auth: ReviewerAuth, reviewer: Reviewer) -> dict[str, Any] | None:
        """The decision form's values, or None when there is nothing to decide."""
        allowed = [d for d in lifecycle.allowed_decisions(job) if d in DECISIONS]
        if job.state not in HUMAN_STATES or not allowed:
            return None
        review_id = f"{job.id}:{job.review_entries}"
        return {
            "action": f"{item_path(job.id)}/decision",
            "review_id": review_id,
            "csrf": auth.csrf_token(reviewer, review_id),
            "max_note": lifecycle.MAX_NOTE_CHARS,
            "buttons": [
                {
                    "value": d,
                    "label": DECISIONS[d][0],
                    "hint": DECISIONS[d][1],
                    "style": "danger"
                    if d == "cancel"
                    else "primary"
                    if d in ("resend", "acknowledge")
                    else "secondary",
                }
                for d in allowed
            ],
        }

    # ------------------------------------------------------------------ POST .../decision
    def decision(self, request: Request, job_id: str) -> Response:
        refused = self._only(request, ("POST",))
        if refused:
            return refused
        wire = detach_body(request)  # first: a refused body is never buffered
        try:
            return self._decision(request, job_id, wire)
        finally:
            discard_rest(request, wire)

    def _decision(self, request: Request, job_id: str, wire: Any) -> Response:
        auth, reviewer, failure = self._identify(request)
        if failure:
            return failure
        try:
            auth.check_origin(request.headers, request.host)
        except CsrfError as exc:
            log(logging.WARNING, "review decision refused: origin", job_id=job_id, reason=str(exc))
            return self._error(403, "Decision refused", str(exc), reviewer, link=(item_path(job_id), "Open the item"))
        if not is_job_id(job_id):
            return self._not_found(reviewer)
        if request.content_length is not None and request.content_length > MAX_FORM_BYTES:
            return self._error(413, "Too large", "The form is larger than a decision can be.", reviewer)
        if request.mimetype != "application/x-www-form-urlencoded":
            return self._error(415, "Unsupported form", "Send the decision from the console's form.", reviewer)
        raw = read_capped(wire, MAX_FORM_BYTES)
        if raw is None:
            return self._error(413, "Too large", "The form is larger than a decision can be.", reviewer)
        form, problem = _parse_form(raw)
        if problem:
            return self._error(400, "Invalid decision", problem, reviewer, link=(item_path(job_id), "Open the item"))
        review_id, decision, note = form.get("review_id", ""), form.get("decision", ""), form.get("note", "")
        match = _REVIEW_ID.fullmatch(review_id)
        if not match or match.group(1) != job_id:
            return self._error(
                400,
                "Invalid decision",
                "The form does not name a review of this job.",
                reviewer,
                link=(item_path(job_id), "Open the item"),
            )
        try:
            auth.check_token(reviewer, review_id, form.get("csrf"))
        except CsrfError as exc:
            log(logging.WARNING, "review decision refused: csrf token", job_id=job_id, reason=str(exc))
            return self._error(403, "Decision refused", str(exc), reviewer, link=(item_path(job_id), "Reload the item"))
        if decision not in DECISIONS:
            return self._error(
                400,
                "Invalid decision",
                "Choose one of the decision buttons.",
                reviewer,
                link=(item_path(job_id), "Open the item"),
            )
        service = self._service()
        if isinstance(service, tuple):
            return service
        note = note.replace("\r\n", "\n").strip()
        try:
            outcome = service.decide(job_id, review_id, decision, reviewer.email, note)
        except StaleReviewError:
            return self._conflict(
                reviewer,
                job_id,
                "This item changed since the page was loaded",
                "The job has moved on (new evidence, another reviewer, or it was settled) since "
                "this page was loaded, so this decision answers a review that is no longer "
                "current. Nothing was done. Open the item again to see where it stands now.",
            )
        except DecisionConflictError:
            return self._conflict(
                reviewer,
                job_id,
                "Already decided",
                "Another decision was already made for this review. Nothing was done.",
            )
        except DecisionNotAllowedError:
            return self._conflict(
                reviewer,
                job_id,
                "Not possible now",
                "This decision does not apply to this job in its current state. Nothing was done.",
            )
        except RequestValidationError as exc:
            fields = "; ".join(f"{name}: {why}" for name, why in sorted(exc.fields.items()))
            return self._error(400, "Invalid decision", fields, reviewer, link=(item_path(job_id), "Open the item"))
        except MailboxUnavailableError as exc:
            log(logging.WARNING, "review decision deferred: mailbox unavailable", job_id=job_id, error=str(exc))
            return self._error(
                503,
                "Gmail unavailable",
                "The mailbox could not be searched, so nothing was done "
                "(a resend is never made without that search). Try again in a minute.",
                reviewer,
                link=(item_path(job_id), "Open the item"),
            )
        except StoreUnavailableError as exc:
            log(logging.ERROR, "review decision: store unavailable", job_id=job_id, error=str(exc))
            return self._unavailable(reviewer)
        result = outcome.result if outcome.applied or outcome.result == "refused_copy_found" else "replayed"
        if outcome.applied and outcome.result != "resent" and outcome.job.state in HUMAN_STATES:
            result = "reopened"  # e.g. "mark sent" over a copy nobody was shown: never flash "Marked as sent."
        log(
            logging.INFO,
            "review decision answered",
            job_id=job_id,
            review_id=review_id,
            decision=decision,
            result=outcome.result,
            applied=outcome.applied,
            state=outcome.job.state.value,
            reviewer=reviewer.email,
        )
        query: list[tuple[str, str]] = [("result", result)]
        if outcome.result == "refused_copy_found":
            query += [
                ("copy", c["gmail_id"])
                for c in outcome.copies[:10]
                if isinstance(c.get("gmail_id"), str) and _GMAIL_ID.fullmatch(c["gmail_id"])
            ]
        return "", 303, {"Location": f"{item_path(job_id)}?{urlencode(query)}", **SECURITY_HEADERS}

    # ------------------------------------------------------------------ assets
    def asset(self, request: Request) -> Response:
        refused = self._only(request, ("GET", "HEAD"))
        if refused:
            return refused
        content_type, text = ASSETS[request.path]
        return text, 200, {"Content-Type": content_type, **SECURITY_HEADERS, "Cache-Control": "private, max-age=300"}

    # ------------------------------------------------------------------ helpers
    def _only(self, request: Request, methods: tuple[str, ...]) -> Response | None:
        if request.method in methods:
            return None
        page = _TEMPLATES.get_template("method_not_allowed.html").render()
        return page, 405, {**HTML_HEADERS, "Allow": ", ".join(methods)}

    def _identify(self, request: Request) -> tuple[Any, Any, Response | None]:
        """(auth, reviewer, None), or a 401/403/500/503 page. Runs before anything else is read."""
        try:
            auth = self._auth_factory()
        except ConfigurationError as exc:
            log(logging.CRITICAL, "review console misconfigured", error=str(exc))
            return (
                None,
                None,
                self._error(
                    500,
                    "Console misconfigured",
                    "The review console is not configured correctly; the operator has been told in the logs.",
                    None,
                ),
            )
        try:
            return auth, auth.identify(request.headers, request.remote_addr), None
        except ReviewerForbiddenError as exc:
            log(logging.WARNING, "review console: not a reviewer", reviewer=exc.email)
            return (
                auth,
                None,
                self._error(
                    403,
                    "Not a reviewer",
                    f"You are signed in as {exc.email}, which is not "
                    "on this console's reviewer allowlist. Ask the operator to add you.",
                    None,
                ),
            )
        except ReviewerAuthError as exc:
            log(logging.WARNING, "review console: sign-in refused", reason=str(exc))
            if exc.status == 503:
                return auth, None, self._error(503, "Sign-in check unavailable", str(exc), None)
            return (
                auth,
                None,
                self._error(
                    401,
                    "Sign-in required",
                    f"{exc}. The review console is only reachable through Google sign-in (Identity-Aware Proxy).",
                    None,
                ),
            )

    def _service(self) -> Any:
        try:
            return self._service_factory()
        except ConfigurationError as exc:
            log(logging.CRITICAL, "review console: service misconfigured", error=str(exc))
            return self._error(
                500,
                "Console misconfigured",
                "The service is not configured correctly; the operator has been told in the logs.",
                None,
            )

    def _not_found(self, reviewer: Reviewer | None) -> Response:
        return self._error(404, "No such item", "There is no job with this id.", reviewer, link=(BASE, "Open items"))

    def _unavailable(self, reviewer: Reviewer | None) -> Response:
        return self._error(
            503,
            "Temporarily unavailable",
            "The job store could not be reached. Nothing was changed. Try again in a minute.",
            reviewer,
        )

    def _conflict(self, reviewer: Reviewer, job_id: str, title: str, text: str) -> Response:
        return self._error(409, title, text, reviewer, link=(item_path(job_id), "Open the current item"))

    def _error(
        self, status: int, title: str, text: str, reviewer: Reviewer | None, link: tuple[str, str] | None = None
    ) -> Response:
        return self._page("error.html", title, reviewer, status=status, text=text, link=link)

    def _page(
        self, template: str, title: str, reviewer: Reviewer | None, status: int = 200, **context: Any
    ) -> Response:
        page = _TEMPLATES.get_template(template).render(title=title, reviewer=reviewer, status=status, **context)
        return page, status, dict(HTML_HEADERS)


# ----------------------------------------------------------------------------- rendering
TEMPLATES_DIR = Path(__file__).resolve().parent / "templates" / "console"
STATIC_DIR = Path(__file__).resolve().parent / "static" / "console"


def _escaped(value: Any) -> Markup:
    """Every `{{ value }}` of a template: escaped with the entities html.escape writes (those the
    console has always used), None as nothing; a macro's output, already escaped Markup, as it is.
    Autoescape stays on behind it."""
    if isinstance(value, Markup):
        return value
    return Markup(html.escape("" if value is None else str(value), quote=True))  # noqa: S704 - escaped here


_TEMPLATES = jinja2.Environment(
    loader=jinja2.FileSystemLoader(TEMPLATES_DIR),
    autoescape=True,
    finalize=_escaped,
    trim_blocks=True,
    lstrip_blocks=True,
    undefined=jinja2.StrictUndefined,
    auto_reload=False,
)


def _ago(value: datetime, now: datetime) -> str:
    seconds = (now - value).total_seconds()
    if seconds < 0:
        return "in the future"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{int(seconds // size)} {unit} ago"
    return f"{int(seconds)} s ago"


_TEMPLATES.globals.update(
    ago=_ago,
    paths={
        "base": BASE,
        "mailboxes": f"{BASE}/mailboxes",
        "health": f"{BASE}/health",
        "css": CSS_PATH,
        "js": JS_PATH,
        "icon": ICON_PATH,
    },
)


def _recipients(job: Job) -> list[tuple[str, list[str]]]:
    return [(kind, [str(mask_emails(a)) for a in (job.payload.get(kind) or [])]) for kind in ("to", "cc", "bcc")]


def _to_line(job: Job) -> str:
    """The list entry's recipients: the first three, masked, and how many more."""
    to = [a for _, addresses in _recipients(job) for a in addresses]
    return ", ".join(to[:3]) + (f" +{len(to) - 3}" if len(to) > 3 else "")


def _flash(results: list[str], copies: list[str]) -> dict[str, Any] | None:
    if not results or results[0] not in RESULTS:
        return None
    tone, text = RESULTS[results[0]]
    valid = [c for c in copies[:10] if _GMAIL_ID.fullmatch(c)]
    shown = valid if results[0] == "refused_copy_found" else []
    return {"tone": tone, "text": text, "result": results[0], "copies": shown}


def _item_context(job: Job, now: datetime, search: MailboxSearch) -> dict[str, Any]:
    """What item.html shows of a job, computed here: masking, labels and the mailbox evidence."""
    reason = REASONS.get(job.review_reason or "", "") if job.state in HUMAN_STATES else ""
    return {
        "job": job,
        "now": now,
        "reason": reason,
        "recipients": [(kind, addresses) for kind, addresses in _recipients(job) if addresses or kind == "to"],
        "sender": mask_emails(job.payload.get("from") or ""),
        "error": _error_fact(job.last_error, "Last error" if job.state in HUMAN_STATES else "Earlier error"),
        "mailbox": _mailbox(job, search),
        "decisions": [_decision_row(d) for d in job.decisions],
        "events": [_event_row(event) for event in job.events],
    }


def _error_fact(error: Mapping[str, Any] | None, label: str) -> dict[str, str] | None:
    if not error:
        return None
    code = " ".join(
        str(p)
        for p in (error.get("code"), f"HTTP {error['status']}" if error.get("status") else None, error.get("bucket"))
        if p
    )
    return {"label": label, "code": code, "detail": str(mask_emails(str(error.get("detail") or "")))}


def _mailbox(job: Job, search: MailboxSearch) -> dict[str, Any]:
    """The mailbox evidence. A search hit without the SENT label is somebody else's message that
    carries our (predictable) Message-ID: marked as such, so a planted message cannot pass for a copy."""
    hits = [
        {
            "gmail_id": h.get("gmail_id"),
            "thread_id": h.get("thread_id"),
            "labels": list(h.get("label_ids") or []),
            "sent": "SENT" in (h.get("label_ids") or []),
        }
        for h in job.mailbox_hits
    ]
    stored = job.stored_message_id if job.stored_message_id and job.stored_message_id != job.message_id else None
    return {
        "search": search,  # a Gmail link, or (Graph) instructions: no link searches Outlook by Message-ID
        "not_sent": len(not_sent_hits(job.mailbox_hits)),
        "hits": hits,
        "accepted_as": job.provider_ref.get("gmail_id") if job.provider_ref else None,
        "stored_message_id": stored,
    }


def _decision_name(decision: object) -> object:
    """A stored decision in the reviewer's words; one this console does not know, as stored."""
    return DECISIONS[decision][0] if isinstance(decision, str) and decision in DECISIONS else decision


def _decision_row(decision: Mapping[str, Any]) -> dict[str, Any]:
    at = decision.get("at")
    return {
        "at": at,
        "at_time": at if isinstance(at, datetime) else None,
        "name": _decision_name(decision.get("decision")),
        "result": decision.get("result"),
        "reviewer": decision.get("reviewer"),
        "review_id": decision.get("review_id"),
        "note": decision.get("note"),
    }


def _event_row(event: Mapping[str, Any]) -> dict[str, Any]:
    details = {k: v for k, v in event.items() if k not in _EVENT_KEYS_SHOWN_ELSEWHERE}
    text = " · ".join(f"{k}: {_detail(v)}" for k, v in details.items())
    at = event.get("at")
    return {
        "kind": event.get("kind"),
        "at": at if isinstance(at, datetime) else None,
        "label": EVENT_LABELS.get(str(event.get("kind")), event.get("kind")),
        "state": event.get("state"),
        "attempt": event.get("attempt"),
        "text": mask_emails(text) if text else "",
    }


def _detail(value: Any) -> str:
    if isinstance(value, dict) and "code" in value and "bucket" in value:  # a recorded Failure
        status = f" HTTP {value['status']}" if value.get("status") else ""
        detail = f": {value['detail']}" if value.get("detail") else ""
        return f"{value['code']}{status} ({value['bucket']}){detail}"[:600]
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, (dict, list)):
        return json.dumps(value, default=str, ensure_ascii=False, sort_keys=True)[:600]
    return str(value)[:600]


def _parse_form(raw: bytes) -> tuple[dict[str, str], str | None]:
    try:
        text = raw.decode("utf-8")
        fields = parse_qs(text, keep_blank_values=True, strict_parsing=bool(text), max_num_fields=16)
    except (UnicodeDecodeError, ValueError):
        return {}, "The form could not be read."
    if any(len(values) != 1 for values in fields.values()):
        return {}, "The form repeats a field."
    unknown = set(fields) - {"review_id", "csrf", "decision", "note"}
    if unknown:
        return {}, "The form has fields the console does not know."
    return {k: v[0] for k, v in fields.items()}, None


# ----------------------------------------------------------------------------- assets
CONSOLE_CSS = (STATIC_DIR / "console.css").read_text(encoding="utf-8")
CONSOLE_JS = (STATIC_DIR / "console.js").read_text(encoding="utf-8")
ICON_SVG = (STATIC_DIR / "icon.svg").read_text(encoding="utf-8")

ASSETS = {
    CSS_PATH: ("text/css; charset=utf-8", CONSOLE_CSS),
    JS_PATH: ("text/javascript; charset=utf-8", CONSOLE_JS),
    ICON_PATH: ("image/svg+xml", ICON_SVG),
}
