"""Raw MIME for Gmail's `messages.send(raw=...)`, built here so nobody else picks the Message-ID.

Every attempt of a job produces byte-identical MIME: the Date is the job's
creation time and the multipart boundary derives from the job id. The only
thing that differs between two attempts is whether Gmail accepted them.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from datetime import datetime
from email import policy as email_policy
from email.message import EmailMessage
from email.utils import format_datetime

from .keys import is_valid_message_id

# SMTP policy: CRLF line endings, RFC 2047 for non-ASCII headers, lines folded at 78.
_POLICY = email_policy.SMTP


@dataclass(frozen=True)
class OutgoingMessage:
    """A normalised message: every address list already validated by `validation`."""

    sender: str
    to: tuple[str, ...]
    subject: str
    text: str
    cc: tuple[str, ...] = ()
    bcc: tuple[str, ...] = ()
    reply_to: tuple[str, ...] = ()
    html: str | None = None


def build_mime(message: OutgoingMessage, message_id: str, job_id: str, date: datetime) -> bytes:
    """The RFC 5322 bytes Gmail will store, Message-ID included."""
    if not is_valid_message_id(message_id):
        raise ValueError(f"refusing to send an invalid Message-ID {message_id!r}")
    msg = EmailMessage(policy=_POLICY)
    msg["From"] = message.sender
    msg["To"] = ", ".join(message.to)
    if message.cc:
        msg["Cc"] = ", ".join(message.cc)
    if message.bcc:
        msg["Bcc"] = ", ".join(message.bcc)  # Gmail delivers to Bcc and keeps it only in the sent copy
    if message.reply_to:
        msg["Reply-To"] = ", ".join(message.reply_to)
    msg["Subject"] = message.subject
    msg["Date"] = format_datetime(date)
    msg["Message-ID"] = message_id
    msg["X-Safesend-Job"] = job_id
    msg.set_content(message.text, charset="utf-8")
    if message.html is not None:
        msg.add_alternative(message.html, subtype="html", charset="utf-8")
        msg.set_boundary(_boundary_for(job_id, message))
    raw = msg.as_bytes(policy=_POLICY)
    _assert_message_id_survived(raw, message_id)
    return raw


def encode_raw(mime: bytes) -> str:
    """base64url, as the Gmail API's `raw` field wants it."""
    return base64.urlsafe_b64encode(mime).decode("ascii")


def _boundary_for(job_id: str, message: OutgoingMessage) -> str:
    """Deterministic, and never a substring of a body part (re-hash until it is not)."""
    seed = job_id
    for _ in range(8):
        boundary = "=_safesend_" + hashlib.sha256(seed.encode()).hexdigest()[:24]
        if boundary not in message.text and boundary not in (message.html or ""):
            return boundary
        seed = boundary
    raise ValueError("could not find a MIME boundary absent from the body")


def _assert_message_id_survived(raw: bytes, message_id: str) -> None:
    """The generator must not fold or re-encode the header: search depends on it verbatim."""
    if f"\r\nMessage-ID: {message_id}\r\n".encode("ascii") not in raw:
        raise ValueError("Message-ID header was altered while generating MIME")
