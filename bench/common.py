"""Shared fixtures of the benchmark: the typical message, time budgets, quiet service logs."""

from __future__ import annotations

import logging
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
for _path in (REPO_ROOT / "functions", REPO_ROOT):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from safesend.core.keys import job_id_for, message_id_for  # noqa: E402
from safesend.core.mime import OutgoingMessage, build_mime  # noqa: E402

DOMAIN = "mail.example.com"
SENDER = "Shop <shop@example.com>"
CHANNELS = frozenset({"receipts", "payments", "plain"})
CREATED_AT = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)

_TEXT = (
    "Hello Ann,\n\nthank you for your order 98765. We received your payment of EUR 42.50 and "
    "your parcel will leave our warehouse within two working days.\n\n"
    "  1 x Ceramic mug, blue          EUR 18.00\n"
    "  2 x Tea sampler                EUR 24.50\n\n"
    "You can follow the delivery at https://shop.example.com/orders/98765.\n\n"
    "Kind regards,\nThe Example Shop team\n"
)
_HTML = (
    '<!doctype html><html><body style="font-family:sans-serif">'
    "<p>Hello Ann,</p><p>thank you for your order <b>98765</b>. We received your payment of "
    "<b>EUR&nbsp;42.50</b> and your parcel will leave our warehouse within two working days.</p>"
    "<table><tr><td>1 &times; Ceramic mug, blue</td><td>EUR 18.00</td></tr>"
    "<tr><td>2 &times; Tea sampler</td><td>EUR 24.50</td></tr></table>"
    '<p>You can follow the delivery <a href="https://shop.example.com/orders/98765">here</a>.</p>'
    "<p>Kind regards,<br>The Example Shop team</p></body></html>"
)


def typical_body(dedup_key: str = "cust-1042:order_paid:98765") -> dict:
    """A typical send request: text + html, 3 recipients (2 to, 1 cc), about 1.4 KB of JSON."""
    return {
        "dedup_key": dedup_key,
        "channel": "receipts",
        "from": SENDER,
        "to": ["Ann Example <ann@example.com>", "bob@example.org"],
        "cc": ["Carol Accounts <carol@example.net>"],
        "subject": "Your receipt for order 98765",
        "text": _TEXT,
        "html": _HTML,
    }


def typical_message() -> OutgoingMessage:
    body = typical_body()
    return OutgoingMessage(
        sender=SENDER,
        to=tuple(body["to"]),
        cc=tuple(body["cc"]),
        subject=body["subject"],
        text=body["text"],
        html=body["html"],
    )


def raw_for(key: str) -> tuple[bytes, str]:
    """MIME for the typical message under dedup key `key`, and its Message-ID."""
    message_id = message_id_for(key, DOMAIN)
    return build_mime(typical_message(), message_id, job_id_for(key), CREATED_AT), message_id


class Budget:
    """A wall-clock budget: loops check `.exhausted` and stop early (reported in the notes)."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.deadline = time.monotonic() + seconds

    @property
    def exhausted(self) -> bool:
        return time.monotonic() >= self.deadline

    @property
    def left(self) -> float:
        return max(0.0, self.deadline - time.monotonic())


def quiet_service_logs() -> None:
    """Keep safesend's INFO logs (so their JSON formatting is part of what is measured) but
    write them to /dev/null instead of over the table."""
    from safesend.logs import get_logger

    logger = get_logger()
    devnull = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 - lives as long as the process
    for handler in logger.handlers:
        if isinstance(handler, logging.StreamHandler):
            handler.setStream(devnull)


def progress(message: str) -> None:
    print(f"bench: {message}", file=sys.stderr, flush=True)


def direct_gmail_client(relay_url: str, timeout_s: float) -> tuple[Any, Any]:
    """The baseline's client: google-api-python-client on its own keep-alive httplib2.Http, pointed
    at the relay (the direct send every side-by-side row is measured against)."""
    import httplib2
    from googleapiclient.discovery import build

    http = httplib2.Http(timeout=timeout_s)
    service = build(
        "gmail",
        "v1",
        http=http,
        client_options={"api_endpoint": relay_url},
        static_discovery=True,
        cache_discovery=False,
    )
    return service, http
