"""The review console: the web page where a person settles a job that ended in `review` or `failed`.

Served by the `review` function; plain server-rendered HTML with a few lines of JavaScript,
usable on a phone. One method per route, each taking a Flask request and returning
(body, status, headers), like http_api.HttpApi:

    GET  /review                              open items, oldest first; ?channel=&reason= filter
    GET  /review/items/<job_id>               one item's evidence and the decision form
    POST /review/items/<job_id>/decision      a decision (form post), then 303 back to the item
    GET  /review/assets/console.css|.js|icon.svg   the page's only assets (no external ones)

Every route but the assets identifies the reviewer first (reviewer_auth: IAP assertion, or the
development identity on a local stack), before the store is touched. GET never changes
anything. A decision must carry the CSRF token of the page it was made on (bound to the reviewer
and the review_id) and come from our own origin; the service checks the review_id is still
current (else 409) and replays a repeated decision instead of applying it twice.

Everything shown is attacker-influenced (subject, names, dedup key, Gmail's error texts): every
value is HTML-escaped where it is written, and the Content-Security-Policy allows no inline script
or style and nothing from elsewhere. Recipients and error texts are masked like logs are; the
message body is never shown.
"""

from __future__ import annotations

import html
import json
import logging
import re
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any
from urllib.parse import parse_qs, urlencode

from flask import Request

from . import lifecycle
from .errors import (
    ConfigurationError,
    DecisionConflictError,
    DecisionNotAllowedError,
    MailboxUnavailableError,
    RequestValidationError,
    StaleReviewError,
    StoreUnavailableError,
)
from .keys import is_job_id
from .logs import log, mask_emails
from .model import Job
from .request_body import detach_body, discard_rest, read_capped
from .review import gmail_search_link, not_sent_hits
from .reviewer_auth import CsrfError, Reviewer, ReviewerAuth, ReviewerAuthError, ReviewerForbiddenError
from .states import HUMAN_STATES

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
    "sent_after_cancel": "A reviewer cancelled this job, then a copy of it landed anyway (an attempt that was "
    "still in flight). The message went out: tell the recipient if the cancel mattered, then acknowledge.",
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


def e(value: Any) -> str:
    """Escape for HTML text and double-quoted attributes (the only places values are written)."""
    return html.escape("" if value is None else str(value), quote=True)


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
        parts = [
            "<h1>Waiting for a person</h1>",
            '<form class="filters" method="get" action="/review" data-autosubmit>',
            _select("channel", "Channel", channels, channel),
            _select("reason", "Reason", reasons, reason),
            '<button type="submit" class="secondary">Filter</button>',
            '<a class="clear" href="/review">Clear</a>' if channel or reason else "",
            "</form>",
            f'<p class="count">{len(shown)} open item{"" if len(shown) == 1 else "s"}'
            f"{' matching the filter' if channel or reason else ''}, oldest first"
            f"{f' (only the {LIST_LIMIT} oldest are listed)' if len(jobs) >= LIST_LIMIT else ''}.</p>",
        ]
        if not shown:
            parts.append(
                f'<p class="empty">Nothing waits for a person{" with this filter" if channel or reason else ""}.</p>'
            )
        else:
            parts.append('<ul class="items">')
            parts.extend(_list_entry(job, now) for job in shown)
            parts.append("</ul>")
        return self._page("Open items", "".join(parts), reviewer)

    # ------------------------------------------------------------------ GET /review/mailboxes
    def mailboxes(self, request: Request) -> Response:
        """The sender mailboxes' budgets (GET /mailboxes' data): used and limit for the minute and
        the day, backlog, next free slot, state. Read-only."""
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
            report = service.mailboxes_report()
        except StoreUnavailableError as exc:
            log(logging.ERROR, "review console could not read the mailboxes", error=str(exc))
            return self._unavailable(reviewer)
        return self._page("Sender mailboxes", _mailboxes_page(report), reviewer)

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
        body = _item_page(job, service.clock(), flash, self._form(job, auth, reviewer))
        return self._page(job.payload.get("subject") or "Item", body, reviewer)

    def _form(self, job: Job, auth: ReviewerAuth, reviewer: Reviewer) -> str:
        allowed = [d for d in lifecycle.allowed_decisions(job) if d in DECISIONS]
        if job.state not in HUMAN_STATES or not allowed:
            return (
                f'<section class="card decide"><h2>Decision</h2><p>This job is <strong>{e(job.state.value)}'
                "</strong>: there is nothing to decide.</p></section>"
            )
        review_id = f"{job.id}:{job.review_entries}"
        buttons = "".join(
            f'<div class="choice"><button type="submit" name="decision" value="{e(d)}" '
            f'class="{"danger" if d == "cancel" else "primary" if d in ("resend", "acknowledge") else "secondary"}"'
            f' data-busy="Working…">{e(DECISIONS[d][0])}</button><p class="hint">{e(DECISIONS[d][1])}</p></div>'
            for d in allowed
        )
        return (
            '<section class="card decide"><h2>Decision</h2>'
            f'<form method="post" action="{e(item_path(job.id))}/decision" data-once>'
            f'<input type="hidden" name="review_id" value="{e(review_id)}">'
            f'<input type="hidden" name="csrf" value="{e(auth.csrf_token(reviewer, review_id))}">'
            f'<label for="note">Note <span class="muted">(why; kept with the decision)</span></label>'
            f'<textarea id="note" name="note" rows="3" maxlength="{lifecycle.MAX_NOTE_CHARS}"></textarea>'
            f'<div class="choices">{buttons}</div>'
            f'<p class="muted small">Answers review <code>{e(review_id)}</code> as {e(reviewer.email)}.</p>'
            "</form></section>"
        )

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
        return (
            "<!doctype html><title>Method not allowed</title><p>Method not allowed.</p>",
            405,
            {**HTML_HEADERS, "Allow": ", ".join(methods)},
        )

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
        body = (
            f'<section class="card problem status-{status}"><h1>{e(title)}</h1><p>{e(text)}</p>'
            + (f'<p><a class="button secondary" href="{e(link[0])}">{e(link[1])}</a></p>' if link else "")
            + "</section>"
        )
        return self._page(title, body, reviewer, status)

    def _page(self, title: str, body: str, reviewer: Reviewer | None, status: int = 200) -> Response:
        return _layout(title, body, reviewer), status, dict(HTML_HEADERS)


