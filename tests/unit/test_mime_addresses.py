"""mime: address headers are written by us (the 3.11 folder loses recipients on some lists), so
check they are well-formed: RFC 2047 encoded words of at most 75 characters, lines of at most 78
where a line can be broken, and the same bytes as the email package for plain ASCII names."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from email import policy as email_policy
from email.message import EmailMessage

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from safesend.core.errors import RequestValidationError
from safesend.core.keys import job_id_for, message_id_for
from safesend.core.mime import OutgoingMessage, build_mime
from safesend.core.validation import parse_send_request
from tests.props import examples

DATE = datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)
KEY = "cust-1:order_paid:42"
ADDRESS_HEADERS = (b"from:", b"to:", b"cc:", b"bcc:", b"reply-to:")
ENCODED_WORD = re.compile(rb"=\?[^?\s]*\?[bBqQ]\?[^?\s]*\?=")
names = st.text(st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp")), max_size=120)


def build(message: OutgoingMessage) -> bytes:
    return build_mime(message, message_id_for(KEY, "mail.example.com"), job_id_for(KEY), DATE)


def address_header_lines(raw: bytes) -> list[list[bytes]]:
    """Each address header as its physical lines (first line, then continuations)."""
    headers: list[list[bytes]] = []
    for line in raw.split(b"\r\n\r\n", 1)[0].split(b"\r\n"):
        if line[:1] in (b" ", b"\t"):
            if headers and headers[-1]:
                headers[-1].append(line)
        else:
            headers.append([line] if line.lower().startswith(ADDRESS_HEADERS) else [])
    return [h for h in headers if h]


@settings(max_examples=examples(300), deadline=None)
@given(display=st.lists(names, min_size=1, max_size=8))
def test_address_headers_use_short_encoded_words_and_fold_at_78(display):
    mailboxes = [f'"{name}" <user{i}@example.com>' for i, name in enumerate(display)]
    try:
        request = parse_send_request(
            {"dedup_key": KEY, "channel": "c", "to": mailboxes, "subject": "s", "text": "t"},
            "Zoë Shop <shop@example.com>",
        )
    except RequestValidationError:
        return
    for lines in address_header_lines(build(request.message)):
        for line in lines:
            assert all(len(word) <= 75 for word in ENCODED_WORD.findall(line))
            words = line.split()
            assert len(line) <= 78 or len(words) <= 2, line  # "To: <one long word>" may not break


@pytest.mark.parametrize(
    "sender, to",
    [
        ("Shop <shop@example.com>", ("ann@example.com",)),
        ("Example Shop Ltd <orders@example.com>", ("Ann Example <ann@example.com>", "bob@example.org")),
        ("shop@example.com", tuple(f"Recipient Number {i} <user{i}@example.com>" for i in range(8))),
    ],
)
def test_plain_ascii_names_render_as_the_email_package_did(sender, to):
    raw = build(OutgoingMessage(sender=sender, to=to, subject="s", text="t"))
    reference = EmailMessage(policy=email_policy.SMTP)
    reference["From"] = sender
    reference["To"] = ", ".join(to)
    assert raw.startswith(reference.as_bytes().split(b"\r\n\r\n")[0] + b"\r\n")
