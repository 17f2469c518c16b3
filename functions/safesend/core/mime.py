"""Raw MIME for Gmail's `messages.send(raw=...)`, built here so nobody else picks the Message-ID.

Every attempt of a job produces byte-identical MIME: the Date is the job's
creation time and the multipart boundary derives from the job id. The only
thing that differs between two attempts is whether Gmail accepted them.

The email package renders the message, but it is not trusted with the result: it folds long
headers (our Message-ID included, for some domain lengths), it decodes RFC 2047 encoded words
found in the text it is given (CPython before 3.12.5/3.11.10 even re-emits a decoded CR LF as a
real line break), and its address-list folder can lose a recipient or invent a group. So the
Message-ID and address headers are written by us, and the finished bytes are parsed back and
compared with what we meant before anyone may send them (`verify_mime`).
"""

from __future__ import annotations

import base64
import hashlib
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from email import policy as email_policy
from email.errors import MessageError
from email.message import EmailMessage
from email.parser import BytesParser
from email.utils import format_datetime
from typing import Any

from .keys import is_job_id, is_valid_message_id, job_id_for, message_id_for

# SMTP policy: CRLF line endings, RFC 2047 for non-ASCII headers, lines folded at 78.
_POLICY = email_policy.SMTP
# Parsing back: compat32 keeps raw header text (cheap, verbatim); caller-text headers are then
# decoded with the default policy, as a mail client would.
_RAW_PARSER = BytesParser(policy=email_policy.compat32)
_DECODING = email_policy.default
_FOLD_RE = re.compile(r"\r?\n(?=[ \t])")
# What the email package raises on text it cannot render or read back (its parser even raises
# IndexError and AttributeError on some of its own folded output): all mean "do not send this".
_RENDER_ERRORS = (ValueError, TypeError, LookupError, AttributeError, MessageError)
_JOB_HEADER = b"X-Safesend-Job:"
# A mailbox as `validation` writes it (str(Address)): `addr`, `Name <addr>` or `"Quoted" <addr>`.
# Possessive names (`*+`): a lazy one before `\s*` backtracked quadratically over a run of spaces.
_ADDR = r'[^<>\s"(),:;@\[\]\\]+@[^<>\s"(),:;@\[\]\\]+'
_MAILBOX_RE = re.compile(
    rf'(?:(?P<display>"(?:[^"\\]|\\.)*+"|[^"<>]*+)\s*<(?P<addr>{_ADDR})>|(?P<bare>{_ADDR}))', re.DOTALL
)
_QUOTED_PAIR_RE = re.compile(r"\\(.)", re.DOTALL)
_ATOM_RE = re.compile(r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]{1,60}")  # RFC 5322 atext, short enough to fold
_MAX_QUOTED = 60
_FOLD_AT = 78
_MAX_LINE = 998  # RFC 5322 2.1.1, excluding CRLF
_EW_BYTES = 45  # 60 base64 characters: "=?utf-8?b?" + 60 + "?=" is 72, under RFC 2047's 75
_LINE_BREAKS = ("\x00", "\r", "\n")
_FIELD_OF_HEADER = {"from": "from", "to": "to", "cc": "cc", "bcc": "bcc", "reply-to": "reply_to", "subject": "subject"}
_Headers = list[tuple[str, Any]]  # (lower-case name, header object or unfolded raw text)
_PROBE_KEY = "safesend:start-up:probe"
_PROBE_DATE = datetime(2000, 1, 1, tzinfo=UTC)


class MimeBuildError(ValueError):
    """The bytes would not say exactly what we meant: never send them.

    `field` names the request field at fault when known ("subject", "to", "cc", "bcc",
    "reply_to", "from", "text"), so a caller can answer 400 for that field.
    """

    def __init__(self, reason: str, field: str | None = None):
        super().__init__(reason)
        self.field = field


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


@dataclass(frozen=True)
class _AddressHeader:
    name: str  # the header, e.g. "Reply-To"
    field: str  # the request field it comes from, e.g. "reply_to"
    mailboxes: tuple[str, ...]


