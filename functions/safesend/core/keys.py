"""Dedup key -> job id -> Message-ID. Pure functions of the key: no clock, no uuid, no execution id.

The same logical send must always produce the same Message-ID, because that ID
is the only handle we have on Gmail's side to ask "did this already go out?".
"""

from __future__ import annotations

import hashlib
import re

# RFC 5322 3.2.3 atext, and dot-atom-text = 1*atext *("." 1*atext).
_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]"
_DOT_ATOM_TEXT = rf"{_ATEXT}+(?:\.{_ATEXT}+)*"
# RFC 5322 3.6.4 msg-id without the obsolete forms and without CFWS:
#   "<" id-left "@" id-right ">", id-left = dot-atom-text, id-right = dot-atom-text / no-fold-literal.
_MSG_ID_RE = re.compile(rf"<{_DOT_ATOM_TEXT}@(?:{_DOT_ATOM_TEXT}|\[[\x21-\x5a\x5e-\x7e]*\])>")
# A DNS host name: stricter than dot-atom-text, so the ID is also safe for every MTA on the way.
_HOST_LABEL = r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)"
_HOSTNAME_RE = re.compile(rf"{_HOST_LABEL}(?:\.{_HOST_LABEL})+")

_JOB_ID_RE = re.compile(r"[0-9a-f]{32}")
KEY_PART_FIELDS = ("customer_id", "event_type", "order_id")
MAX_KEY_LENGTH = 255
# safesend's own reviewer emails are jobs keyed `review:<review_id>`: a key space callers may not use
# (a caller's `review:...` key could pre-claim one, or its own review items would never be emailed).
REVIEW_EMAIL_KEY_PREFIX = "review:"


def job_id_for(dedup_key: str) -> str:
    """The job id: the first 32 hex digits of sha256(key). Also the Firestore document id."""
    return hashlib.sha256(dedup_key.encode("utf-8")).hexdigest()[:32]


def is_job_id(value: str) -> bool:
    """The shape job_id_for produces; anything else is refused before it reaches a store path."""
    return _JOB_ID_RE.fullmatch(value) is not None


def message_id_for(dedup_key: str, domain: str) -> str:
    """`<job-{job id}@{domain}>`: strictly RFC 5322-valid, so Gmail has no reason to rewrite it."""
    if not is_valid_hostname(domain):
        raise ValueError(f"Message-ID domain {domain!r} is not a valid host name")
    return f"<job-{job_id_for(dedup_key)}@{domain.lower()}>"


def compose_dedup_key(customer_id: str, event_type: str, order_id: str) -> str:
    """`customer_id:event_type:order_id`, the source article's key. Parts must not contain ':'."""
    for part in (customer_id, event_type, order_id):
        if ":" in part:
            raise ValueError("key parts must not contain ':' (the key would be ambiguous)")
    return f"{customer_id}:{event_type}:{order_id}"


def is_valid_message_id(value: str) -> bool:
    """True when `value` is a msg-id per RFC 5322 3.6.4 (no obsolete syntax, no folding)."""
    return _MSG_ID_RE.fullmatch(value) is not None


def is_valid_hostname(value: str) -> bool:
    """Two or more LDH labels of 1-63 characters, 253 in all (RFC 1035 2.3.4): what every MTA on
    the way accepts in a Message-ID. Labels over 63 are refused by `_HOST_LABEL`'s bound."""
    return len(value) <= 253 and _HOSTNAME_RE.fullmatch(value) is not None


def bare_message_id(message_id: str) -> str:
    """The ID without angle brackets, as Gmail's rfc822msgid: operator and search URLs use it."""
    return message_id.strip().removeprefix("<").removesuffix(">")
