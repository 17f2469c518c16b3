"""validation: header-bound text is refused, by field, when it could be decoded or displayed as
something other than what the caller wrote (RFC 2047 encoded words, bidi and zero-width
characters), and addresses respect the RFC 5321 length limits."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from safesend.core.errors import RequestValidationError
from safesend.core.validation import parse_send_request
from tests.props import examples

DEFAULT_FROM = "Shop <shop@example.com>"
ADDRESS_FIELDS = ["to", "cc", "bcc", "reply_to", "from"]
BIDI = [
    "\u202a",
    "\u202b",
    "\u202c",
    "\u202d",
    "\u202e",
    "\u2066",
    "\u2067",
    "\u2068",
    "\u2069",
    "\u200e",
    "\u200f",
    "\u061c",
]
ZERO_WIDTH = ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff"]
ENCODED_WORDS = [
    "=?utf-8?q?hi?=",
    "=?UTF-8?Q?hi?=",
    "=?utf-8?B?aGk=?=",
    "=?iso-8859-1*en?q?hi?=",  # RFC 2231 language tag
    "=?utf-8?q?hi",  # no closing ?=: the rest of the header (another address) can close it
    "=?",  # the only thing every encoded word starts with
    "=??q?x?=",  # empty charset: the email package still decodes it
    "=?x?q?a b?=",  # whitespace inside: decoded in phrases, with only a defect noted
    "Total=?utf-8?q?x?=",
]


def body(**overrides):
    values = {
        "dedup_key": "cust-1:order_paid:42",
        "channel": "receipts",
        "to": "ann@example.com",
        "subject": "Your receipt",
        "text": "Thanks for your order.",
    }
    values.update(overrides)
    return values


def bad_fields(request_body) -> dict[str, str]:
    with pytest.raises(RequestValidationError) as info:
        parse_send_request(request_body, DEFAULT_FROM)
    return info.value.fields


def accepted(request_body):
    return parse_send_request(request_body, DEFAULT_FROM)


# --------------------------------------------------------------- RFC 2047 encoded-word syntax


@pytest.mark.parametrize("word", ENCODED_WORDS)
def test_encoded_word_syntax_in_the_subject_is_refused(word):
    fields = bad_fields(body(subject=f"Order {word} shipped"))
    assert set(fields) == {"subject"} and "encoded-word" in fields["subject"]


@pytest.mark.parametrize("field", ADDRESS_FIELDS)
@pytest.mark.parametrize("word", ENCODED_WORDS)
def test_encoded_word_syntax_in_a_display_name_is_refused(field, word):
    fields = bad_fields(body(**{field: f'"Ann {word}" <ann@example.com>'}))
    assert set(fields) == {field} and "encoded-word" in fields[field]


@pytest.mark.parametrize("field", ADDRESS_FIELDS)
def test_encoded_word_syntax_in_a_local_part_is_refused(field):
    # '=' and '?' are atext, and the email package tries to decode a local part that starts with "=?".
    assert set(bad_fields(body(**{field: "=?utf-8?q?x?=@example.com"}))) == {field}


def test_an_encoded_word_split_across_two_recipients_is_refused():
    # Joined as "Ann =? <a@...>, utf-8?q?x=0D=0A?= <b@...>", the parser would decode across them.
    fields = bad_fields(body(to=["Ann =? <a@example.com>", "utf-8?q?x=0D=0A?= <b@example.com>"]))
    assert set(fields) == {"to"}


@pytest.mark.parametrize("subject", ["Was it 2+2 = ?", "Question? = yes", "a ?= b", "=", "?"])
def test_near_forms_that_cannot_start_an_encoded_word_are_accepted(subject):
    assert accepted(body(subject=subject)).message.subject == subject


@settings(max_examples=examples(200), deadline=None)
@given(before=st.text(max_size=20), after=st.text(max_size=20))
def test_any_subject_containing_equals_question_mark_is_refused(before, after):
    with pytest.raises(RequestValidationError) as info:
        parse_send_request(body(subject=f"x{before}=?{after}"), DEFAULT_FROM)
    assert "subject" in info.value.fields


# --------------------------------------------------------------- bidi and zero-width characters


@pytest.mark.parametrize("char", BIDI + ZERO_WIDTH)
def test_invisible_or_reordering_characters_in_the_subject_are_refused(char):
    fields = bad_fields(body(subject=f"Your{char} receipt"))
    assert set(fields) == {"subject"} and f"U+{ord(char):04X}" in fields["subject"]


@pytest.mark.parametrize("field", ADDRESS_FIELDS)
@pytest.mark.parametrize("char", BIDI + ZERO_WIDTH)
def test_invisible_or_reordering_characters_in_a_display_name_are_refused(field, char):
    assert set(bad_fields(body(**{field: f"Ann{char} Smith <ann@example.com>"}))) == {field}


@pytest.mark.parametrize("char", BIDI + ZERO_WIDTH)
def test_bodies_may_carry_bidi_and_zero_width_characters(char):
    parsed = accepted(body(text=f"שלום{char} world", html=f"<p>مرحبا{char}</p>"))
    assert char in parsed.message.text and char in parsed.message.html


def test_right_to_left_text_without_override_characters_is_accepted():
    parsed = accepted(body(subject="הזמנה שלך", to="محمد <m@example.com>"))
    assert parsed.message.subject == "הזמנה שלך"


# --------------------------------------------------------------- address lengths (RFC 5321 4.5.3.1)


def domain_of(length: int) -> str:
    """A valid domain of `length` characters: 63-character labels, then the rest, then '.com'."""
    labels, remaining = [], length - 4
    while remaining > 0:
        size = min(63, remaining - 1 if remaining > 63 else remaining)
        size = min(size, 63)
        labels.append("d" * size)
        remaining -= size + 1
    domain = ".".join(labels) + ".com"
    assert len(domain) == length, (length, len(domain))
    return domain


@pytest.mark.parametrize("field", ADDRESS_FIELDS)
def test_local_part_over_64_characters_is_refused(field):
    assert accepted(body(**{field: "l" * 64 + "@example.com"}))
    fields = bad_fields(body(**{field: "l" * 65 + "@example.com"}))
    assert set(fields) == {field} and "64" in fields[field]


@pytest.mark.parametrize("field", ADDRESS_FIELDS)
def test_domain_label_over_63_characters_is_refused(field):
    assert accepted(body(**{field: f"ann@{'a' * 63}.example.com"}))
    fields = bad_fields(body(**{field: f"ann@{'a' * 64}.example.com"}))
    assert set(fields) == {field} and "63" in fields[field]


def test_top_level_label_over_63_characters_is_refused():
    assert set(bad_fields(body(to=f"ann@example.{'c' * 64}"))) == {"to"}


@pytest.mark.parametrize("field", ADDRESS_FIELDS)
def test_address_over_254_characters_is_refused(field):
    longest = "l" * 64 + "@" + domain_of(189)
    assert len(longest) == 254 and accepted(body(**{field: f"Ann <{longest}>"}))
    too_long = "l" * 64 + "@" + domain_of(190)
    fields = bad_fields(body(**{field: f"Ann <{too_long}>"}))
    assert set(fields) == {field} and "254" in fields[field]