def build_mime(message: OutgoingMessage, message_id: str, job_id: str, date: datetime) -> bytes:
    """The RFC 5322 bytes Gmail will store, Message-ID included, verified by parsing them back.

    Deterministic: the same arguments give the same bytes. Raises MimeBuildError (a ValueError).
    """
    if not is_valid_message_id(message_id):
        raise MimeBuildError(f"refusing to send an invalid Message-ID {message_id!r}")
    if not is_job_id(job_id):
        raise MimeBuildError(f"refusing a job id that job_id_for cannot produce: {job_id!r}")
    address_lines = [_address_lines(header) for header in _address_headers(message)]
    raw = _assemble(_render(_compose(message, job_id, date)), address_lines, message_id)
    verify_mime(raw, message, message_id, job_id, date)
    return raw


def probe_mime(domain: str, sender: str | None = None) -> bytes:
    """Build a demanding message (non-ASCII and long subject, encoded names, text + html) for
    `domain` and `sender`: call at start-up so a bad setting fails the deployment, not every send."""
    try:
        message_id = message_id_for(_PROBE_KEY, domain)
    except ValueError as exc:
        raise MimeBuildError(f"Message-ID domain {domain!r} is not usable: {exc}") from exc
    probe = OutgoingMessage(
        sender=f"Safesend Probe <probe@{domain.lower()}>" if sender is None else sender,
        to=("Zoë Ångström-Müller <zoe@example.com>", '"Doe, John" <john@example.com>'),
        cc=("日本語の名前 <jp@example.jp>",),
        reply_to=("Support Ønskeliste <help@example.com>",),
        subject="Ihre Bestellung über 10 € ist unterwegs — Заказ отправлен — 注文は発送されました " * 3,
        text="Grüße,\nthe start-up probe.\n",
        html="<p>Grüße, <b>the start-up probe</b>.</p>\n",
    )
    return build_mime(probe, message_id, job_id_for(_PROBE_KEY), _PROBE_DATE)


def encode_raw(mime: bytes) -> str:
    """base64url, as the Gmail API's `raw` field wants it."""
    return base64.urlsafe_b64encode(mime).decode("ascii")


# ----------------------------------------------------------------------------- rendering


def _address_headers(message: OutgoingMessage) -> list[_AddressHeader]:
    """Every address header we set, in emission order (empty optional ones left out)."""
    headers = [
        _AddressHeader("From", "from", (message.sender,)),
        _AddressHeader("To", "to", message.to),
        _AddressHeader("Cc", "cc", message.cc),
        _AddressHeader("Bcc", "bcc", message.bcc),
        _AddressHeader("Reply-To", "reply_to", message.reply_to),
    ]
    return [h for h in headers if h.mailboxes]


def _split_mailbox(mailbox: str, header: _AddressHeader) -> tuple[str, str]:
    """(display name, addr-spec) as written, by our own strict reading: the email package's
    parser would decode encoded words in it, and so could agree with its own wrong output."""
    match = _MAILBOX_RE.fullmatch(mailbox.strip())
    if match is None:
        raise MimeBuildError(f"{header.name} holds text that is not a single mailbox", header.field)
    if match["bare"] is not None:
        return "", match["bare"]
    display = match["display"]
    if display.startswith('"'):
        return _QUOTED_PAIR_RE.sub(r"\1", display[1:-1]), match["addr"]
    return display.strip(), match["addr"]


def _compose(message: OutgoingMessage, job_id: str, date: datetime) -> EmailMessage:
    """Everything but the address headers and the Message-ID, which we write ourselves."""
    msg = EmailMessage(policy=_POLICY)
    _set_header(msg, "Subject", message.subject, "subject")
    msg["Date"] = format_datetime(date)
    msg["X-Safesend-Job"] = job_id
    msg.set_content(message.text, charset="utf-8")
    if message.html is not None:
        msg.add_alternative(message.html, subtype="html", charset="utf-8")
        msg.set_boundary(_boundary_for(job_id, message))
    return msg


