"""Reviewers' chat over incoming webhooks (Google Chat, Slack), and the router the outbox delivers
through: a notice's `kind` picks the adapter (callback, chat, slack).

Webhook URLs carry their own secret (Secret Manager in the deployment) and never enter a job
document or a log line; a notice names only its kind. Neither service has an idempotency key:
Google Chat threads by `threadKey` (the job id), so a repeated post at least lands in the item's
thread; Slack's incoming webhooks cannot thread, so its follow-ups are plain messages.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode, urlsplit

from ..core.callbacks import parse_retry_after
from ..core.model import Delivery
from ..core.ports import NoticePoster
from .one_shot_http import DEADLINE_SLACK_S, OneShotHttp, TransportError

WEBHOOK_TIMEOUT_S = 10.0


class WebhookPoster:
    """One JSON POST to a configured webhook, bounded by a wall-clock deadline, never retried here."""

    def __init__(self, url: str, timeout_s: float = WEBHOOK_TIMEOUT_S, thread_by_key: bool = False):
        self._url = url
        self._timeout_s = timeout_s
        self._thread_by_key = thread_by_key

    def deliver(self, notice: Mapping[str, Any]) -> Delivery:
        url = self._url
        if self._thread_by_key and notice.get("thread"):
            joiner = "&" if urlsplit(url).query else "?"
            url += joiner + urlencode(
                {"threadKey": notice["thread"], "messageReplyOption": "REPLY_MESSAGE_FALLBACK_TO_NEW_THREAD"}
            )
        body = json.dumps(notice["payload"], ensure_ascii=False, default=str).encode("utf-8")
        try:
            response, _ = OneShotHttp(timeout=self._timeout_s, status_only=True).request(
                url, "POST", body=body, headers={"Content-Type": "application/json; charset=UTF-8"}
            )
        except TransportError as exc:
            return Delivery(False, None, exc.kind.value)
        status = int(response.status)
        return Delivery(
            200 <= status < 300, status, retry_after_s=parse_retry_after(response.get("retry-after"), time.time())
        )

    def deadline_s(self, notice: Mapping[str, Any]) -> float:
        """The longest one post can take (its wall-clock deadline and the watchdog's slack)."""
        return self._timeout_s + DEADLINE_SLACK_S


def chat_webhook(url: str) -> WebhookPoster:
    return WebhookPoster(url, thread_by_key=True)


def slack_webhook(url: str) -> WebhookPoster:
    return WebhookPoster(url)


class RoutingNotifier:
    """Delivers each notice with the adapter for its kind; an unconfigured kind is never tried (the
    service gives such notices up with the reason), never an exception."""

    def __init__(self, routes: Mapping[str, NoticePoster]):
        self._routes = dict(routes)

    def can_deliver(self, notice: Mapping[str, Any]) -> bool:
        return (notice.get("kind") or "callback") in self._routes

    def deliver(self, notice: Mapping[str, Any]) -> Delivery:
        route = self._routes.get(notice.get("kind") or "callback")
        if route is None:
            return Delivery(False, None, f"no {notice.get('kind')} target configured")
        return route.deliver(notice)

    def deadline_s(self, notice: Mapping[str, Any]) -> float:
        route = self._routes.get(notice.get("kind") or "callback")
        return route.deadline_s(notice) if route is not None else 0.0
