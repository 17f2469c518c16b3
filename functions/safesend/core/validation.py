"""Validation of the send request. Every bad field is reported at once, by name (HTTP 400)."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from email.headerregistry import Address
from typing import Any

from .callbacks import CallbackPolicy, CallbackUrlError
from .errors import RequestValidationError
from .keys import KEY_PART_FIELDS, MAX_KEY_LENGTH, REVIEW_EMAIL_KEY_PREFIX, compose_dedup_key
from .mime import OutgoingMessage

MAX_RECIPIENTS = 100  # Gmail API limit per message
MAX_SUBJECT_CHARS = 998
MAX_BODY_BYTES = 400_000  # the job lives in one Firestore document (1 MiB), events included
MAX_ADDRESS_CHARS = 254  # RFC 5321 4.5.3.1: a 256-octet path, angle brackets included
MAX_LOCAL_PART_CHARS = 64
MAX_DOMAIN_LABEL_CHARS = 63
# The email package reads a header back in time superlinear in its words (the MIME check parses
# every address header): unbounded names or Reply-To lists cost a worker minutes of CPU per request.
MAX_DISPLAY_NAME_CHARS = 256
MAX_REPLY_TO = MAX_RECIPIENTS
ALLOWED_FIELDS = frozenset(
    {
        "dedup_key",
        *KEY_PART_FIELDS,
        "channel",
        "to",
        "cc",
        "bcc",
        "reply_to",
        "from",
        "subject",
        "text",
        "html",
        "callback_url",
    }
)
# C0/C1 controls and the Unicode line/paragraph separators: the email package treats the latter as
# line breaks, so they would make a header unbuildable after the job was already claimed.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_KEY_CHARS = re.compile(r"[\x21-\x7e]+")
_KEY_SHAPE = re.compile(rf"[\x21-\x7e]{{1,{MAX_KEY_LENGTH}}}")  # no spaces, no controls, no Unicode
_MULTILINE_BAD = re.compile(r"\x00")  # bodies may hold tabs, form feeds...; NUL breaks MIME
# Every RFC 2047 encoded word starts with "=?" and the email package decodes one wherever it finds
# it (unstructured text, phrases, quoted strings, local parts; unknown charsets and inner spaces
# included), even across two recipients once they are joined into one header. Refusing the two
# characters is the only rule that covers every partial and near form.
_ENCODED_WORD_START = "=?"
# Bidi embeddings, overrides, isolates and marks, and zero-width characters: they make a subject or
# a name display as something else than what it says (RLO-spoofed names, invisible differences).
_INVISIBLE = re.compile(r"[\u061c\u200b-\u200f\u202a-\u202e\u2060\u2066-\u2069\ufeff]")
_LOCAL = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*"
_ADDR_SPEC = re.compile(rf"{_LOCAL}@(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?\.)+[A-Za-z]{{2,63}}")
# The display name is taken possessively up to the first `<` (and stripped after): a lazy name
# followed by `\s*` backtracked quadratically over a run of spaces (1 MiB of them: an hour of CPU).
_NAME_ADDR = re.compile(rf"(?P<display>[^<>]*+)<(?P<addr>{_ADDR_SPEC.pattern})>")


class _AddressError(ValueError):
    """Why one address item was refused; it becomes the field's 400 reason."""


@dataclass(frozen=True)
class SendRequest:
    dedup_key: str
    channel: str
    message: OutgoingMessage
    payload: dict[str, Any]  # the normalised message fields, as stored in the job
    payload_hash: str  # sha256 of the canonical payload: same key + other payload -> 422
    callback_url: str | None = None  # not part of the payload: each webhook execution brings its own