def _set_header(msg: EmailMessage, name: str, value: str, field: str) -> None:
    """Set a header from caller text, naming the field if the email package refuses it."""
    try:
        msg[name] = value
    except _RENDER_ERRORS as exc:
        raise MimeBuildError(f"{name} cannot be rendered: {exc}", field) from exc


def _render(msg: EmailMessage) -> bytes:
    try:
        return msg.as_bytes(policy=_POLICY)
    except _RENDER_ERRORS as exc:
        raise MimeBuildError(f"the message cannot be rendered: {exc}", _culprit(msg)) from exc


def _culprit(msg: EmailMessage) -> str | None:
    """On the error path only: the request field whose header alone fails to fold."""
    for name, value in msg.items():
        try:
            _POLICY.fold_binary(name, value)
        except _RENDER_ERRORS:
            return _FIELD_OF_HEADER.get(name.lower())
    return None


def _assemble(raw: bytes, address_lines: list[bytes], message_id: str) -> bytes:
    """Our address headers first (From, To, Cc, Bcc, Reply-To: the order the email package used),
    and `Message-ID: <...>` on one line just before X-Safesend-Job, where it used to be: the
    generator folds the Message-ID at 78 columns for some domain lengths.

    Without exactly one job header line in the header block, the block is already broken: the
    Message-ID is left out for `verify_mime` to report (after blaming the right field).
    """
    head, separator, body = raw.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    anchors = [i for i, line in enumerate(lines) if line.startswith(_JOB_HEADER)]
    if len(anchors) == 1:
        lines.insert(anchors[0], b"Message-ID: " + message_id.encode("ascii"))
    return b"\r\n".join(address_lines + lines) + separator + body


def _address_lines(header: _AddressHeader) -> bytes:
    """`Name: mailbox, mailbox`, folded between words at 78 columns, by us: on some inputs the
    email package's folder (3.11) encodes the comma between two mailboxes, losing the second,
    or drops the quotes of a long display name, turning it into group syntax."""
    mailboxes = [_mailbox_words(mailbox, header) for mailbox in header.mailboxes]
    for words in mailboxes[:-1]:
        words[-1] += ","
    try:
        return _fold(header.name, mailboxes).encode("ascii")
    except UnicodeEncodeError as exc:
        raise MimeBuildError(f"{header.name} holds a non-ASCII address", header.field) from exc


def _mailbox_words(mailbox: str, header: _AddressHeader) -> list[str]:
    """One mailbox as the words it is written with: display name words, then `<addr>`."""
    display, addr = _split_mailbox(mailbox, header)
    if "=?" in display:  # a client that decodes twice would still see an encoded word
        raise MimeBuildError(f"{header.name}: a display name holds '=?' (RFC 2047 syntax)", header.field)
    try:
        return [*_display_words(display), f"<{addr}>" if display.strip() else addr]
    except UnicodeEncodeError as exc:
        raise MimeBuildError(f"{header.name}: a display name is not valid Unicode", header.field) from exc


def _display_words(display: str) -> list[str]:
    """Atoms when they will do, a quoted string for short ASCII, else RFC 2047 encoded words."""
    words = display.split()
    if display.isascii() and all(_ATOM_RE.fullmatch(word) for word in words):
        return words
    if display.isascii() and display.isprintable() and len(display) <= _MAX_QUOTED:
        return ['"' + display.strip().replace("\\", "\\\\").replace('"', '\\"') + '"']
    return _encoded_words(display.strip())


def _encoded_words(text: str) -> list[str]:
    """UTF-8 base64 encoded words of whole characters (RFC 2047 5.3), each under 75 columns;
    decoders join adjacent ones and ignore the folding whitespace between them."""
    chunks, chunk = [], b""
    for char in text:
        data = char.encode("utf-8")
        if chunk and len(chunk) + len(data) > _EW_BYTES:
            chunks.append(chunk)
            chunk = b""
        chunk += data
    chunks.append(chunk)
    return ["=?utf-8?b?" + base64.b64encode(c).decode("ascii") + "?=" for c in chunks]


