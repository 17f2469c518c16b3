"""mime.probe_mime: a start-up check that the configured domain and sender can carry a realistic
message, so a bad setting fails the deployment instead of every send."""

from __future__ import annotations

import email
from email import policy as email_policy

import pytest
from hypothesis import given, settings

from safesend.core import mime
from safesend.core.keys import is_valid_message_id
from tests.props import examples
from tests.unit.test_mime_message_id import assert_single_unfolded_message_id, hostnames


def parse(raw: bytes):
    return email.message_from_bytes(raw, policy=email_policy.default)


def message_id_of(raw: bytes) -> str:
    return parse(raw)["Message-ID"]


def test_probe_is_a_representative_message():
    raw = mime.probe_mime("mail.example.com", "Zoë Shop <shop@example.com>")
    parsed = parse(raw)
    assert parsed.get_content_type() == "multipart/alternative"
    assert [p.get_content_type() for p in parsed.iter_parts()] == ["text/plain", "text/html"]
    subject = str(parsed["Subject"])
    assert not subject.isascii() and len(subject) > 78  # encoded and folded
    assert [(a.display_name, a.addr_spec) for a in parsed["From"].addresses] == [("Zoë Shop", "shop@example.com")]
    assert not parsed["To"].addresses[0].display_name.isascii()
    message_id = message_id_of(raw)
    assert is_valid_message_id(message_id) and message_id.endswith("@mail.example.com>")
    assert_single_unfolded_message_id(raw, message_id)


def test_probe_is_deterministic_and_works_without_a_sender():
    assert mime.probe_mime("mail.example.com") == mime.probe_mime("mail.example.com")
    assert parse(mime.probe_mime("mail.example.com"))["From"].addresses[0].domain == "mail.example.com"


@settings(max_examples=examples(100), deadline=None)
@given(domain=hostnames())
def test_probe_passes_for_every_valid_domain(domain):
    raw = mime.probe_mime(domain, "shop@example.com")
    assert_single_unfolded_message_id(raw, message_id_of(raw))
    assert message_id_of(raw).endswith(f"@{domain.lower()}>")


def test_probe_passes_for_the_domain_that_used_to_fold():
    raw = mime.probe_mime("notifications.mail.example-shop.com", "Shop <shop@example-shop.com>")
    assert_single_unfolded_message_id(raw, message_id_of(raw))


@pytest.mark.parametrize(
    "sender",
    [
        '"=?utf-8?q?x=0D=0ABcc:_e@evil.example?=" <shop@example.com>',
        "=?utf-8?q?Shop?= <shop@example.com>",
        "Shop <shop@example.com>, other@example.com",  # two mailboxes
        "Shop <shop@example.com> trailing words",
        "not an address",
        "",
    ],
)
def test_probe_refuses_a_sender_that_does_not_survive(sender):
    with pytest.raises(mime.MimeBuildError) as info:
        mime.probe_mime("mail.example.com", sender)
    assert info.value.field == "from"


@pytest.mark.parametrize("domain", ["localhost", "exa mple.com", "a." + "b" * 64 + ".com", "example.com\r\n"])
def test_probe_refuses_a_bad_domain(domain):
    with pytest.raises(mime.MimeBuildError):
        mime.probe_mime(domain, "shop@example.com")