# ----------------------------------------------------------------------------- rendering
def _layout(title: str, body: str, reviewer: Reviewer | None) -> str:
    banner = ""
    if reviewer is not None and reviewer.is_dev:
        banner = (
            '<div class="devbanner" role="alert"><strong>Development identity</strong> — every request '
            f"from this machine acts as <code>{e(reviewer.email)}</code>. No sign-in protects this console: "
            "local stacks only (SAFESEND_REVIEW_DEV_IDENTITY).</div>"
        )
    who = ""
    if reviewer is not None:
        who = f'<span class="who" title="signed in via {e(reviewer.source)}">{e(reviewer.email)}</span>'
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<meta name="referrer" content="same-origin">'
        f"<title>{e(title)} · safesend review</title>"
        f'<link rel="icon" href="{ICON_PATH}" type="image/svg+xml">'
        f'<link rel="stylesheet" href="{CSS_PATH}"><script src="{JS_PATH}" defer></script></head>'
        f'<body>{banner}<header class="top"><a class="brand" href="{BASE}">safesend <span>review</span></a>'
        f"{who}</header><main>{body}</main></body></html>"
    )


def _mailboxes_page(report: Mapping[str, Any]) -> str:
    """One row per sender mailbox: state, the minute's and the day's use against safesend's limits."""
    rows = []
    for box in report.get("mailboxes", []):
        minute, day = box.get("minute") or {}, box.get("day") or {}
        rows.append(
            f"<tr><td>{e(box['id'])}</td><td>{e(box.get('address') or '')}</td>"
            f'<td class="state-{e(box.get("state"))}">{e(box.get("state"))}</td>'
            f"<td>{e(minute.get('units_used', ''))} / {e(minute.get('units_limit') or '∞')} units</td>"
            f"<td>{e(day.get('messages_used', ''))} / {e(day.get('messages_limit') or '∞')} messages</td>"
            f"<td>{e(box.get('backlog', ''))}</td><td>{e(box.get('next_free_at') or 'now')}</td></tr>"
        )
    return (
        "<h1>Sender mailboxes</h1>"
        f"<p class=\"count\">As of {e(report.get('as_of'))}; limits are safesend's (the safety share of Gmail's).</p>"
        "<table><thead><tr><th>Mailbox</th><th>Address</th><th>State</th><th>Minute</th><th>Day</th>"
        "<th>Queued</th><th>Next free slot</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
    )


