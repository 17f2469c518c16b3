"""mime: the bytes sent to Gmail parse back to the message, carry our Message-ID verbatim, and are
byte-identical across attempts."""

from __future__ import annotations

import base64
import email
import hashlib
import re
from datetime import UTC, datetime
from email import policy as email_policy
from email.utils import parsedate_to_datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from safesend.core.keys import job_id_for, message_id_for
from safesend.core.mime import OutgoingMessage, build_mime, encode_raw
from tests.props import examples

PROPS = settings(max_examples=examples(200), deadline=None)
DATE = datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)
KEY = "cust-1:order_paid:42"
JOB_ID = job_id_for(KEY)
MESSAGE_ID = message_id_for(KEY, "mail.example.com")

# Bodies: anything UTF-8 can carry. Subjects: one line, no control characters (what validation lets
# through for a header), and no leading whitespace (RFC 5322 unfolding drops it; not our data).
bodies = st.text(st.characters(blacklist_categories=("Cs",)), max_size=300)
subjects = st.text(st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp")), min_size=1, max_size=150).filter(
    lambda s: s.strip() and s == s.lstrip()
)


def parse(raw: bytes) -> email.message.EmailMessage:
    return email.message_from_bytes(raw, policy=email_policy.default)


def normalised_body(text: str) -> str:
    """What a text body reads as after MIME: CRLF/CR line ends as LF, and a final line break."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text if text.endswith("\n") else text + "\n"


def decoded(part) -> str:
    return part.get_content().replace("\r\n", "\n").replace("\r", "\n")


def message(**overrides) -> OutgoingMessage:
    values = dict(
        sender="Shop <shop@example.com>",
        to=("ann@example.com",),
        subject="Your receipt",
        text="Thanks for your order.\n",
    )
    values.update(overrides)
    return OutgoingMessage(**values)


def boundary_candidates(job_id: str, n: int = 8) -> list[str]:
    """The documented boundary chain: '=_safesend_' + sha256(seed)[:24], re-hashed from the last one."""
    out, seed = [], job_id
    for _ in range(n):
        boundary = "=_safesend_" + hashlib.sha256(seed.encode()).hexdigest()[:24]
        out.append(boundary)
        seed = boundary
    return out


# --------------------------------------------------------------- headers


def test_message_id_header_appears_verbatim_on_its_own_line():
    raw = build_mime(message(), MESSAGE_ID, JOB_ID, DATE)
    assert f"\r\nMessage-ID: {MESSAGE_ID}\r\n".encode() in raw
    assert parse(raw)["Message-ID"] == MESSAGE_ID


def test_long_domain_message_id_is_not_folded():
    long_id = message_id_for(KEY, ".".join(["a" * 63] * 3) + "." + "b" * 61)
    raw = build_mime(message(), long_id, JOB_ID, DATE)
    assert f"\r\nMessage-ID: {long_id}\r\n".encode() in raw


def test_date_and_job_headers_are_the_given_values():
    parsed = parse(build_mime(message(), MESSAGE_ID, JOB_ID, DATE))
    assert parsedate_to_datetime(parsed["Date"]) == DATE
    assert parsed["X-Safesend-Job"] == JOB_ID


def test_addresses_round_trip_including_non_ascii_display_names():
    msg = message(
        sender="Zoë Müller <zoe@example.com>",
        to=("Ann <ann@example.com>", "bob@example.com", "日本語 <jp@example.jp>"),
        cc=('"Doe, John" <john@example.com>',),
        bcc=("hidden@example.com",),
        reply_to=("Support Ønskeliste <help@example.com>",),
    )
    parsed = parse(build_mime(msg, MESSAGE_ID, JOB_ID, DATE))

    def pairs(header):
        return [(a.display_name, a.addr_spec) for a in parsed[header].addresses]

    assert pairs("From") == [("Zoë Müller", "zoe@example.com")]
    assert pairs("To") == [("Ann", "ann@example.com"), ("", "bob@example.com"), ("日本語", "jp@example.jp")]
    assert pairs("Cc") == [("Doe, John", "john@example.com")]
    assert pairs("Bcc") == [("", "hidden@example.com")]
    assert pairs("Reply-To") == [("Support Ønskeliste", "help@example.com")]


def test_optional_address_headers_are_absent_when_empty():
    parsed = parse(build_mime(message(), MESSAGE_ID, JOB_ID, DATE))
    for header in ("Cc", "Bcc", "Reply-To"):
        assert parsed[header] is None


def test_headers_are_7bit_ascii_even_with_non_ascii_names_and_subject():
    raw = build_mime(
        message(sender="Zoë <z@example.com>", subject="Ihre Bestellung über 10 €"), MESSAGE_ID, JOB_ID, DATE
    )
    head = raw.split(b"\r\n\r\n", 1)[0]
    head.decode("ascii")  # raises if any header byte is not ASCII
    assert parse(raw)["Subject"] == "Ihre Bestellung über 10 €"


@PROPS
@given(subject=subjects)
def test_subject_round_trips(subject):
    assert parse(build_mime(message(subject=subject), MESSAGE_ID, JOB_ID, DATE))["Subject"] == subject


@pytest.mark.parametrize(
    "bad",
    [
        "job-1@example.com",
        "<job 1@example.com>",
        "<job-1@example.com>\r\nBcc: evil@example.net",
        "<jöb@example.com>",
        "",
    ],
)
def test_invalid_message_id_raises_value_error(bad):
    with pytest.raises(ValueError):
        build_mime(message(), bad, JOB_ID, DATE)


# --------------------------------------------------------------- bodies


def test_text_only_is_a_single_text_plain_utf8_part():
    parsed = parse(build_mime(message(text="Grüße\n"), MESSAGE_ID, JOB_ID, DATE))
    assert not parsed.is_multipart()
    assert parsed.get_content_type() == "text/plain"
    assert parsed.get_content_charset() == "utf-8"
    assert decoded(parsed) == "Grüße\n"


def test_with_html_it_is_multipart_alternative_with_text_then_html():
    msg = message(text="Plain ünïcode\n", html="<p>Rich ünïcode</p>\n")
    parsed = parse(build_mime(msg, MESSAGE_ID, JOB_ID, DATE))
    assert parsed.get_content_type() == "multipart/alternative"
    parts = list(parsed.iter_parts())
    assert [p.get_content_type() for p in parts] == ["text/plain", "text/html"]
    assert [p.get_content_charset() for p in parts] == ["utf-8", "utf-8"]
    assert [decoded(p) for p in parts] == ["Plain ünïcode\n", "<p>Rich ünïcode</p>\n"]


@PROPS
@given(text=bodies, subject=subjects)
def test_text_body_round_trips(text, subject):
    parsed = parse(build_mime(message(text=text, subject=subject), MESSAGE_ID, JOB_ID, DATE))
    assert parsed.get_content_type() == "text/plain"
    assert decoded(parsed) == normalised_body(text)


@PROPS
@given(text=bodies, html=bodies)
def test_text_and_html_bodies_round_trip(text, html):
    parsed = parse(build_mime(message(text=text, html=html), MESSAGE_ID, JOB_ID, DATE))
    parts = list(parsed.iter_parts())
    assert [p.get_content_type() for p in parts] == ["text/plain", "text/html"]
    assert [decoded(p) for p in parts] == [normalised_body(text), normalised_body(html)]


@PROPS
@given(text=bodies, html=st.none() | bodies, subject=subjects)
def test_every_line_ends_with_crlf(text, html, subject):
    raw = build_mime(message(text=text, html=html, subject=subject), MESSAGE_ID, JOB_ID, DATE)
    assert raw.endswith(b"\r\n")
    assert re.search(rb"(?<!\r)\n", raw) is None, "bare LF"
    assert re.search(rb"\r(?!\n)", raw) is None, "bare CR"


# --------------------------------------------------------------- determinism and boundary


@PROPS
@given(key=st.text(max_size=50), text=bodies, html=st.none() | bodies, subject=subjects)
def test_identical_inputs_give_byte_identical_mime(key, text, html, subject):
    job_id = job_id_for(key)
    message_id = message_id_for(key, "mail.example.com")
    first = build_mime(message(text=text, html=html, subject=subject), message_id, job_id, DATE)
    # A fresh, equal message object: nothing may depend on identity, time or randomness.
    second = build_mime(message(text="".join(list(text)), html=html, subject=subject), message_id, job_id, DATE)
    assert first == second


def test_boundary_is_the_first_documented_candidate_for_an_ordinary_body():
    parsed = parse(build_mime(message(html="<p>x</p>"), MESSAGE_ID, JOB_ID, DATE))
    assert parsed.get_boundary() == boundary_candidates(JOB_ID)[0]


@PROPS
@given(
    chunks=st.lists(
        st.one_of(
            bodies, st.sampled_from(boundary_candidates(JOB_ID)[:7]), st.just("=_safesend_"), st.just("--=_safesend_")
        ),
        max_size=8,
    ),
    in_html=st.lists(st.booleans(), min_size=8, max_size=8),
)
def test_boundary_never_occurs_inside_the_bodies(chunks, in_html):
    text = "".join(c for c, h in zip(chunks, in_html, strict=False) if not h)  # up to 8 chunks, 8 flags
    html = "".join(c for c, h in zip(chunks, in_html, strict=False) if h) or "<p>x</p>"
    parsed = parse(build_mime(message(text=text, html=html), MESSAGE_ID, JOB_ID, DATE))
    boundary = parsed.get_boundary()
    assert boundary not in text and boundary not in html
    # The documented choice: the first candidate of the chain that neither body contains.
    assert boundary == next(b for b in boundary_candidates(JOB_ID) if b not in text and b not in html)
    parts = list(parsed.iter_parts())
    assert [decoded(p) for p in parts] == [normalised_body(text), normalised_body(html)]


def test_boundary_skips_candidates_found_in_either_body():
    first, second, third = boundary_candidates(JOB_ID)[:3]
    msg = message(text=f"quoted:\n--{first}\n", html=f"<pre>{second}</pre>")
    parsed = parse(build_mime(msg, MESSAGE_ID, JOB_ID, DATE))
    assert parsed.get_boundary() == third
    assert [decoded(p) for p in parsed.iter_parts()] == [f"quoted:\n--{first}\n", f"<pre>{second}</pre>\n"]


def test_body_containing_every_candidate_boundary_is_refused():
    text = "\n".join(boundary_candidates(JOB_ID))
    with pytest.raises(ValueError):
        build_mime(message(text=text, html="<p>x</p>"), MESSAGE_ID, JOB_ID, DATE)


# --------------------------------------------------------------- encode_raw


@PROPS
@given(data=st.binary(max_size=500))
def test_encode_raw_is_urlsafe_base64_that_decodes_back(data):
    encoded = encode_raw(data)
    assert re.fullmatch(r"[A-Za-z0-9_=-]*", encoded)
    assert base64.urlsafe_b64decode(encoded) == data


def test_encode_raw_of_built_mime_decodes_to_the_same_bytes():
    raw = build_mime(message(html="<b>hi</b>"), MESSAGE_ID, JOB_ID, DATE)
    assert base64.urlsafe_b64decode(encode_raw(raw)) == raw
    assert "+" not in encode_raw(raw) and "/" not in encode_raw(raw)
