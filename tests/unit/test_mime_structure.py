"""mime.verify_mime: a structural check of the produced bytes (parsed, not substring-searched).
Each case below takes good MIME and damages it the way an emitter bug or an injection would."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from safesend.core import mime
from safesend.core.keys import job_id_for, message_id_for
from safesend.core.mime import OutgoingMessage, build_mime

DATE = datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)
KEY = "cust-1:order_paid:42"
JOB_ID = job_id_for(KEY)
MESSAGE_ID = message_id_for(KEY, "mail.example.com")
MESSAGE = OutgoingMessage(
    sender="Zoë <shop@example.com>",
    to=("Ann <ann@example.com>",),
    cc=("cc@example.com",),
    subject="Ihre Bestellung über 10 €",
    text="Thanks\n",
    html="<p>Thanks</p>",
)
MID_LINE = b"Message-ID: " + MESSAGE_ID.encode()


def good() -> bytes:
    return build_mime(MESSAGE, MESSAGE_ID, JOB_ID, DATE)


def split(raw: bytes) -> tuple[bytes, bytes]:
    head, body = raw.split(b"\r\n\r\n", 1)
    return head, body


def with_head(raw: bytes, head: bytes) -> bytes:
    return head + b"\r\n\r\n" + split(raw)[1]


def verify(raw: bytes, message: OutgoingMessage = MESSAGE, message_id: str = MESSAGE_ID) -> None:
    mime.verify_mime(raw, message, message_id, JOB_ID, DATE)


def test_good_mime_passes():
    verify(good())


def folded_message_id(raw: bytes) -> bytes:
    return raw.replace(MID_LINE, b"Message-ID:\r\n " + MESSAGE_ID.encode())


def message_id_in_body(raw: bytes) -> bytes:
    head, body = split(raw.replace(MID_LINE + b"\r\n", b""))
    return head + b"\r\n\r\n" + MID_LINE + b"\r\n" + body


def duplicate_message_id(raw: bytes) -> bytes:
    return raw.replace(MID_LINE, MID_LINE + b"\r\n" + MID_LINE)


def other_message_id(raw: bytes) -> bytes:
    return raw.replace(MID_LINE, b"Message-ID: <job-0@evil.example>")


def extra_bcc(raw: bytes) -> bytes:
    return with_head(raw, split(raw)[0] + b"\r\nBcc: evil@attacker.example")


def extra_custom_header(raw: bytes) -> bytes:
    return with_head(raw, split(raw)[0] + b"\r\nX-Mailer: evil")


def other_recipient(raw: bytes) -> bytes:
    return raw.replace(b"ann@example.com", b"eve@example.com")


def other_job(raw: bytes) -> bytes:
    return raw.replace(b"X-Safesend-Job: " + JOB_ID.encode(), b"X-Safesend-Job: " + b"0" * 32)


def other_date(raw: bytes) -> bytes:
    return raw.replace(b"07:08:09", b"07:08:10")


def header_block_ends_early(raw: bytes) -> bytes:
    return raw.replace(b"\r\nDate:", b"\r\n\r\nDate:", 1)


def eight_bit_header(raw: bytes) -> bytes:
    return raw.replace(b"Ann <ann@", "Ånn <ann@".encode())


def subject_dropped(raw: bytes) -> bytes:
    head, _ = split(raw)
    lines = head.split(b"\r\n")
    start = next(i for i, line in enumerate(lines) if line.startswith(b"Subject:"))
    end = start + 1
    while end < len(lines) and lines[end][:1] in (b" ", b"\t"):
        end += 1
    return with_head(raw, b"\r\n".join(lines[:start] + lines[end:]))


@pytest.mark.parametrize(
    "damage",
    [
        folded_message_id,
        message_id_in_body,
        duplicate_message_id,
        other_message_id,
        extra_bcc,
        extra_custom_header,
        other_recipient,
        other_job,
        other_date,
        header_block_ends_early,
        eight_bit_header,
        subject_dropped,
    ],
    ids=lambda f: f.__name__,
)
def test_damaged_mime_is_refused(damage):
    raw = damage(good())
    assert raw != good()
    with pytest.raises(mime.MimeBuildError):
        verify(raw)


def test_a_changed_recipient_is_blamed_on_its_field():
    with pytest.raises(mime.MimeBuildError) as info:
        verify(other_recipient(good()))
    assert info.value.field == "to"


def test_a_decoded_nul_is_refused_even_when_it_was_intended():
    # Bypassing validation: the subject really contains NUL, and the wire form decodes to it.
    message = OutgoingMessage(sender="shop@example.com", to=("ann@example.com",), subject="a\x00b", text="x")
    raw = (
        b"From: shop@example.com\r\nTo: ann@example.com\r\nSubject: =?utf-8?q?a=00b?=\r\n"
        b"Date: Mon, 06 May 2024 07:08:09 +0000\r\n" + MID_LINE + b"\r\n"
        b"X-Safesend-Job: " + JOB_ID.encode() + b'\r\nContent-Type: text/plain; charset="utf-8"\r\n'
        b"Content-Transfer-Encoding: 7bit\r\nMIME-Version: 1.0\r\n\r\nx\r\n"
    )
    with pytest.raises(mime.MimeBuildError) as info:
        verify(raw, message)
    assert info.value.field == "subject"


def test_build_mime_refuses_a_nul_subject_given_directly():
    message = OutgoingMessage(sender="shop@example.com", to=("ann@example.com",), subject="a\x00b", text="x")
    with pytest.raises(mime.MimeBuildError):
        build_mime(message, MESSAGE_ID, JOB_ID, DATE)


@pytest.mark.parametrize("job_id", ["job-1", "", JOB_ID + "\r\nBcc: evil@attacker.example", JOB_ID.upper()])
def test_build_mime_refuses_a_job_id_of_the_wrong_shape(job_id):
    with pytest.raises(mime.MimeBuildError):
        build_mime(MESSAGE, MESSAGE_ID, job_id, DATE)


def test_invalid_message_id_is_a_mime_build_error():
    with pytest.raises(mime.MimeBuildError):
        build_mime(MESSAGE, "<job-1@example.com>\r\nBcc: evil@example.net", JOB_ID, DATE)


def test_build_mime_refuses_a_header_line_over_998_characters():
    # RFC 5322 2.1.1: a line MUST NOT exceed 998 characters; an address cannot be folded inside.
    message = OutgoingMessage(sender="shop@example.com", to=("a" * 1000 + "@example.com",), subject="s", text="x")
    with pytest.raises(mime.MimeBuildError):
        build_mime(message, MESSAGE_ID, JOB_ID, DATE)
