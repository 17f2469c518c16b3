"""Issue 18.12: the callback address filter. IPv6 forms that carry an IPv4 address (NAT64, 6to4,
Teredo, IPv4-compatible, IPv4-mapped) are refused whatever they embed, and a callback host name
holds only letters, digits, dots and hyphens."""

from __future__ import annotations

import ipaddress
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from safesend.core.callbacks import CallbackPolicy, CallbackUrlError
from tests.props import examples
from tests.unit.conftest import CALLBACKS

PRIVATE_V4 = ["127.0.0.1", "10.1.2.3", "169.254.169.254", "192.168.0.1", "172.16.0.1", "100.64.0.1", "0.0.0.0"]


def nat64(v4: str) -> str:
    return str(ipaddress.IPv6Address((0x64FF9B << 96) | int(ipaddress.IPv4Address(v4))))


def nat64_local(v4: str) -> str:
    return str(ipaddress.IPv6Address((0x0064FF9B0001 << 80) | int(ipaddress.IPv4Address(v4))))


def six_to_four(v4: str) -> str:
    return str(ipaddress.IPv6Address((0x2002 << 112) | (int(ipaddress.IPv4Address(v4)) << 80) | 1))


def teredo(v4: str) -> str:
    server = int(ipaddress.IPv4Address("65.54.227.120"))
    client = int(ipaddress.IPv4Address(v4)) ^ 0xFFFFFFFF
    return str(ipaddress.IPv6Address((0x20010000 << 96) | (server << 64) | (0x8000 << 48) | (0x63BF << 32) | client))


def compatible(v4: str) -> str:
    return str(ipaddress.IPv6Address(int(ipaddress.IPv4Address(v4))))


def mapped(v4: str) -> str:
    return f"::ffff:{v4}"


FORMS = {"nat64": nat64, "nat64 local": nat64_local, "6to4": six_to_four, "teredo": teredo}
FORMS |= {"ipv4-compatible": compatible, "ipv4-mapped": mapped}


@pytest.mark.parametrize("form", sorted(FORMS))
@pytest.mark.parametrize("v4", PRIVATE_V4)
def test_an_ipv6_form_carrying_a_private_or_metadata_ipv4_is_refused(form, v4):
    assert CALLBACKS.address_allowed(FORMS[form](v4)) is False


@settings(max_examples=examples(300), deadline=None)
@given(form=st.sampled_from(sorted(FORMS)), v4=st.integers(min_value=0, max_value=2**32 - 1))
def test_every_address_of_the_embedding_ranges_is_refused_whatever_it_carries(form, v4):
    """Refused outright, so even a public IPv4 inside is never reached through a translator."""
    assert CALLBACKS.address_allowed(FORMS[form](str(ipaddress.IPv4Address(v4)))) is False


@settings(max_examples=examples(300), deadline=None)
@given(st.integers(min_value=0, max_value=2**128 - 1))
def test_no_allowed_ipv6_address_embeds_a_non_global_ipv4_in_a_known_form(value):
    ip = ipaddress.IPv6Address(value)
    if not CALLBACKS.address_allowed(str(ip)):
        return
    embedded = [ip.ipv4_mapped, ip.sixtofour, ip.teredo[1] if ip.teredo else None]
    assert all(v4 is None or v4.is_global for v4 in embedded)
    assert not (ip in ipaddress.IPv6Network("64:ff9b::/96") or ip in ipaddress.IPv6Network("64:ff9b:1::/48"))


@pytest.mark.parametrize("address", ["fec0::1", "fec0::a9fe:a9fe", "feff::1", "5f00::1", "4000::1", "c000::1"])
def test_ipv6_outside_global_unicast_is_refused(address):
    """Public IPv6 unicast is 2000::/3. Python 3.11 calls site-local fec0::/10 (still routed inside
    some networks) and the unassigned ranges global: they must not pass as public."""
    assert CALLBACKS.address_allowed(address) is False


@settings(max_examples=examples(300), deadline=None)
@given(st.integers(min_value=0, max_value=2**128 - 1))
def test_every_allowed_ipv6_address_is_global_unicast(value):
    ip = ipaddress.IPv6Address(value)
    if CALLBACKS.address_allowed(str(ip)):
        assert ip in ipaddress.IPv6Network("2000::/3") and ip.is_global


def test_public_ipv6_and_ipv4_stay_allowed():
    assert CALLBACKS.address_allowed("2606:2800:220:1::") is True
    assert CALLBACKS.address_allowed("93.184.216.34") is True
    assert CallbackPolicy(frozenset({"x"}), allow_http=True).address_allowed(nat64("127.0.0.1")) is True  # local


@pytest.mark.parametrize(
    "host",
    ["a_b.app.n8n.cloud", "a$b.app.n8n.cloud", "a!b.app.n8n.cloud", "a*b.app.n8n.cloud", "a'b.app.n8n.cloud"],
)
def test_a_callback_host_outside_letters_digits_dots_and_hyphens_is_refused(host):
    with pytest.raises(CallbackUrlError, match="letters, digits, dots and hyphens"):
        CALLBACKS.check_url(f"https://{host}/webhook-waiting/1")


@settings(max_examples=examples(300), deadline=None)
@given(st.text(alphabet=string.ascii_letters + string.digits + "-._~!$&'()*+;=", min_size=1, max_size=30))
def test_only_letters_digits_dots_and_hyphens_can_pass_the_host_check(label):
    url = f"https://{label}.app.n8n.cloud/x"
    try:
        CALLBACKS.check_url(url)
    except CallbackUrlError:
        return
    assert set(label.lower()) <= set(string.ascii_lowercase + string.digits + ".-")


def test_a_normal_wildcard_host_is_still_allowed():
    assert CALLBACKS.check_url("https://tenant-1.app.n8n.cloud/x") == "https://tenant-1.app.n8n.cloud/x"
