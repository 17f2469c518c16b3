"""mime: our Message-ID reaches Gmail as one unfolded header line, whatever the (valid) domain.

The email package folds headers at 78 columns (SMTP policy); for some domain lengths that folded
`Message-ID:` onto a continuation line, which search by rfc822msgid does not see verbatim.
"""

from __future__ import annotations

import email
import functools
import string
from datetime import UTC, datetime
from email import policy as email_policy

from hypothesis import example, given, settings
from hypothesis import strategies as st

from safesend.core.keys import is_valid_hostname, job_id_for, message_id_for
from safesend.core.mime import OutgoingMessage, build_mime
from tests.props import examples

PROPS = settings(max_examples=examples(300), deadline=None)
DATE = datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)
KEY = "cust-1:order_paid:42"
MAX_LABEL = 63
ALNUM = string.ascii_letters + string.digits
LDH = ALNUM + "-"

subjects = st.text(st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp")), min_size=1, max_size=120).filter(
    lambda s: s.strip() and "=?" not in s
)


# The strategies a host name is drawn from, built once per argument and reused (hypothesis
# strategies are immutable, so each draw is the same as from a fresh one): building and validating
# a fresh `integers`/`text`/`host_label` for every label of every example was most of these
# properties' time (300 examples of each of the two hostnames() draws, without coverage: 12.7 ->
# 4.1 CPU-s, the same names drawn for the same seeds; the three hostnames() properties under
# coverage 20.9 -> 11.9; 2026-12-02, 2-core machine).
FIRST_LAST = st.sampled_from(ALNUM)


@functools.cache
def label_middle(size: int) -> st.SearchStrategy[str]:
    return st.text(st.sampled_from(LDH), min_size=size, max_size=size)


@functools.cache
def bounded(low: int, high: int) -> st.SearchStrategy[int]:
    return st.integers(low, high)


@functools.cache
def host_label(size: int) -> st.SearchStrategy[str]:
    """A DNS label of exactly `size` characters: letters, digits, inner hyphens."""
    return _host_label(size)


@st.composite
def _host_label(draw, size: int) -> str:
    first = draw(FIRST_LAST)
    if size == 1:
        return first
    return first + draw(label_middle(size - 2)) + draw(FIRST_LAST)


@st.composite
def hostnames(draw, min_size: int = 4, max_size: int = 253) -> str:
    """A valid host name of a drawn total length: 2+ labels of 1..63 characters."""
    total = draw(bounded(min_size, max_size))
    count = draw(bounded(max(2, -(-(total + 1) // (MAX_LABEL + 1))), (total + 1) // 2))
    remaining, sizes = total - (count - 1), []
    for i in range(count - 1):
        left = count - i - 1
        size = draw(bounded(max(1, remaining - MAX_LABEL * left), min(MAX_LABEL, remaining - left)))
        sizes.append(size)
        remaining -= size
    sizes.append(remaining)
    return ".".join(draw(host_label(size)) for size in sizes)


def message(**overrides) -> OutgoingMessage:
    values = dict(
        sender="Shop <shop@example.com>",
        to=("ann@example.com",),
        subject="Your receipt",
        text="Thanks for your order.\n",
    )
    values.update(overrides)
    return OutgoingMessage(**values)


def header_lines(raw: bytes) -> list[bytes]:
    return raw.split(b"\r\n\r\n", 1)[0].split(b"\r\n")


def assert_single_unfolded_message_id(raw: bytes, message_id: str) -> None:
    lines = header_lines(raw)
    found = [i for i, line in enumerate(lines) if line.split(b":", 1)[0].strip().lower() == b"message-id"]
    assert len(found) == 1, f"Message-ID header lines: {[lines[i] for i in found]}"
    index = found[0]
    assert lines[index] == b"Message-ID: " + message_id.encode("ascii")
    following = lines[index + 1] if index + 1 < len(lines) else b""
    assert not following.startswith((b" ", b"\t")), "Message-ID has a continuation line"
    parsed = email.message_from_bytes(raw, policy=email_policy.default)
    assert parsed.get_all("Message-ID") == [message_id]


@PROPS
@given(data=st.data(), total=st.integers(4, 253))
def test_hostname_strategy_draws_valid_names_of_the_asked_length(data, total):
    name = data.draw(hostnames(min_size=total, max_size=total))
    assert len(name) == total and is_valid_hostname(name)


@PROPS
@given(domain=hostnames(), subject=subjects, html=st.none() | st.just("<p>Thanks</p>"))
@example(domain="notifications.mail.example-shop.com", subject="Your receipt", html=None)
def test_message_id_is_one_unfolded_header_for_every_valid_domain(domain, subject, html):
    message_id = message_id_for(KEY, domain)
    raw = build_mime(message(subject=subject, html=html), message_id, job_id_for(KEY), DATE)
    assert_single_unfolded_message_id(raw, message_id)


def test_domains_of_28_to_38_characters_are_not_folded():
    for domain in (
        "notifications.mail.example-shop.com",
        "a" * 13 + "." + "b" * 14,
        "x-y." + "z" * 30,
        "mail." + "q" * 29 + ".io",
    ):
        message_id = message_id_for(KEY, domain)
        raw = build_mime(message(), message_id, job_id_for(KEY), DATE)
        assert_single_unfolded_message_id(raw, message_id)


def test_message_id_keeps_its_place_between_date_and_job_header():
    message_id = message_id_for(KEY, "notifications.mail.example-shop.com")
    names = [line.split(b":", 1)[0] for line in header_lines(build_mime(message(), message_id, job_id_for(KEY), DATE))]
    assert names[names.index(b"Date") + 1] == b"Message-ID"
    assert names[names.index(b"Message-ID") + 1] == b"X-Safesend-Job"