def _fold(name: str, mailboxes: list[list[str]]) -> str:
    """Lines of at most 78 columns where words allow: a mailbox that fits on a line of its own is
    not split (as the email package does it), a longer one is broken between words."""
    first = f"{name}:"
    lines = [first]
    for words in mailboxes:
        if not _fits(lines[-1], " ".join(words)) and len(" ".join(words)) < _FOLD_AT:
            _new_line(lines, first)
        for word in words:
            if not _fits(lines[-1], word):
                _new_line(lines, first)
            lines[-1] += " " + word
    return "\r\n".join(lines)


def _fits(line: str, text: str) -> bool:
    return len(line) + 1 + len(text) <= _FOLD_AT


def _new_line(lines: list[str], first: str) -> None:
    """Start a continuation line, unless the current line holds no word to break after yet."""
    if lines[-1] not in ("", first):
        lines.append("")


def _boundary_for(job_id: str, message: OutgoingMessage) -> str:
    """Deterministic, and never a substring of a body part (re-hash until it is not)."""
    seed = job_id
    for _ in range(8):
        boundary = "=_safesend_" + hashlib.sha256(seed.encode()).hexdigest()[:24]
        if boundary not in message.text and boundary not in (message.html or ""):
            return boundary
        seed = boundary
    raise MimeBuildError("could not find a MIME boundary absent from the body", "text")


# ----------------------------------------------------------------------------- verification


def verify_mime(raw: bytes, message: OutgoingMessage, message_id: str, job_id: str, date: datetime) -> None:
    """Parse `raw` and refuse it unless its header block says exactly what we meant.

    Checked structurally, on the parsed headers: the address headers hold the intended mailboxes
    and the Subject decodes to the intended text, up to whitespace (checked first, so the field
    at fault is named); the header names are exactly ours plus the MIME ones, each once; the
    Message-ID is ours, in the header block, on one unfolded line; Date and X-Safesend-Job are
    ours, verbatim; no decoded header value holds NUL, CR or LF; the header block is 7-bit, in
    lines of at most 998 characters. Raises MimeBuildError.
    """
    head = raw.partition(b"\r\n\r\n")[0]
    if not head.isascii():
        raise MimeBuildError("the header block is not 7-bit ASCII")
    if any(len(line) > _MAX_LINE for line in head.split(b"\r\n")):
        raise MimeBuildError(f"a header line is longer than {_MAX_LINE} characters")
    headers = _parse_headers(raw)
    for header in _address_headers(message):
        _check_mailboxes(headers, header)
    _check_subject(headers, message.subject)
    _check_header_names(headers, message)
    _check_message_id_line(head, message_id)
    _check_fixed_values(headers, message_id, job_id, date)
    _check_no_line_breaks(headers)


def _parse_headers(raw: bytes) -> _Headers:
    """The header block, in order: headers carrying caller text (addresses, Subject) decoded into
    header objects, the others as unfolded raw text, compared verbatim."""
    try:
        items = _RAW_PARSER.parsebytes(raw, headersonly=True).items()
    except _RENDER_ERRORS as exc:
        raise MimeBuildError(f"the produced MIME cannot be parsed back: {exc!r}") from exc
    return [_parse_header(name.lower(), value) for name, value in items]


def _parse_header(name: str, value: str) -> tuple[str, Any]:
    """One header; one that cannot be read back is refused, naming its field (the email package's
    parser raises on some of its own folding output)."""
    if name not in _FIELD_OF_HEADER:
        return name, _FOLD_RE.sub("", value)
    try:
        return name, _DECODING.header_fetch_parse(name, value)
    except _RENDER_ERRORS as exc:
        raise MimeBuildError(f"the {name} header cannot be parsed back: {exc!r}", _FIELD_OF_HEADER[name]) from exc