def _select(name: str, label: str, options: Iterable[str], selected: str) -> str:
    rendered = "".join(f'<option value="{e(o)}"{" selected" if o == selected else ""}>{e(o)}</option>' for o in options)
    return (
        f'<label class="field"><span>{e(label)}</span><select name="{e(name)}">'
        f'<option value="">all</option>{rendered}</select></label>'
    )


def _when(value: datetime | None, now: datetime) -> str:
    if value is None:
        return '<span class="muted">—</span>'
    return (
        f'<time datetime="{e(value.isoformat())}" title="{e(value.isoformat())}">'
        f'{e(value.strftime("%Y-%m-%d %H:%M:%S"))} UTC</time> <span class="ago">({e(_ago(value, now))})</span>'
    )


def _ago(value: datetime, now: datetime) -> str:
    seconds = (now - value).total_seconds()
    if seconds < 0:
        return "in the future"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{int(seconds // size)} {unit} ago"
    return f"{int(seconds)} s ago"


def _recipients(job: Job) -> list[tuple[str, list[str]]]:
    return [(kind, [str(mask_emails(a)) for a in (job.payload.get(kind) or [])]) for kind in ("to", "cc", "bcc")]


def _badges(job: Job) -> str:
    return (
        f'<span class="badge state-{e(job.state.value)}">{e(job.state.value)}</span>'
        + (f'<span class="badge reason">{e(job.review_reason)}</span>' if job.review_reason else "")
        + f'<span class="badge channel">{e(job.channel)}</span>'
    )


def _list_entry(job: Job, now: datetime) -> str:
    to = [a for _, addresses in _recipients(job) for a in addresses]
    shown = ", ".join(to[:3]) + (f" +{len(to) - 3}" if len(to) > 3 else "")
    return (
        f'<li class="item"><a href="{e(item_path(job.id))}">'
        f'<span class="subject">{e(job.payload.get("subject") or "(no subject)")}</span>'
        f'<span class="badges">{_badges(job)}</span>'
        f'<span class="meta">to {e(shown or "nobody")} · {job.attempts} attempt{"" if job.attempts == 1 else "s"}'
        f" · waiting since {_when(job.updated_at, now)}</span></a></li>"
    )


def _flash(results: list[str], copies: list[str]) -> str:
    if not results or results[0] not in RESULTS:
        return ""
    tone, text = RESULTS[results[0]]
    extra = ""
    valid = [c for c in copies[:10] if _GMAIL_ID.fullmatch(c)]
    if results[0] == "refused_copy_found" and valid:
        extra = (
            '<ul class="copies">' + "".join(f"<li>Gmail message id <code>{e(c)}</code></li>" for c in valid) + "</ul>"
        )
    return f'<div class="flash {tone}" role="status" data-result="{e(results[0])}"><p>{e(text)}</p>{extra}</div>'


def _item_page(job: Job, now: datetime, flash: str, form: str) -> str:
    payload = job.payload
    recipients = "".join(
        f'<dt>{e(kind.capitalize())}</dt><dd class="addresses">'
        + ("".join(f"<span>{e(a)}</span>" for a in addresses) or '<span class="muted">—</span>')
        + "</dd>"
        for kind, addresses in _recipients(job)
        if addresses or kind == "to"
    )
    reason = REASONS.get(job.review_reason or "", "") if job.state in HUMAN_STATES else ""
    facts = (
        '<section class="card"><h2>Message</h2><dl class="facts">'
        f"<dt>Subject</dt><dd>{e(payload.get('subject') or '(no subject)')}</dd>"
        f"{recipients}"
        f"<dt>From</dt><dd>{e(mask_emails(payload.get('from') or '')) or '—'}</dd>"
        f"<dt>Message-ID</dt><dd><code>{e(job.message_id)}</code></dd>"
        f"<dt>Job</dt><dd><code>{e(job.id)}</code></dd>"
        f"<dt>Dedup key</dt><dd><code>{e(job.dedup_key)}</code></dd>"
        f"<dt>Attempts</dt><dd>{job.attempts} (may have landed: {job.maybe_landed})</dd>"
        f"<dt>Created</dt><dd>{_when(job.created_at, now)}</dd>"
        f"<dt>Last change</dt><dd>{_when(job.updated_at, now)}</dd>"
        f"{_error_fact(job.last_error, 'Last error' if job.state in HUMAN_STATES else 'Earlier error')}"
        '</dl><p class="muted small">The message body is never shown here.</p></section>'
    )
    return (
        f'<p class="back"><a href="{BASE}">← Open items</a></p>{flash}'
        f'<h1 class="subject">{e(payload.get("subject") or "(no subject)")}</h1>'
        f'<p class="badges">{_badges(job)}</p>'
        + (f'<p class="reason-text">{e(reason)}</p>' if reason else "")
        + facts
        + _mailbox(job)
        + form
        + _decisions(job, now)
        + _timeline(job, now)
    )


def _error_fact(error: Mapping[str, Any] | None, label: str) -> str:
    if not error:
        return ""
    code = " ".join(
        str(p)
        for p in (error.get("code"), f"HTTP {error['status']}" if error.get("status") else None, error.get("bucket"))
        if p
    )
    detail = mask_emails(str(error.get("detail") or ""))
    return (
        f"<dt>{e(label)}</dt><dd><code>{e(code)}</code>"
        + (f'<div class="detail">{e(detail)}</div>' if detail else "")
        + "</dd>"
    )


def _mailbox(job: Job) -> str:
    """The mailbox evidence. A search hit without the SENT label is somebody else's message that
    carries our (predictable) Message-ID: marked as such, so a planted message cannot pass for a copy."""
    hits = "".join(
        f'<li><code>{e(h.get("gmail_id"))}</code> <span class="muted">thread {e(h.get("thread_id") or "—")}</span> '
        + "".join(f'<span class="label">{e(label)}</span>' for label in (h.get("label_ids") or []))
        + (
            ' <span class="hit sent">sent copy</span>'
            if "SENT" in (h.get("label_ids") or [])
            else ' <strong class="hit not-sent warn">NOT a sent copy: received or planted, '
            "not proof ours went out</strong>"
        )
        + "</li>"
        for h in job.mailbox_hits
    )
    others = not_sent_hits(job.mailbox_hits)
    copies = "".join(f"<li><code>{e(c)}</code></li>" for c in job.known_copies)
    ref = job.provider_ref.get("gmail_id") if job.provider_ref else None
    stored = (
        f'<p class="warn">Gmail stored a different Message-ID: <code>{e(job.stored_message_id)}</code></p>'
        if job.stored_message_id and job.stored_message_id != job.message_id
        else ""
    )
    return (
        '<section class="card"><h2>Mailbox</h2>'
        f'<p><a class="button secondary" href="{e(gmail_search_link(job.message_id))}" target="_blank" '
        'rel="noopener noreferrer">Search Gmail for this Message-ID ↗</a> '
        f'<a class="button secondary" href="{e(gmail_search_link(job.message_id, sent_only=True))}" '
        'target="_blank" rel="noopener noreferrer">Sent mail only ↗</a></p>'
        '<p class="muted small">Anyone can mail this mailbox a message carrying this Message-ID: only a hit '
        "labelled SENT is a copy of ours.</p>"
        + _not_sent_summary(others)
        + '<dl class="facts"><dt>Copies known</dt><dd>'
        + (f'<ul class="plain">{copies}</ul>' if copies else '<span class="muted">none</span>')
        + "</dd>"
        "<dt>Last search</dt><dd>"
        + (
            f'<ul class="plain">{hits}</ul>'
            if hits
            else f'<span class="muted">{"no hit" if job.checks else "not searched yet"}</span>'
        )
        + f' <span class="muted small">({job.checks} search{"" if job.checks == 1 else "es"})</span></dd>'
        + (f"<dt>Accepted as</dt><dd><code>{e(ref)}</code></dd>" if ref else "")
        + f"</dl>{stored}</section>"
    )


def _not_sent_summary(others: list[str]) -> str:
    if not others:
        return ""
    one = len(others) == 1
    return (
        f'<p class="warn not-sent-summary">{len(others)} hit{"" if one else "s"} of the last search '
        f"{'is' if one else 'are'} NOT a sent copy (received or planted mail carrying this Message-ID): "
        "not proof that the message went out.</p>"
    )


def _decision_name(decision: object) -> object:
    """A stored decision in the reviewer's words; one this console does not know, as stored."""
    return DECISIONS[decision][0] if isinstance(decision, str) and decision in DECISIONS else decision


def _decisions(job: Job, now: datetime) -> str:
    if not job.decisions:
        return ""
    rows = "".join(
        f'<li><div class="when">{_when(d.get("at"), now) if isinstance(d.get("at"), datetime) else e(d.get("at"))}'
        f"</div><div><strong>{e(_decision_name(d.get('decision')))}</strong> → "
        f'<span class="badge">{e(d.get("result"))}</span> by {e(d.get("reviewer"))}'
        f' <span class="muted small">review {e(d.get("review_id"))}</span>'
        + (f'<div class="note">{e(d.get("note"))}</div>' if d.get("note") else "")
        + "</div></li>"
        for d in job.decisions
    )
    return f'<section class="card decisions"><h2>Decisions</h2><ol class="timeline">{rows}</ol></section>'


def _timeline(job: Job, now: datetime) -> str:
    rows = []
    for event in job.events:
        details = {k: v for k, v in event.items() if k not in _EVENT_KEYS_SHOWN_ELSEWHERE}
        text = " · ".join(f"{k}: {_detail(v)}" for k, v in details.items())
        rows.append(
            f'<li class="event kind-{e(event.get("kind"))}"><div class="when">'
            f"{_when(event.get('at'), now) if isinstance(event.get('at'), datetime) else ''}</div>"
            f"<div><strong>{e(EVENT_LABELS.get(str(event.get('kind')), event.get('kind')))}</strong>"
            f' <span class="muted small">{e(event.get("state"))}, attempt {e(event.get("attempt"))}</span>'
            + (f'<div class="detail">{e(mask_emails(text))}</div>' if text else "")
            + "</div></li>"
        )
    dropped = (
        f'<p class="muted small">{job.events_dropped} older events were dropped.</p>' if job.events_dropped else ""
    )
    return f'<section class="card events"><h2>Timeline</h2>{dropped}<ol class="timeline">{"".join(rows)}</ol></section>'


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
CONSOLE_CSS = """
:root{--fg:#1d2329;--muted:#5f6b76;--bg:#f4f6f8;--card:#fff;--line:#d9dee3;--accent:#1a5fb4;--danger:#b42318;
--ok:#1e7d3a;--warn:#9a5b00;font-family:system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--fg);font-size:16px;line-height:1.45}
main{max-width:60rem;margin:0 auto;padding:1rem}
a{color:var(--accent)}
code{font-family:ui-monospace,"DejaVu Sans Mono",monospace;font-size:.88em;overflow-wrap:anywhere;word-break:break-all}
h1{font-size:1.45rem;margin:.4rem 0 .6rem;overflow-wrap:anywhere}
h2{font-size:1.1rem;margin:0 0 .6rem}
.devbanner{background:#b3261e;color:#fff;padding:.6rem 1rem;font-size:.95rem;text-align:center}
.devbanner code{color:#fff}
.top{display:flex;justify-content:space-between;align-items:center;gap:.5rem;flex-wrap:wrap;
background:#17212b;color:#fff;padding:.6rem 1rem}
.brand{color:#fff;text-decoration:none;font-weight:700}
.brand span{font-weight:400;opacity:.8}
.who{font-size:.9rem;opacity:.9;overflow-wrap:anywhere}
.card{background:var(--card);border:1px solid var(--line);border-radius:.6rem;padding:1rem;margin:0 0 1rem}
.filters{display:flex;flex-wrap:wrap;gap:.6rem;align-items:flex-end;margin:0 0 .6rem}
.field{display:flex;flex-direction:column;font-size:.85rem;color:var(--muted)}
select,textarea{font:inherit;border:1px solid var(--line);border-radius:.4rem;padding:.45rem;background:#fff;
color:var(--fg)}
select{min-width:10rem}
textarea{width:100%;margin:.3rem 0 .8rem;resize:vertical}
.count{color:var(--muted);margin:.2rem 0 .8rem}
.empty{background:var(--card);border:1px dashed var(--line);border-radius:.6rem;padding:1.5rem;text-align:center}
.items{list-style:none;margin:0;padding:0}
.item a{display:flex;flex-direction:column;gap:.3rem;background:var(--card);border:1px solid var(--line);
border-radius:.6rem;padding:.8rem 1rem;margin:0 0 .6rem;color:inherit;text-decoration:none}
.item a:hover,.item a:focus{border-color:var(--accent);outline:none}
.item .subject{font-weight:600;color:var(--accent);overflow-wrap:anywhere}
.meta{font-size:.88rem;color:var(--muted);overflow-wrap:anywhere}
.badges{display:flex;flex-wrap:wrap;gap:.3rem;margin:0 0 .5rem}
.badge{display:inline-block;font-size:.78rem;padding:.1rem .5rem;border-radius:1rem;background:#e7ecf1;color:#26323d}
.badge.state-review{background:#fde7c4;color:#6b3d00}.badge.state-failed{background:#fbd5d2;color:#7a1a12}
.badge.state-sent{background:#d3f0dc;color:#0f5127}.badge.state-cancelled{background:#e3e3e3;color:#333}
.badge.reason{background:#e8e0f8;color:#3f2a77}
.reason-text{margin:0 0 1rem}
.facts{display:grid;grid-template-columns:9rem 1fr;gap:.35rem .8rem;margin:0}
.facts dt{color:var(--muted);font-size:.9rem}
.facts dd{margin:0;overflow-wrap:anywhere;min-width:0}
.addresses span{display:inline-block;margin:0 .6rem 0 0}
.detail{font-size:.85rem;color:var(--muted);overflow-wrap:anywhere}
.plain{list-style:none;margin:0;padding:0}
.label{font-size:.72rem;border:1px solid var(--line);border-radius:.3rem;padding:0 .3rem;margin-left:.25rem}
.hit{font-size:.78rem;margin-left:.35rem;padding:0 .3rem;border-radius:.3rem}.hit.sent{background:#d3f0dc;color:#0f5127}
.muted{color:var(--muted)}.small{font-size:.82rem}
.button,button{display:inline-block;font:inherit;font-weight:600;border-radius:.45rem;padding:.6rem 1rem;
border:1px solid transparent;cursor:pointer;text-decoration:none;text-align:center}
.primary{background:var(--accent);color:#fff}.secondary{background:#fff;color:var(--accent);border-color:var(--accent)}
.danger{background:#fff;color:var(--danger);border-color:var(--danger)}
.choices{display:grid;grid-template-columns:repeat(auto-fit,minmax(12rem,1fr));gap:.8rem}
.choice button{width:100%}
.hint{font-size:.82rem;color:var(--muted);margin:.3rem 0 0}
form.busy button{opacity:.55;cursor:progress}
.flash{border-radius:.6rem;padding:.7rem 1rem;margin:0 0 1rem;border:1px solid}
.flash p{margin:0}.flash.ok{background:#e6f4ea;border-color:#9fd3ad}.flash.info{background:#e8f0fb;border-color:#a9c3ea}
.flash.warn,.warn{background:#fff4e0;border-color:#f0c36d}
.copies{margin:.4rem 0 0}
.timeline{list-style:none;margin:0;padding:0}
.timeline li{display:grid;grid-template-columns:13rem 1fr;gap:.2rem .8rem;padding:.45rem 0;
border-top:1px solid var(--line)}
.timeline li:first-child{border-top:0}
.timeline .when{font-size:.82rem;color:var(--muted)}
.note{white-space:pre-wrap;overflow-wrap:anywhere;background:#f6f7f9;border-radius:.3rem;padding:.3rem .5rem;
margin-top:.2rem}
.problem h1{margin-top:0}.back{margin:0 0 .3rem}
.ago{white-space:nowrap}
@media (max-width:40rem){
main{padding:.6rem}
.facts{grid-template-columns:1fr}.facts dt{margin-top:.35rem}
.timeline li{grid-template-columns:1fr}
.filters{flex-direction:column;align-items:stretch}select{width:100%}
.choices{grid-template-columns:1fr}
}
"""

CONSOLE_JS = """(function () {
  "use strict";
  // A decision form submits once: a double click, or a second tap while the first is on its way,
  // is stopped here (the server would replay it anyway, never apply it twice).
  document.querySelectorAll("form[data-once]").forEach(function (form) {
    form.addEventListener("submit", function (event) {
      if (form.getAttribute("data-sent") === "1") { event.preventDefault(); return; }
      form.setAttribute("data-sent", "1");
      form.classList.add("busy");
      form.querySelectorAll("button").forEach(function (b) { b.setAttribute("aria-disabled", "true"); });
      var chosen = event.submitter;
      if (chosen && chosen.getAttribute("data-busy")) { chosen.textContent = chosen.getAttribute("data-busy"); }
    });
  });
  // Filters apply as soon as one is chosen (the Filter button does the same without script).
  document.querySelectorAll("form[data-autosubmit] select").forEach(function (select) {
    select.addEventListener("change", function () { select.form.submit(); });
  });
})();
"""

ICON_SVG = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16"><rect width="16" height="16" rx="3" '
    'fill="#17212b"/><path d="M3 8.5l3 3 7-7" stroke="#fff" stroke-width="2" fill="none"/></svg>'
)

ASSETS = {
    CSS_PATH: ("text/css; charset=utf-8", CONSOLE_CSS),
    JS_PATH: ("text/javascript; charset=utf-8", CONSOLE_JS),
    ICON_PATH: ("image/svg+xml", ICON_SVG),
}
