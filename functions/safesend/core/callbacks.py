"""Callbacks to the caller's workflow: which URLs may be called, and what each notice says.

An n8n workflow passes `callback_url` (its Wait node's `$execution.resumeUrl`) and learns the
outcome when the job settles. A callback URL is caller input that makes us send requests, so it
is held to a server-side policy (SSRF): https only, a host name of letters, digits, dots and
hyphens on SAFESEND_CALLBACK_ALLOWED_HOSTS, no credentials in the URL, and at delivery every
resolved address must be public and not an IPv6 form that carries an IPv4 address (checked on
the address actually connected to). Local stacks may allow plain http and loopback.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlsplit

MAX_URL_LENGTH = 2048
MAX_CALLBACKS = 10  # per job: each webhook execution may bring its own
MAX_NOTICES = 60  # per job, delivered ones included (audit); bounded like the events
# Delay before each delivery try: the first waits for the caller to reach its Wait node.
DELIVERY_DELAYS_S = (1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0, 120.0, 300.0)
# A callback host is a DNS name or an IPv4 literal: letters, digits, dots and hyphens (lowercased by
# urlsplit). No IPv6 literal, no underscore, percent or other character a resolver or proxy may
# read differently from the allowlist match.
_HOST_NAME = re.compile(r"[a-z0-9.-]{1,253}")
# IPv6 ranges that route to an IPv4 address carried inside them (IPv4-mapped and -translated,
# IPv4-compatible, NAT64 well-known and local-use, 6to4, Teredo). Refused outright, whatever they
# embed: `is_global` judges the IPv6 prefix, not the private or metadata address inside, and a
# callback host has no reason to publish such an address.
_EMBEDS_IPV4 = tuple(
    ipaddress.IPv6Network(net)
    for net in ("::ffff:0:0/96", "::ffff:0:0:0/96", "::/96", "64:ff9b::/96", "64:ff9b:1::/48", "2002::/16", "2001::/32")
)
# Public IPv6 unicast is allocated from 2000::/3 only. Python 3.11's `is_global` also passes the
# deprecated site-local fec0::/10 (still routed inside some networks) and unassigned ranges.
_GLOBAL_UNICAST_V6 = ipaddress.IPv6Network("2000::/3")
MAX_RETRY_AFTER_S = 600.0  # a receiver's Retry-After is honoured up to this (a longer one: this)
# Notices to people: never given up while they may matter (the callback horizon only marks them overdue).
REVIEWER_KINDS = frozenset({"chat", "slack", "email"})


class CallbackUrlError(ValueError):
    """A callback_url the policy refuses; the text says why (it reaches the caller as a 400)."""


@dataclass(frozen=True)
class CallbackPolicy:
    allowed_hosts: frozenset[str] = frozenset()  # exact names, or "*.suffix"
    allow_http: bool = False  # local stacks: plain http and loopback/private targets

    @property
    def enabled(self) -> bool:
        return bool(self.allowed_hosts)

    def check_url(self, url: str) -> str:
        """The URL if it may be called; raises CallbackUrlError saying what to change."""
        if not self.enabled:
            raise CallbackUrlError("callbacks are not enabled on this server (SAFESEND_CALLBACK_ALLOWED_HOSTS)")
        if len(url) > MAX_URL_LENGTH or any(ord(c) < 0x21 or ord(c) > 0x7E for c in url):
            raise CallbackUrlError(f"must be a printable ASCII URL of at most {MAX_URL_LENGTH} characters")
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError:
            raise CallbackUrlError("not a valid URL") from None
        if parts.scheme != "https" and not (self.allow_http and parts.scheme == "http"):
            raise CallbackUrlError("must be an https URL")
        if parts.username is not None or parts.password is not None:
            raise CallbackUrlError("must not carry credentials")
        host = (parts.hostname or "").lower()
        if host and not _HOST_NAME.fullmatch(host):
            raise CallbackUrlError("the host name may hold only letters, digits, dots and hyphens")
        if not host or not self.host_allowed(host):
            raise CallbackUrlError(f"host {host!r} is not on this server's callback allowlist")
        if port == 0:
            raise CallbackUrlError("port 0 is not a port")
        return url

    def host_allowed(self, host: str) -> bool:
        for entry in self.allowed_hosts:
            if entry == host or (entry.startswith("*.") and host.endswith(entry[1:]) and len(host) > len(entry) - 1):
                return True
        return False

    def address_allowed(self, address: str) -> bool:
        """A resolved address we may connect to: public unicast only (IPv6: within 2000::/3), unless
        local http is allowed. IPv6 forms that carry an IPv4 address (_EMBEDS_IPV4) are refused outright."""
        if self.allow_http:
            return True
        try:
            ip = ipaddress.ip_address(address.split("%", 1)[0])
        except ValueError:
            return False
        if isinstance(ip, ipaddress.IPv6Address) and (
            ip not in _GLOBAL_UNICAST_V6 or any(ip in net for net in _EMBEDS_IPV4)
        ):
            return False
        return ip.is_global and not ip.is_multicast


def notice_payload(job: Any, notice_id: str, now: datetime, review_id: str | None) -> dict[str, Any]:
    """What the caller's workflow receives: enough to branch on, nothing it must not see (no body);
    `review_id` is what a decision by API (POST /decide) names."""
    return {
        "notice_id": notice_id,
        "job_id": job.id,
        "dedup_key": job.dedup_key,
        "state": job.state.value,
        "message_id": job.message_id,
        "verified": job.verified,
        "review_reason": job.review_reason,
        "review_id": review_id,
        "last_error": job.last_error if job.state.value != "sent" else None,
        "attempts": job.attempts,
        "provider_ref": job.provider_ref,
        "at": now.isoformat(),
    }


def next_try_at(failed_tries: int, now: datetime, created_at: datetime, horizon_s: float) -> datetime | None:
    """After `failed_tries` failed tries: when to try again, or None once that passes the horizon."""
    at = now + timedelta(seconds=DELIVERY_DELAYS_S[min(failed_tries, len(DELIVERY_DELAYS_S) - 1)])
    return at if at <= created_at + timedelta(seconds=horizon_s) else None


def parse_retry_after(value: str | None, now_epoch: float) -> float | None:
    """Seconds a Retry-After header asks for (delta-seconds or an HTTP-date), None if absent or unreadable."""
    if not value:
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - now_epoch)


def notice_body(notice: Mapping[str, Any]) -> bytes:
    """The exact bytes of a notice: canonical JSON of its stored payload, the same on every try."""
    return json.dumps(notice["payload"], sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str).encode(
        "utf-8"
    )
