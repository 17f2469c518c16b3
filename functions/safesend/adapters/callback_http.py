"""Notifier over HTTP: one signed POST per call, to an address the callback policy allows.

The URL was checked when the request brought it; here the host is resolved and only addresses
the policy accepts are connected to, the very ones checked (no second lookup for DNS rebinding).
OneShotHttp gives the wall-clock deadline, no redirects and no retries: our own backoff retries.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from ..core.auth import SIGNATURE_HEADER, sign
from ..core.callbacks import CallbackPolicy, CallbackUrlError, notice_body, parse_retry_after
from ..core.model import Delivery
from .one_shot_http import DEADLINE_SLACK_S, OneShotHttp, TransportError

NOTICE_TIMEOUT_S = 5.0


class HttpNotifier:
    def __init__(
        self,
        policy: CallbackPolicy,
        secret: bytes,
        timeout_s: float = NOTICE_TIMEOUT_S,
        clock: Callable[[], float] = time.time,
    ):
        self.policy = policy
        self._secret = secret
        self._timeout_s = timeout_s
        self._clock = clock

    def deliver(self, notice: Mapping[str, Any]) -> Delivery:
        return self.post(notice["url"], notice_body(notice))

    def post(self, url: str, body: bytes) -> Delivery:
        try:
            self.policy.check_url(url)  # the policy may have changed since the request brought it
        except CallbackUrlError as exc:
            return Delivery(False, None, f"refused by policy: {exc}")
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "safesend-callback",
            SIGNATURE_HEADER: sign(self._secret, int(self._clock()), body),
        }
        # status_only: the host's answer is never decompressed nor read past a few KB (a bomb stays a 200).
        http = OneShotHttp(timeout=self._timeout_s, allow_address=self.policy.address_allowed, status_only=True)
        try:
            response, _ = http.request(url, "POST", body=body, headers=headers)
        except TransportError as exc:
            return Delivery(False, None, exc.kind.value)
        status = int(response.status)
        wait = parse_retry_after(response.get("retry-after"), self._clock())
        return Delivery(200 <= status < 300, status, retry_after_s=wait)

    def deadline_s(self, notice: Mapping[str, Any]) -> float:
        """The longest one POST can take (its wall-clock deadline and the watchdog's slack)."""
        return self._timeout_s + DEADLINE_SLACK_S
