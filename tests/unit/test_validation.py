"""validation: every bad field is named at once; what is accepted is normalised, hashable and sendable."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from safesend.core.errors import RequestValidationError
from safesend.core.keys import job_id_for, message_id_for
from safesend.core.mime import OutgoingMessage, build_mime
from safesend.core.validation import (
    dedup_key_from_query,
    message_from_payload,
    parse_send_request,
    payload_hash,
)
from tests.props import examples

PROPS = settings(max_examples=examples(200), deadline=None)
DEFAULT_FROM = "Shop <shop@example.com>"
_DROP = object()  # body(field=_DROP) leaves the field out


def body(**overrides):
    values = {
        "dedup_key": "cust-1:order_paid:42",
        "channel": "receipts",
        "to": "ann@example.com",
        "subject": "Your receipt",
        "text": "Thanks for your order.",
    }
    values.update(overrides)
    return {k: v for k, v in values.items() if v is not _DROP}


def bad_fields(request_body, default_from=DEFAULT_FROM, known_channels=None) -> dict[str, str]:
    with pytest.raises(RequestValidationError) as info:
        parse_send_request(request_body, default_from, known_channels)
    return info.value.fields


# --------------------------------------------------------------- accepted requests


def test_minimal_request_is_accepted_and_normalised():
    parsed = parse_send_request(body(), DEFAULT_FROM)
    assert parsed.dedup_key == "cust-1:order_paid:42"
    assert parsed.channel == "receipts"
    assert parsed.message == OutgoingMessage(
        sender="Shop <shop@example.com>", to=("ann@example.com",), subject="Your receipt", text="Thanks for your order."
    )
    assert parsed.payload == {
        "from": "Shop <shop@example.com>",
        "to": ["ann@example.com"],
        "cc": [],
        "bcc": [],
        "reply_to": [],
        "subject": "Your receipt",
        "text": "Thanks for your order.",
        "html": None,
    }


def test_to_as_string_and_as_list_are_equivalent():
    as_string = parse_send_request(body(to="ann@example.com"), DEFAULT_FROM)
    as_list = parse_send_request(body(to=["ann@example.com"]), DEFAULT_FROM)
    assert as_string.message.to == as_list.message.to == ("ann@example.com",)
    assert as_string.payload_hash == as_list.payload_hash


def test_all_address_fields_accept_lists_and_display_names():
    parsed = parse_send_request(
        body(
            to=["Ann <ann@example.com>", "bob@example.com"],
            cc="Zoë <zoe@example.com>",
            bcc=["audit@example.com"],
            reply_to="help@example.com",
            **{"from": "Orders <orders@example.com>"},
        ),
        None,
    )
    assert parsed.message.to == ("Ann <ann@example.com>", "bob@example.com")
    assert parsed.message.cc == ("Zoë <zoe@example.com>",)
    assert parsed.message.bcc == ("audit@example.com",)
    assert parsed.message.reply_to == ("help@example.com",)
    assert parsed.message.sender == "Orders <orders@example.com>"


def test_explicit_from_wins_over_default_sender():
    assert parse_send_request(body(**{"from": "x@example.com"}), DEFAULT_FROM).message.sender == "x@example.com"


def test_key_parts_compose_the_dedup_key():
    parsed = parse_send_request(body(dedup_key=_DROP, customer_id="c1", event_type="paid", order_id="42"), DEFAULT_FROM)
    assert parsed.dedup_key == "c1:paid:42"


def test_integer_order_id_is_accepted_as_its_decimal_string():
    parsed = parse_send_request(body(dedup_key=_DROP, customer_id="c1", event_type="paid", order_id=42), DEFAULT_FROM)
    assert parsed.dedup_key == "c1:paid:42"


def test_boolean_order_id_is_not_taken_for_an_integer():
    fields = bad_fields(body(dedup_key=_DROP, customer_id="c1", event_type="paid", order_id=True))
    assert set(fields) == {"order_id"}


def test_text_may_be_empty_and_multiline_with_tabs():
    assert parse_send_request(body(text=""), DEFAULT_FROM).message.text == ""
    assert parse_send_request(body(text="a\tb\r\nc\n"), DEFAULT_FROM).message.text == "a\tb\r\nc\n"


def test_html_is_kept():
    assert parse_send_request(body(html="<p>hi</p>"), DEFAULT_FROM).message.html == "<p>hi</p>"


def test_exactly_100_recipients_is_accepted():
    addresses = [f"user{i}@example.com" for i in range(100)]
    parsed = parse_send_request(body(to=addresses[:50], cc=addresses[50:80], bcc=addresses[80:]), DEFAULT_FROM)
    assert len(parsed.message.to) + len(parsed.message.cc) + len(parsed.message.bcc) == 100


def test_body_of_exactly_the_limit_is_accepted():
    parsed = parse_send_request(body(text="a" * 200_000, html="b" * 200_000), DEFAULT_FROM)
    assert len(parsed.message.text) + len(parsed.message.html) == 400_000


# --------------------------------------------------------------- refused requests, by field


@pytest.mark.parametrize("missing", ["to", "subject", "text", "channel"])
def test_missing_required_field_is_named(missing):
    assert missing in bad_fields(body(**{missing: _DROP}))


def test_missing_dedup_key_names_each_key_part():
    assert set(bad_fields(body(dedup_key=_DROP))) == {"customer_id", "event_type", "order_id"}


def test_every_bad_field_is_reported_at_once():
    fields = bad_fields(
        {
            "channel": "",
            "to": "nope",
            "subject": "a\nb",
            "text": 5,
            "color": "red",
            "customer_id": "c",
            "event_type": "e:x",
            "order_id": "1",
        },
        default_from=None,
    )
    assert set(fields) == {"channel", "to", "subject", "text", "color", "event_type", "from"}


@pytest.mark.parametrize("field", ["to", "cc", "bcc", "reply_to", "from"])
@pytest.mark.parametrize(
    "address",
    [
        "not-an-address",
        "ann@",
        "@example.com",
        "ann@example",  # no TLD
        "ann@@example.com",
        "a@example.com, b@example.com",  # two mailboxes in one item
        "Ann <ann@example.com>\r\nBcc: evil@example.net",
        "ann@example.com\x00",
    ],
)
def test_bad_address_is_named_by_its_field(field, address):
    assert field in bad_fields(body(**{field: [address]}))


@pytest.mark.parametrize("address", ["ann@exa mple.com", "ann@example.com garbage"])
def test_address_with_stray_words_is_refused_not_silently_rewritten(address):
    # Python 3.11's lenient getaddresses() glues the words together; the result then passes the
    # addr-spec check, so the message would go to an address the caller never wrote.
    try:
        parsed = parse_send_request(body(to=address), DEFAULT_FROM)
    except RequestValidationError as exc:
        assert "to" in exc.fields
    else:
        pytest.fail(f"{address!r} was accepted and rewritten to {parsed.message.to!r}")


@pytest.mark.parametrize("value", [5, {"a": "b"}, ["ok@example.com", 7], [["x@example.com"]]])
def test_address_field_of_wrong_type_is_named(value):
    assert "to" in bad_fields(body(to=value))


def test_more_than_100_recipients_in_total_is_refused():
    addresses = [f"user{i}@example.com" for i in range(101)]
    assert "to" in bad_fields(body(to=addresses[:60], cc=addresses[60:90], bcc=addresses[90:]))
    assert "to" in bad_fields(body(to=addresses))


def test_more_than_one_sender_is_refused():
    assert "from" in bad_fields(body(**{"from": ["a@example.com", "b@example.com"]}))


def test_missing_from_without_a_default_sender_is_named():
    assert set(bad_fields(body(), default_from=None)) == {"from"}


@pytest.mark.parametrize(
    "subject", ["line\nbreak", "line\rbreak", "line\r\nbreak", "tab\there", "bell\x07", "nul\x00", "del\x7f"]
)
def test_subject_with_line_breaks_or_control_characters_is_named(subject):
    assert set(bad_fields(body(subject=subject))) == {"subject"}


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\x85"])
def test_subject_with_unicode_line_separator_is_refused(separator):
    # These are line breaks to Python's email package: build_mime refuses them in a header
    # ("Header values may not contain linefeed or carriage return characters"). Accepting them
    # here means the job is claimed first and every send attempt then crashes in build_mime.
    assert "subject" in bad_fields(body(subject=f"Order{separator}shipped"))


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\x85"])
def test_display_name_with_unicode_line_separator_is_refused(separator):
    assert "to" in bad_fields(body(to=f"Ann{separator}Smith <ann@example.com>"))


@pytest.mark.parametrize("field", ["subject", "text", "html"])
def test_lone_surrogate_in_a_text_field_is_a_validation_error(field):
    # JSON allows "\ud800"; Flask's get_json yields a lone surrogate that cannot be UTF-8 encoded.
    # The contract is a RequestValidationError (HTTP 400), not an exception from hashing.
    value = json.loads('"x\\ud800y"')
    try:
        parse_send_request(body(**{field: value}), DEFAULT_FROM)
    except RequestValidationError as exc:
        assert field in exc.fields
    except UnicodeEncodeError as exc:
        pytest.fail(f"parse_send_request raised {exc!r} instead of RequestValidationError naming {field}")
    else:
        pytest.fail(f"a lone surrogate in {field} was accepted")


def test_lone_surrogate_in_the_dedup_key_is_a_validation_error():
    # Accepted today; the service then fails in job_id_for (sha256 of key.encode('utf-8')).
    key = json.loads('"order-\\udc80"')
    try:
        parsed = parse_send_request(body(dedup_key=key), DEFAULT_FROM)
    except RequestValidationError as exc:
        assert "dedup_key" in exc.fields
    else:
        try:
            job_id_for(parsed.dedup_key)  # what the service does next with an accepted key
        except UnicodeEncodeError as exc:
            pytest.fail(f"dedup_key {key!r} was accepted but job_id_for raises {exc!r}")


def test_text_with_nul_is_named():
    assert set(bad_fields(body(text="a\x00b"))) == {"text"}


@pytest.mark.parametrize("field", ["channel", "dedup_key"])
def test_control_characters_in_single_value_fields_are_named(field):
    assert field in bad_fields(body(**{field: "a\x01b"}))


def test_text_over_the_size_limit_is_named():
    assert set(bad_fields(body(text="a" * 400_001))) == {"text"}


def test_text_and_html_together_over_the_size_limit_is_named():
    assert set(bad_fields(body(text="a" * 200_000, html="b" * 200_001))) == {"text"}


def test_size_limit_counts_utf8_bytes_not_characters():
    assert set(bad_fields(body(text="é" * 200_001))) == {"text"}  # 400_002 bytes


def test_unknown_field_is_named():
    assert set(bad_fields(body(priority="high", attachments=[]))) == {"priority", "attachments"}


def test_dedup_key_and_key_parts_together_is_refused():
    assert "dedup_key" in bad_fields(body(customer_id="c1", event_type="paid", order_id="42"))
    assert "dedup_key" in bad_fields(body(order_id="42"))


@pytest.mark.parametrize("part", ["customer_id", "event_type", "order_id"])
def test_key_part_with_colon_is_named(part):
    parts = {"customer_id": "c1", "event_type": "paid", "order_id": "42", part: "a:b"}
    assert set(bad_fields(body(dedup_key=_DROP, **parts))) == {part}


def test_dedup_key_too_long_is_named():
    assert "dedup_key" in bad_fields(body(dedup_key="k" * 256))
    assert parse_send_request(body(dedup_key="k" * 255), DEFAULT_FROM).dedup_key == "k" * 255


def test_composed_key_too_long_is_named_as_dedup_key():
    fields = bad_fields(body(dedup_key=_DROP, customer_id="c" * 300, event_type="e", order_id="o" * 300))
    assert set(fields) == {"dedup_key"}


@pytest.mark.parametrize("value", ["", "   ", None])
def test_blank_dedup_key_is_named(value):
    assert "dedup_key" in bad_fields(body(dedup_key=value))


@pytest.mark.parametrize("not_a_mapping", [None, [], "text", 42])
def test_body_that_is_not_an_object_is_named_body(not_a_mapping):
    assert set(bad_fields(not_a_mapping)) == {"body"}


def test_subject_longer_than_998_characters_is_named():
    assert "subject" in bad_fields(body(subject="s" * 999))
    assert parse_send_request(body(subject="s" * 998), DEFAULT_FROM).message.subject == "s" * 998


# --------------------------------------------------------------- known channels


def test_known_channels_refuses_unconfigured_channel():
    assert set(bad_fields(body(channel="marketing"), known_channels=frozenset({"receipts"}))) == {"channel"}


def test_known_channels_accepts_configured_channel():
    assert parse_send_request(body(), DEFAULT_FROM, frozenset({"receipts", "payments"})).channel == "receipts"


def test_without_known_channels_any_channel_passes_validation():
    assert parse_send_request(body(channel="anything"), DEFAULT_FROM).channel == "anything"


# --------------------------------------------------------------- payload hash


def test_equal_payloads_have_equal_hashes_regardless_of_dict_order():
    first = parse_send_request(body(cc="c@example.com", html="<p>h</p>"), DEFAULT_FROM)
    reordered_body = dict(reversed(list(body(cc="c@example.com", html="<p>h</p>").items())))
    second = parse_send_request(reordered_body, DEFAULT_FROM)
    assert first.payload_hash == second.payload_hash
    reordered_payload = dict(reversed(list(first.payload.items())))
    assert payload_hash("receipts", reordered_payload) == first.payload_hash


def test_hash_does_not_depend_on_the_dedup_key():
    a = parse_send_request(body(dedup_key="k1"), DEFAULT_FROM)
    b = parse_send_request(body(dedup_key="k2"), DEFAULT_FROM)
    assert a.payload_hash == b.payload_hash


# No Cf (bidi overrides, zero-width characters) and no "=?" (RFC 2047 syntax): both are refused in
# header fields (test_validation_headers.py), and these properties are about accepted text.
field_text = st.text(
    st.characters(blacklist_categories=("Cs", "Cc", "Cf", "Zl", "Zp")), min_size=1, max_size=30
).filter(lambda s: s.strip() and "=?" not in s)
local_parts = st.from_regex(r"[a-z0-9]{1,12}", fullmatch=True)
addresses = local_parts.map(lambda local: f"{local}@example.com")
CHANGES = {
    "channel": field_text,
    "to": addresses,
    "cc": addresses,
    "bcc": addresses,
    "reply_to": addresses,
    "from": addresses,
    "subject": field_text,
    "text": st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=30),
    "html": field_text,
}


@PROPS
@given(data=st.data(), field=st.sampled_from(sorted(CHANGES)))
def test_hash_changes_when_any_field_changes(data, field):
    base = body(
        cc="c@example.com", bcc="b@example.com", reply_to="r@example.com", html="<p>h</p>", **{"from": "f@example.com"}
    )
    new_value = data.draw(CHANGES[field].filter(lambda v: v != base.get(field)))
    changed = {**base, field: new_value}
    a = parse_send_request(base, None)
    b = parse_send_request(changed, None)
    assert a.payload_hash != b.payload_hash


@PROPS
@given(
    subject=field_text,
    text=CHANGES["text"],
    html=st.none() | field_text,
    to=st.lists(addresses, min_size=1, max_size=3),
)
def test_hash_is_stable_for_the_same_request(subject, text, html, to):
    request = body(subject=subject, text=text, to=to, **({"html": html} if html is not None else {}))
    first = parse_send_request(request, DEFAULT_FROM)
    second = parse_send_request(json.loads(json.dumps(request)), DEFAULT_FROM)
    assert first.payload_hash == second.payload_hash
    assert first.payload_hash == payload_hash(first.channel, json.loads(json.dumps(first.payload)))


def test_hash_changes_when_an_address_moves_between_cc_and_bcc():
    a = parse_send_request(body(cc="x@example.com"), DEFAULT_FROM)
    b = parse_send_request(body(bcc="x@example.com"), DEFAULT_FROM)
    assert a.payload_hash != b.payload_hash


def test_hash_distinguishes_missing_html_from_empty_text():
    a = parse_send_request(body(text=""), DEFAULT_FROM)
    b = parse_send_request(body(text="", html="<p></p>"), DEFAULT_FROM)
    assert a.payload_hash != b.payload_hash


# --------------------------------------------------------------- payload -> message, and sendable


@PROPS
@given(
    subject=field_text,
    text=CHANGES["text"],
    html=st.none() | field_text,
    to=st.lists(addresses, min_size=1, max_size=3),
    cc=st.lists(addresses, max_size=2),
)
def test_message_from_stored_payload_reproduces_the_message(subject, text, html, to, cc):
    request = body(subject=subject, text=text, to=to, cc=cc, **({"html": html} if html is not None else {}))
    parsed = parse_send_request(request, DEFAULT_FROM)
    assert message_from_payload(parsed.payload) == parsed.message
    stored = json.loads(json.dumps(parsed.payload))  # lists, as Firestore gives them back
    assert message_from_payload(stored) == parsed.message


def test_accepted_request_builds_mime():
    parsed = parse_send_request(
        body(to="Zoë <zoe@example.com>", subject="Bestellung über 10 €", html="<p>ok</p>"), DEFAULT_FROM
    )
    raw = build_mime(
        parsed.message,
        message_id_for(parsed.dedup_key, "mail.example.com"),
        job_id_for(parsed.dedup_key),
        datetime(2024, 1, 1, tzinfo=UTC),
    )
    assert b"Message-ID: <job-" in raw


# Everything except lone surrogates and the three Unicode line separators (covered by the failing
# tests above): whatever validation accepts from this space, build_mime must be able to send.
sendable_text = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x85\u2028\u2029"), max_size=40
)


@PROPS
@given(subject=sendable_text, name=sendable_text, text=sendable_text, html=st.none() | sendable_text)
def test_every_accepted_request_builds_valid_mime(subject, name, text, html):
    request = body(
        subject=subject, text=text, to=f"{name} <ann@example.com>", **({"html": html} if html is not None else {})
    )
    try:
        parsed = parse_send_request(request, DEFAULT_FROM)
    except RequestValidationError:
        return
    raw = build_mime(
        parsed.message,
        message_id_for(parsed.dedup_key, "mail.example.com"),
        job_id_for(parsed.dedup_key),
        datetime(2024, 1, 1, tzinfo=UTC),
    )
    assert f"\r\nMessage-ID: {message_id_for(parsed.dedup_key, 'mail.example.com')}\r\n".encode() in raw


# --------------------------------------------------------------- status lookups


def test_query_dedup_key_is_used_as_is():
    assert dedup_key_from_query({"dedup_key": "any:thing"}) == "any:thing"


def test_query_dedup_key_wins_over_parts():
    assert dedup_key_from_query({"dedup_key": "k", "customer_id": "c", "event_type": "e", "order_id": "1"}) == "k"


def test_query_key_parts_compose_the_key():
    assert dedup_key_from_query({"customer_id": "c1", "event_type": "paid", "order_id": "42"}) == "c1:paid:42"


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"dedup_key": ""},
        {"customer_id": "c1", "event_type": "paid"},
        {"customer_id": "c1", "event_type": "paid", "order_id": ""},
        {"customer_id": "c:1", "event_type": "paid", "order_id": "42"},
    ],
)
def test_query_without_a_usable_key_gives_none(params):
    assert dedup_key_from_query(params) is None


def test_query_key_matches_the_key_a_send_with_parts_would_use():
    parts = {"customer_id": "c1", "event_type": "paid", "order_id": "42"}
    parsed = parse_send_request(body(dedup_key=_DROP, **parts), DEFAULT_FROM)
    assert dedup_key_from_query(parts) == parsed.dedup_key
