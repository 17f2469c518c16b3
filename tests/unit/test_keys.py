"""keys: dedup key -> job id -> Message-ID is a pure, collision-free, RFC 5322-valid mapping."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from safesend.core.keys import (
    bare_message_id,
    compose_dedup_key,
    is_valid_hostname,
    is_valid_message_id,
    job_id_for,
    message_id_for,
)
from tests.props import examples

DOMAIN = "mail.example.com"
PROPS = settings(max_examples=examples(200), deadline=None)
# Any text a JSON body can carry as UTF-8 (no lone surrogates).
keys = st.text(st.characters(blacklist_categories=("Cs",)), max_size=200)


def expected_message_id(key: str, domain: str) -> str:
    """The documented form, computed here independently of the module."""
    return f"<job-{hashlib.sha256(key.encode('utf-8')).hexdigest()[:32]}@{domain.lower()}>"


# --------------------------------------------------------------- determinism and form


@PROPS
@given(key=keys)
def test_ids_are_a_function_of_the_key_only(key):
    assert job_id_for(key) == job_id_for(key)
    assert message_id_for(key, DOMAIN) == message_id_for(key, DOMAIN)


@PROPS
@given(key=keys)
def test_message_id_has_the_exact_documented_form_and_is_valid(key):
    message_id = message_id_for(key, DOMAIN)
    assert message_id == expected_message_id(key, DOMAIN)
    assert job_id_for(key) == hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]
    assert is_valid_message_id(message_id)


@PROPS
@given(a=keys, b=keys)
def test_different_keys_give_different_job_and_message_ids(a, b):
    if a == b:
        assert job_id_for(a) == job_id_for(b)
    else:
        assert job_id_for(a) != job_id_for(b)
        assert message_id_for(a, DOMAIN) != message_id_for(b, DOMAIN)


def test_known_key_maps_to_its_sha256_prefix():
    # sha256("cust-1:order_paid:42") computed by hashlib in the test, not by the module.
    digest = hashlib.sha256(b"cust-1:order_paid:42").hexdigest()
    assert message_id_for("cust-1:order_paid:42", DOMAIN) == f"<job-{digest[:32]}@mail.example.com>"
    assert len(job_id_for("cust-1:order_paid:42")) == 32


@pytest.mark.parametrize(
    "key",
    [
        "",
        " ",
        "  leading and trailing  ",
        "tab\tand\nnewline\r\n",
        "Zoë:購入:🧾",
        "\u2028\u2029\x85",
        "x" * 10_000,
        "é" * 5_000,
    ],
)
def test_unusual_keys_still_give_valid_message_ids(key):
    message_id = message_id_for(key, DOMAIN)
    assert is_valid_message_id(message_id)
    assert message_id == expected_message_id(key, DOMAIN)


def test_whitespace_is_significant_in_keys():
    assert job_id_for("a") != job_id_for(" a")
    assert job_id_for("a") != job_id_for("a ")


def test_domain_is_lowercased_in_the_message_id():
    assert message_id_for("k", "Mail.Example.COM") == message_id_for("k", "mail.example.com")
    assert message_id_for("k", "Mail.Example.COM").endswith("@mail.example.com>")


@pytest.mark.parametrize(
    "domain",
    [
        "a." + "b" * 63 + ".com",  # 63-character label: the maximum
        ".".join(["a" * 63] * 3) + "." + "b" * 61,  # 253 characters: the maximum
        "x-y.example",
        "123.example.org",
    ],
)
def test_edge_of_range_domains_are_accepted(domain):
    assert is_valid_message_id(message_id_for("k", domain))


@pytest.mark.parametrize(
    "domain",
    [
        "",
        "localhost",  # one label: not a routable host name
        "example.com.",  # trailing dot
        ".example.com",
        "exa..mple.com",
        "-bad.example.com",
        "bad-.example.com",
        "ex_ample.com",
        "exa mple.com",
        "exämple.com",
        "example.com\n",
        "user@example.com",
        "[127.0.0.1]",
        "a." + "b" * 64 + ".com",  # 64-character label
        ".".join(["a" * 63] * 4),  # 255 characters
    ],
)
def test_invalid_domains_raise_value_error(domain):
    with pytest.raises(ValueError):
        message_id_for("k", domain)


@pytest.mark.parametrize(
    "domain, valid",
    [
        ("a." + "b" * 63 + ".com", True),
        ("a." + "b" * 64 + ".com", False),
        ("c" * 64 + ".example.com", False),  # first label
        ("example." + "d" * 64, False),  # last label
        (".".join(["a" * 63] * 3) + "." + "b" * 61, True),  # 253 characters
        (".".join(["a" * 63] * 3) + "." + "b" * 62, False),  # 254 characters
    ],
)
def test_is_valid_hostname_refuses_labels_over_63_and_names_over_253(domain, valid):
    assert is_valid_hostname(domain) is valid


# --------------------------------------------------------------- is_valid_message_id


@pytest.mark.parametrize(
    "value",
    [
        "<a@b>",
        "<job-0123abcd@mail.example.com>",
        "<a.b.c@d.e>",
        "<a+b=c!#$%&'*/?^_`{|}~-@x.y>",
        "<a@[127.0.0.1]>",
    ],
)
def test_valid_message_ids_are_accepted(value):
    assert is_valid_message_id(value)


@pytest.mark.parametrize(
    "value",
    [
        "a@b",  # no brackets
        "<a@b",
        "a@b>",
        "<<a@b>>",
        "<a b@c>",  # space
        " <a@b>",
        "<a@b> ",
        "<a@b@c>",  # two @
        "<ab>",  # no @
        "<@b>",  # empty left
        "<a@>",  # empty right
        "<>",
        "<.a@b>",  # leading dot
        "<a.@b>",  # trailing dot
        "<a..b@c>",  # double dot
        "<a@.b>",
        "<a@b.>",
        "<a@b..c>",
        "<a@b>\r\n",
        "<a@b>\n",
        "<a\r\n@b>",
        "<a@b>\r\nBcc: evil@example.com",
        "<é@b>",  # non-ASCII
        "<a@bé>",
        "<a@[b c]>",
        "<a(comment)@b>",
        '<"quoted"@b>',
        "",
    ],
)
def test_invalid_message_ids_are_rejected(value):
    assert not is_valid_message_id(value)


# --------------------------------------------------------------- compose / bare


def test_compose_dedup_key_joins_the_parts_with_colons():
    assert compose_dedup_key("cust-1", "order_paid", "42") == "cust-1:order_paid:42"


@pytest.mark.parametrize(
    "parts",
    [
        ("cu:st", "evt", "1"),
        ("cust", "ev:t", "1"),
        ("cust", "evt", "1:2"),
        (":", "", ""),
    ],
)
def test_compose_dedup_key_rejects_colons_in_any_part(parts):
    with pytest.raises(ValueError):
        compose_dedup_key(*parts)


@PROPS
@given(parts=st.tuples(*[st.text(st.characters(blacklist_characters=":", blacklist_categories=("Cs",)))] * 3))
def test_composed_keys_split_back_into_their_parts(parts):
    assert tuple(compose_dedup_key(*parts).split(":")) == parts


def test_bare_message_id_strips_the_brackets():
    assert bare_message_id("<job-abc@mail.example.com>") == "job-abc@mail.example.com"
    assert bare_message_id("  <job-abc@mail.example.com>\n") == "job-abc@mail.example.com"
    assert bare_message_id("job-abc@mail.example.com") == "job-abc@mail.example.com"


@PROPS
@given(key=keys)
def test_bare_message_id_of_a_generated_id_is_the_id_without_brackets(key):
    message_id = message_id_for(key, DOMAIN)
    assert f"<{bare_message_id(message_id)}>" == message_id
    assert "<" not in bare_message_id(message_id) and ">" not in bare_message_id(message_id)