def parse_send_request(
    body: Any,
    default_sender: str | None,
    known_channels: frozenset[str] | None = None,
    max_body_bytes: int = MAX_BODY_BYTES,
    callbacks: CallbackPolicy | None = None,
    *,
    reserved_ok: bool = False,
) -> SendRequest:
    """Validate the JSON body of a send call. Raises RequestValidationError naming each bad field.
    `reserved_ok`: safesend's own reviewer emails may use the reserved `review:` key space."""
    if not isinstance(body, Mapping):
        raise RequestValidationError({"body": "must be a JSON object"})
    errors: dict[str, str] = {}
    for name in sorted(set(body) - ALLOWED_FIELDS):
        errors[name] = "unknown field"

    dedup_key = _dedup_key(body, errors)
    if dedup_key and dedup_key.startswith(REVIEW_EMAIL_KEY_PREFIX) and not reserved_ok:
        errors["dedup_key"] = (
            f"keys starting with {REVIEW_EMAIL_KEY_PREFIX!r} are reserved for safesend's reviewer emails: "
            "use another prefix"
        )
        dedup_key = None
    channel = _text(body, "channel", errors, required=True, max_len=100)
    if channel and known_channels is not None and channel not in known_channels:
        errors["channel"] = f"unknown channel {channel!r}: not configured on the server"
    to = _addresses(body, "to", errors, required=True)
    cc = _addresses(body, "cc", errors)
    bcc = _addresses(body, "bcc", errors)
    reply_to = _addresses(body, "reply_to", errors)
    senders = _addresses(body, "from", errors)
    if len(senders) > 1:
        errors["from"] = "exactly one sender"
    sender = senders[0] if senders else default_sender
    if not sender and "from" not in errors:
        errors["from"] = "required: no default sender is configured on the server"
    subject = _text(body, "subject", errors, required=True, max_len=MAX_SUBJECT_CHARS, header=True)
    text = _text(body, "text", errors, required=True, allow_empty=True, multiline=True)
    html = _text(body, "html", errors, multiline=True, allow_empty=True) or None  # "" means no HTML part
    if len(to) + len(cc) + len(bcc) > MAX_RECIPIENTS:
        errors["to"] = f"at most {MAX_RECIPIENTS} recipients in to, cc and bcc together"
    if len(reply_to) > MAX_REPLY_TO:
        errors["reply_to"] = f"at most {MAX_REPLY_TO} addresses"
    size = len((text or "").encode()) + len((html or "").encode())
    if size > max_body_bytes:
        errors["text"] = f"text and html together exceed {max_body_bytes} bytes"
    callback_url = _callback_url(body, errors, callbacks or CallbackPolicy())
    if errors:
        raise RequestValidationError(errors)

    message = OutgoingMessage(
        sender=sender or "",
        to=tuple(to),
        subject=subject or "",
        text=text or "",
        cc=tuple(cc),
        bcc=tuple(bcc),
        reply_to=tuple(reply_to),
        html=html,
    )
    payload = {
        "from": message.sender,
        "to": list(message.to),
        "cc": list(message.cc),
        "bcc": list(message.bcc),
        "reply_to": list(message.reply_to),
        "subject": message.subject,
        "text": message.text,
        "html": message.html,
    }
    return SendRequest(
        dedup_key=dedup_key or "",
        channel=channel or "",
        message=message,
        payload=payload,
        payload_hash=payload_hash(channel or "", payload),
        callback_url=callback_url,
    )


def _callback_url(body: Mapping[str, Any], errors: dict[str, str], policy: CallbackPolicy) -> str | None:
    value = body.get("callback_url")
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        errors["callback_url"] = "must be a string (an https URL)"
        return None
    try:
        return policy.check_url(value)
    except CallbackUrlError as exc:
        errors["callback_url"] = str(exc)
        return None


