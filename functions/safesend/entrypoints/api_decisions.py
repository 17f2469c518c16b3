"""Decisions by API (POST /decide): who may make them, and the request's shape. Pure: no I/O.

A decision by API is the same decision a reviewer makes in the console (service.decide: the review
id it answers, replays, the mailbox check before a resend), but made by a workflow. It is off unless
SAFESEND_API_DECIDERS names the caller, because a caller that may decide can make safesend send a
message a person held back; the decision is recorded under the caller's verified identity.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..core.errors import RequestValidationError
from ..core.keys import job_id_for
from ..core.lifecycle import MAX_NOTE_CHARS, Decision

REVIEW_ID = re.compile(r"(?P<job_id>[0-9a-f]{32}):[0-9]{1,9}")
ALLOWED_FIELDS = frozenset({"review_id", "job_id", "dedup_key", "decision", "note", "reviewer"})
MAX_REVIEWER_CHARS = 200
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
# A lone surrogate (JSON's "\ud800") has no UTF-8 form: stored, no chat line of the decision could
# ever be posted, and the job's thread would wait behind it.
_SURROGATE = re.compile(r"[\ud800-\udfff]")


@dataclass(frozen=True)
class DecisionRequest:
    job_id: str
    review_id: str
    decision: str
    note: str
    reviewer: str | None  # who the workflow says decided (a name from a chat button): recorded, not trusted


def allowed_decider(caller: str, deciders: frozenset[str]) -> str | None:
    """The verified identity (as auth.Authenticator.check names it: `key:<key id>`, `hmac`, a service
    account) that SAFESEND_API_DECIDERS allows, or None. Every part of `caller` was verified."""
    return next((part for part in caller.split("+") if part in deciders), None)


def recorded_reviewer(decider: str, request: DecisionRequest) -> str:
    """The decision's `reviewer`: the verified caller, then whoever the workflow names."""
    return f"api {decider}" + (f" for {request.reviewer}" if request.reviewer else "")


def parse_decision_request(body: Any) -> DecisionRequest:
    """The fields of POST /decide; every bad one reported at once (RequestValidationError: HTTP 400)."""
    if not isinstance(body, Mapping):
        raise RequestValidationError({"body": "a JSON object"})
    errors = {name: "unknown field" for name in body if name not in ALLOWED_FIELDS}
    review_id = body.get("review_id")
    match = REVIEW_ID.fullmatch(review_id) if isinstance(review_id, str) else None
    if match is None:
        errors["review_id"] = "required: the job's review_id (<job_id>:<n>, from /status or the callback)"
    decision = body.get("decision")
    if decision not in Decision.ALL:
        errors["decision"] = f"one of {', '.join(Decision.ALL)}"
    note = _optional_text(body, "note", MAX_NOTE_CHARS, errors, multiline=True)
    reviewer = _optional_text(body, "reviewer", MAX_REVIEWER_CHARS, errors, multiline=False)
    job_id = _job_id(body, errors)
    if match is not None and job_id is not None and job_id != match["job_id"]:
        errors["review_id"] = "belongs to another job than job_id / dedup_key name"
    if errors or match is None:
        raise RequestValidationError(errors)
    return DecisionRequest(match["job_id"], match[0], str(decision), note or "", reviewer or None)


def _job_id(body: Mapping[str, Any], errors: dict[str, str]) -> str | None:
    """job_id or dedup_key, optional: when given, the review id must be one of that job's."""
    if "job_id" in body and "dedup_key" in body:
        errors["job_id"] = "give job_id or dedup_key, not both"
        return None
    if "dedup_key" in body:
        key = body["dedup_key"]
        if not isinstance(key, str) or not key or _SURROGATE.search(key):
            errors["dedup_key"] = "a non-empty string of valid Unicode"
            return None
        return job_id_for(key)
    job_id = body.get("job_id")
    if job_id is None:
        return None
    if not isinstance(job_id, str) or not re.fullmatch(r"[0-9a-f]{32}", job_id):
        errors["job_id"] = "32 lowercase hex digits"
        return None
    return job_id


def _optional_text(
    body: Mapping[str, Any], name: str, limit: int, errors: dict[str, str], *, multiline: bool
) -> str | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        errors[name] = "a string"
        return None
    value = value.replace("\r\n", "\n").strip()
    if len(value) > limit:
        errors[name] = f"at most {limit} characters"
    elif _SURROGATE.search(value):
        errors[name] = "valid Unicode (no lone surrogates)"
    elif _CONTROL.search(value.replace("\n", "").replace("\t", "") if multiline else value):
        errors[name] = "no control characters"
    return value