def _first(headers: _Headers, name: str) -> Any:
    return next((value for key, value in headers if key == name), None)


def _check_mailboxes(headers: _Headers, header: _AddressHeader) -> None:
    """Same mailboxes, in order, and no group: addr-specs exactly, display names up to whitespace
    (see `_squash`). Read back by the email package, independently of how we rendered them."""
    parsed = _first(headers, header.name.lower())
    if parsed is None:
        raise MimeBuildError(f"the {header.name} header is missing from the header block", header.field)
    if any(group.display_name is not None for group in parsed.groups):
        raise MimeBuildError(f"{header.name} parses as a group, not as mailboxes", header.field)
    wanted = [_squashed_mailbox(mailbox, header) for mailbox in header.mailboxes]
    found = [(_squash(a.display_name), a.addr_spec) for a in parsed.addresses]
    if found != wanted:
        raise MimeBuildError(f"{header.name} does not parse back to the intended mailboxes", header.field)


def _squashed_mailbox(mailbox: str, header: _AddressHeader) -> tuple[str, str]:
    display, addr = _split_mailbox(mailbox, header)
    return _squash(display), addr


def _squash(text: str) -> str:
    """Text without whitespace, for comparing decoded values with intended ones. The email package
    moves whitespace when folding a Subject (it drops a space at an encoded-word boundary) and
    collapses runs in names when parsing, so exact equality would refuse ordinary text. Nothing
    structural hides in whitespace: CR, LF and NUL are checked separately, headers by name."""
    return "".join(text.split())


def _check_subject(headers: _Headers, subject: str) -> None:
    parsed = _first(headers, "subject")
    if parsed is None or _squash(str(parsed)) != _squash(subject):
        raise MimeBuildError("the Subject does not decode to the intended subject", "subject")


def _expected_header_names(message: OutgoingMessage) -> list[str]:
    names = [header.name.lower() for header in _address_headers(message)]
    names += ["subject", "date", "message-id", "x-safesend-job", "mime-version", "content-type"]
    if message.html is None:
        names.append("content-transfer-encoding")  # a multipart container has none
    return sorted(names)


def _check_header_names(headers: _Headers, message: OutgoingMessage) -> None:
    found = sorted(name for name, _ in headers)
    expected = _expected_header_names(message)
    if found != expected:
        extra = sorted(set(found) - set(expected)) or "none"
        missing = sorted(set(expected) - set(found)) or "none"
        raise MimeBuildError(
            f"the header block is not the intended one: got {found}, unexpected "
            f"{extra}, missing {missing} (each header must appear once)"
        )


def _check_message_id_line(head: bytes, message_id: str) -> None:
    """One `Message-ID: <ours>` line with no continuation: Gmail search needs it verbatim."""
    lines = head.split(b"\r\n")
    found = [i for i, line in enumerate(lines) if line.split(b":", 1)[0].strip().lower() == b"message-id"]
    if len(found) != 1 or lines[found[0]] != b"Message-ID: " + message_id.encode("ascii"):
        raise MimeBuildError("the Message-ID header line is not ours, verbatim")
    following = lines[found[0] + 1] if found[0] + 1 < len(lines) else b""
    if following[:1] in (b" ", b"\t"):
        raise MimeBuildError("the Message-ID header is folded")


def _check_fixed_values(headers: _Headers, message_id: str, job_id: str, date: datetime) -> None:
    expected = {"message-id": message_id, "x-safesend-job": job_id, "date": format_datetime(date)}
    for name, value in expected.items():
        if _first(headers, name) != value:
            raise MimeBuildError(f"the {name} header is not {value!r}, verbatim")


def _check_no_line_breaks(headers: _Headers) -> None:
    for name, value in headers:
        if any(char in str(value) for char in _LINE_BREAKS):
            raise MimeBuildError(f"the decoded {name} header holds NUL, CR or LF", _FIELD_OF_HEADER.get(name))