def payload_hash(channel: str, payload: Mapping[str, Any]) -> str:
    canonical = json.dumps({"channel": channel, **payload}, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def message_from_payload(payload: Mapping[str, Any]) -> OutgoingMessage:
    """Rebuild the message for a resend from what the job stored."""
    return OutgoingMessage(
        sender=payload["from"],
        to=tuple(payload["to"]),
        subject=payload["subject"],
        text=payload["text"],
        cc=tuple(payload.get("cc") or ()),
        bcc=tuple(payload.get("bcc") or ()),
        reply_to=tuple(payload.get("reply_to") or ()),
        html=payload.get("html"),
    )


def dedup_key_from_query(params: Mapping[str, str]) -> str | None:
    """For status lookups: `dedup_key`, or the three key fields."""
    if params.get("dedup_key"):
        return params["dedup_key"]
    if all(params.get(f) for f in KEY_PART_FIELDS):
        try:
            return compose_dedup_key(*(params[f] for f in KEY_PART_FIELDS))
        except ValueError:
            return None
    return None


def _dedup_key(body: Mapping[str, Any], errors: dict[str, str]) -> str | None:
    if "dedup_key" in body:
        if any(f in body for f in KEY_PART_FIELDS):
            errors["dedup_key"] = "give dedup_key or customer_id/event_type/order_id, not both"
            return None
        key = _text(body, "dedup_key", errors, required=True, max_len=MAX_KEY_LENGTH)
        if key is not None and not _KEY_SHAPE.fullmatch(key):
            errors["dedup_key"] = "printable ASCII without spaces, 1 to 255 characters"
            return None
        return key
    parts = []
    for name in KEY_PART_FIELDS:
        value = body.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        if not isinstance(value, str) or not value.strip():
            errors[name] = "required (or give dedup_key): a non-empty string"
        elif ":" in value or not _KEY_CHARS.fullmatch(value):
            errors[name] = "printable ASCII without spaces or ':'"
        else:
            parts.append(value)
    if len(parts) != len(KEY_PART_FIELDS):
        return None
    key = compose_dedup_key(*parts)
    if len(key) > MAX_KEY_LENGTH:
        errors["dedup_key"] = f"the composed key exceeds {MAX_KEY_LENGTH} characters"
        return None
    return key


def _text(
    body: Mapping[str, Any],
    name: str,
    errors: dict[str, str],
    *,
    required: bool = False,
    allow_empty: bool = False,
    max_len: int | None = None,
    multiline: bool = False,
    header: bool = False,
) -> str | None:
    value = body.get(name)
    if value is None:
        if required:
            errors[name] = "required"
        return None
    if not isinstance(value, str):
        errors[name] = "must be a string"
        return None
    if not value.strip() and not allow_empty:
        errors[name] = "must not be empty"
        return None
    if max_len is not None and len(value) > max_len:
        errors[name] = f"at most {max_len} characters"
        return None
    if not _is_encodable(value):
        errors[name] = "must be valid Unicode (no lone surrogates)"
        return None
    if (_MULTILINE_BAD if multiline else _CONTROL).search(value):
        errors[name] = "must not contain NUL" if multiline else "must not contain control characters or line breaks"
        return None
    problem = _header_text_problem(value) if header else None
    if problem:
        errors[name] = problem
        return None
    return value


def _header_text_problem(value: str) -> str | None:
    """Why `value` may not reach a header although it is printable, or None."""
    if _ENCODED_WORD_START in value:
        return "must not contain '=?': RFC 2047 encoded-word syntax would be decoded into the header"
    invisible = _INVISIBLE.search(value)
    if invisible:
        return f"must not contain the invisible or reordering character U+{ord(invisible.group()):04X}"
    return None


def _is_encodable(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _addresses(body: Mapping[str, Any], name: str, errors: dict[str, str], required: bool = False) -> list[str]:
    value = body.get(name)
    if value is None or value in ([], ""):
        if required:
            errors[name] = "required: an address or a list of addresses"
        return []
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
        errors[name] = "must be a string or a list of strings"
        return []
    result: list[str] = []
    for item in items:
        try:
            result.append(_one_address(item))
        except _AddressError as exc:
            errors[name] = f"invalid address {item[:200]!r}: {exc}"
            return []
    return result


def _one_address(item: str) -> str:
    """One mailbox, `addr` or `Name <addr>`, matched strictly (no lenient re-gluing of stray words),
    returned in the form the headers will carry."""
    if _CONTROL.search(item) or not _is_encodable(item):
        raise _AddressError("control characters, line breaks or lone surrogates")
    display, addr = _split_mailbox(item.strip())
    if len(display) > MAX_DISPLAY_NAME_CHARS:
        raise _AddressError(f"display name longer than {MAX_DISPLAY_NAME_CHARS} characters")
    _check_address_lengths(addr)
    username, domain = addr.rsplit("@", 1)
    formatted = str(Address(display_name=display, username=username, domain=domain))
    problem = _header_text_problem(formatted)
    if problem:
        raise _AddressError(problem)
    return formatted


def _split_mailbox(text: str) -> tuple[str, str]:
    """(display name, addr-spec) of `addr`, `Name <addr>` or `"Name" <addr>`."""
    match = _NAME_ADDR.fullmatch(text)
    if match:
        display, addr = match.group("display").strip(), match.group("addr")
        if display.startswith('"') and display.endswith('"') and len(display) >= 2:
            return display[1:-1].replace('\\"', '"'), addr
        if '"' in display:
            raise _AddressError("unbalanced quotes in the display name")
        return display, addr
    if _ADDR_SPEC.fullmatch(text):
        return "", text
    raise _AddressError("not a mailbox (`addr` or `Name <addr>`)")


def _check_address_lengths(addr: str) -> None:
    """RFC 5321 limits: longer addresses are refused by mail servers after the job was claimed."""
    local, domain = addr.rsplit("@", 1)
    if len(addr) > MAX_ADDRESS_CHARS:
        raise _AddressError(f"longer than {MAX_ADDRESS_CHARS} characters")
    if len(local) > MAX_LOCAL_PART_CHARS:
        raise _AddressError(f"local part longer than {MAX_LOCAL_PART_CHARS} characters")
    if any(len(label) > MAX_DOMAIN_LABEL_CHARS for label in domain.split(".")):
        raise _AddressError(f"a domain label longer than {MAX_DOMAIN_LABEL_CHARS} characters")
