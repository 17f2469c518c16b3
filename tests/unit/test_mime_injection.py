"""Property: whatever text a caller puts in header-bound fields, either the request is refused
or the MIME has exactly our headers, one Message-ID, and the fields parse back unchanged."""

from __future__ import annotations

import base64
import email
import email.utils
from datetime import UTC, datetime
from email import policy

import pytest
from hypothesis import assume, event, given, settings
from hypothesis import strategies as st

from safesend.core import mime
from safesend.core.errors import RequestValidationError
from safesend.core.keys import job_id_for, message_id_for
from safesend.core.mime import OutgoingMessage, build_mime
from safesend.core.validation import parse_send_request
from tests.props import examples

EXPECTED_HEADERS = {
    "from",
    "to",
    "cc",
    "bcc",
    "reply-to",
    "subject",
    "date",
    "message-id",
    "x-safesend-job",
    "mime-version",
    "content-type",
    "content-transfer-encoding",
}
# Text biased towards what breaks headers: line breaks of every kind, NUL, colons, angle brackets.
hostile = st.text(
    alphabet=st.sampled_from(list('aZ09 :<>@,;"\\\r\n\t\x00\x0b\x0c\x85\u2028\u2029éЖ😀')) | st.characters(),
    max_size=60,
)
# Mostly printable Unicode (which must get through, encoded), sometimes hostile (which must not).
printable = st.text(alphabet=st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp")), max_size=60)
field = st.one_of(printable, printable, hostile)


@settings(max_examples=examples(400), deadline=None)
@given(subject=field, display=field, text=field, key_suffix=st.from_regex(r"[!-~]{0,20}", fullmatch=True))
def test_hostile_fields_are_refused_or_contained(subject, display, text, key_suffix):
    body = {
        "dedup_key": f"k{key_suffix}",
        "channel": "c",
        "to": [f"{display} <ann@example.com>"],
        "subject": subject,
        "text": text,
    }
    try:
        request = parse_send_request(body, "Shop <shop@example.com>")
    except RequestValidationError:
        event("refused")
        return  # refused: nothing reaches MIME
    event("built")
    assume(subject.strip() == subject)  # the email parser drops a subject's outer whitespace
    message_id = message_id_for(request.dedup_key, "mail.example.com")
    raw = build_mime(request.message, message_id, job_id_for(request.dedup_key), datetime(2026, 11, 29, tzinfo=UTC))
    parsed = email.message_from_bytes(raw, policy=policy.default)
    names = [name.lower() for name in parsed]
    assert set(names) <= EXPECTED_HEADERS, f"unexpected header in {names}"
    assert names.count("message-id") == 1 and parsed["Message-ID"] == message_id
    assert names.count("to") == 1 and len(parsed["To"].addresses) == 1
    assert parsed["To"].addresses[0].addr_spec == "ann@example.com"
    assert parsed["Subject"] == subject
    for line in raw.split(b"\r\n"):
        assert b"\n" not in line and b"\r" not in line  # no bare line breaks anywhere


# --------------------------------------------------------------- RFC 2047 encoded words
# The email package decodes encoded words found in the text it is given and re-emits the decoded
# text; before CPython 3.12.5/3.11.10 the emitter wrote decoded CR/LF through as real line breaks.

DATE = datetime(2026, 11, 29, tzinfo=UTC)
KEY = "cust-1:order_paid:42"
MESSAGE_ID = message_id_for(KEY, "mail.example.com")
SUBJECT_INJECTIONS = [
    "=?utf-8?q?hi=0D=0ABcc:_evil@attacker.example?=",  # a Bcc header of the caller's choosing
    "=?utf-8?q?hi=0D=0A=0D=0Abody?=",  # ends the header block: our Message-ID lands in the body
    "=?utf-8?q?a=00b?=",  # NUL in a header
    "=?UTF-8?B?aGkNCkJjYzogZXZpbEBhdHRhY2tlci5leGFtcGxl?=",  # base64 of "hi\r\nBcc: evil@attacker.example"
    "Re: =?iso-8859-1?Q?x=0ABcc:_evil@attacker.example?= order",
    "=?utf-8?q?harmless?=",  # decodes to text the caller did not write: refused all the same
]
DISPLAY_INJECTIONS = [
    '"=?utf-8?q?x=0D=0ABcc:_e@evil.example?=" <ann@example.com>',
    "=?utf-8?q?x=0D=0ABcc:_e@evil.example?= <ann@example.com>",
    '"=?utf-8?b?eA0KQmNjOiBlQGV2aWwuZXhhbXBsZQ==?=" <ann@example.com>',
]
ADDRESS_FIELDS = {"to": "to", "cc": "cc", "bcc": "bcc", "reply_to": "reply_to", "sender": "from"}


def outgoing(**overrides) -> OutgoingMessage:
    values = dict(
        sender="Shop <shop@example.com>",
        to=("ann@example.com",),
        subject="Your receipt",
        text="Thanks for your order.\n",
    )
    values.update(overrides)
    return OutgoingMessage(**values)


def request_body(**overrides) -> dict:
    return {
        "dedup_key": KEY,
        "channel": "c",
        "to": "ann@example.com",
        "subject": "Your receipt",
        "text": "Thanks",
        **overrides,
    }


def refused_fields(body: dict) -> dict[str, str]:
    with pytest.raises(RequestValidationError) as info:
        parse_send_request(body, "Shop <shop@example.com>")
    return info.value.fields


@pytest.mark.parametrize("subject", SUBJECT_INJECTIONS)
def test_build_mime_refuses_an_encoded_word_subject(subject):
    with pytest.raises(mime.MimeBuildError) as info:
        build_mime(outgoing(subject=subject), MESSAGE_ID, job_id_for(KEY), DATE)
    assert isinstance(info.value, ValueError) and info.value.field == "subject"


@pytest.mark.parametrize("subject", SUBJECT_INJECTIONS)
def test_validation_refuses_an_encoded_word_subject(subject):
    assert set(refused_fields(request_body(subject=subject))) == {"subject"}


@pytest.mark.parametrize("attribute", sorted(ADDRESS_FIELDS))
@pytest.mark.parametrize("mailbox", DISPLAY_INJECTIONS)
def test_build_mime_refuses_an_encoded_word_display_name(attribute, mailbox):
    value = mailbox if attribute == "sender" else (mailbox,)
    with pytest.raises(mime.MimeBuildError) as info:
        build_mime(outgoing(**{attribute: value}), MESSAGE_ID, job_id_for(KEY), DATE)
    assert info.value.field == ADDRESS_FIELDS[attribute]


@pytest.mark.parametrize("field", sorted(ADDRESS_FIELDS.values()))
@pytest.mark.parametrize("mailbox", [*DISPLAY_INJECTIONS, "=?utf-8?q?x=0D=0A?=@example.com"])
def test_validation_refuses_an_encoded_word_in_an_address(field, mailbox):
    assert set(refused_fields(request_body(**{field: mailbox}))) == {field}


def hostile_encoded_word(charset: str, encoding: str, payload: bytes) -> str:
    if encoding.lower() == "b":
        text = base64.b64encode(payload).decode("ascii")
    else:
        text = "".join(chr(b) if chr(b).isascii() and chr(b).isalnum() else f"={b:02X}" for b in payload)
    return f"=?{charset}?{encoding}?{text}?="


hostile_payloads = st.builds(
    lambda before, brk, header, after: before + brk + header + after,
    st.binary(max_size=8).map(lambda b: bytes(c for c in b if c > 0x20 and c != 0x3F)),
    st.sampled_from([b"\r\n", b"\n", b"\r", b"\r\n\r\n", b"\x00"]),
    st.sampled_from([b"Bcc: evil@attacker.example", b"To: x@evil.example", b"Message-ID: <x@evil>", b""]),
    st.binary(max_size=8).map(lambda b: bytes(c for c in b if c > 0x20 and c != 0x3F)),
)


@settings(max_examples=examples(300), deadline=None)
@given(
    charset=st.sampled_from(["utf-8", "UTF-8", "us-ascii", "iso-8859-1"]),
    encoding=st.sampled_from(["q", "Q", "b", "B"]),
    payload=hostile_payloads,
    prefix=st.sampled_from(["", "Re: ", "x "]),
    where=st.sampled_from(["subject", "to"]),
)
def test_hostile_encoded_words_never_reach_the_wire(charset, encoding, payload, prefix, where):
    word = prefix + hostile_encoded_word(charset, encoding, payload)
    if where == "subject":
        message, body = outgoing(subject=word), request_body(subject=word)
    else:
        mailbox = f'"{word}" <ann@example.com>'
        message, body = outgoing(to=(mailbox,)), request_body(to=mailbox)
    with pytest.raises(mime.MimeBuildError) as info:
        build_mime(message, MESSAGE_ID, job_id_for(KEY), DATE)
    assert info.value.field == where
    assert set(refused_fields(body)) == {where}


# --------------------------------------------------------------- address lists the folder mangles
# Python 3.11's folder drops the quotes of a long quoted display name (so "x: evil@attacker.example,"
# turns To into a group with an extra recipient), and sometimes encodes the comma between two
# mailboxes as =?utf-8?q?=2C?= (so the next recipient silently disappears).

GROUP_INJECTION = '"Customer service: evil@attacker.example, ' + "x" * 40 + '" <ann@example.com>'
LOST_COMMA = ["user0@example.com", "Jürgen García <user1@example.com>", "Çağla O'Brien <user2@example.com>"]
HEADER_OF = {"to": "To", "cc": "Cc", "bcc": "Bcc", "reply_to": "Reply-To", "from": "From"}


def mailboxes_on_the_wire(raw: bytes, header: str) -> list[tuple[str, str]]:
    parsed = email.message_from_bytes(raw, policy=policy.default)[header]
    assert all(group.display_name is None for group in parsed.groups), "a group on the wire"
    return [("".join(a.display_name.split()), a.addr_spec) for a in parsed.addresses]


def intended(request_mailboxes: list[str]) -> list[tuple[str, str]]:
    pairs = [email.utils.parseaddr(m) for m in request_mailboxes]
    return [("".join(name.split()), addr) for name, addr in pairs]


@pytest.mark.parametrize("field", sorted(HEADER_OF))
def test_a_long_name_with_group_syntax_stays_one_mailbox(field):
    request = parse_send_request(request_body(**{field: GROUP_INJECTION}), "Shop <shop@example.com>")
    raw = build_mime(request.message, MESSAGE_ID, job_id_for(KEY), DATE)
    name = "Customer service: evil@attacker.example, " + "x" * 40
    assert mailboxes_on_the_wire(raw, HEADER_OF[field]) == [("".join(name.split()), "ann@example.com")]


def test_no_recipient_of_a_list_with_non_ascii_names_is_lost():
    request = parse_send_request(request_body(to=LOST_COMMA), "Shop <shop@example.com>")
    raw = build_mime(request.message, MESSAGE_ID, job_id_for(KEY), DATE)
    assert mailboxes_on_the_wire(raw, "To") == intended(LOST_COMMA)


first_names = st.sampled_from(
    [
        "Zoë",
        "Anna",
        "Jürgen",
        "José",
        "Łukasz",
        "Søren",
        "François",
        "Ольга",
        "美咲",
        "Παύλος",
        "Çağla",
        "John",
        "Li",
        "O'Brien",
        "Doe, John",
        "x" * 70,
        "ab" * 45,
    ]
)
last_names = st.sampled_from(
    [
        "Müller",
        "García",
        "Nguyễn",
        "Öztürk",
        "Петрова",
        "佐藤",
        "Smith",
        "(Sales)",
        "service: evil@attacker.example,",
        "\\",
        ";",
        "Σταυρόπουλος",
        " ",
    ]
)
display_names = st.lists(st.one_of(first_names, last_names), min_size=0, max_size=6).map(" ".join)


@settings(max_examples=examples(300), deadline=None)
@given(names=st.lists(display_names, min_size=1, max_size=15), field=st.sampled_from(sorted(HEADER_OF)))
def test_every_accepted_mailbox_reaches_the_wire_exactly(names, field):
    """Validation may refuse; what it accepts builds, with every mailbox and nothing else."""
    mailboxes = [
        f'"{name}" <user{i}@example.com>' if name.strip() else f"user{i}@example.com" for i, name in enumerate(names)
    ]
    if field == "from":
        mailboxes = mailboxes[:1]
    try:
        request = parse_send_request(request_body(**{field: mailboxes}), "Shop <shop@example.com>")
    except RequestValidationError as exc:
        assert field in exc.fields
        return
    raw = build_mime(request.message, MESSAGE_ID, job_id_for(KEY), DATE)
    stored = [request.message.sender] if field == "from" else list(getattr(request.message, field))
    assert mailboxes_on_the_wire(raw, HEADER_OF[field]) == intended(stored)
