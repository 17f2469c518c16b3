"""Pub/Sub push, played locally: pull review items from the notify subscription and POST each one to
/notify the way a push subscription does (the same envelope), acknowledging on 2xx and handing it
back for redelivery otherwise.

Why not the emulator's own push: it cannot attach credentials, and the local stack runs with auth
on. The delivery contract is the same: at least once, redelivered until acknowledged. Tests can
make it deliver a message twice (`duplicate_next`), as Pub/Sub may.
"""

from __future__ import annotations

import base64
import json
import threading
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

PULL_BATCH = 10
PULL_TIMEOUT_S = 2.0
POST_TIMEOUT_S = 30.0
IDLE_WAIT_S = 0.2


class PushRelay:
    def __init__(self, subscription_path: str, endpoint: str, headers: Mapping[str, str], emulator_host: str):
        self.subscription_path = subscription_path
        self.endpoint = endpoint
        self.headers = {"Content-Type": "application/json", **headers}
        self.emulator_host = emulator_host
        self.delivered = 0  # POSTs answered 2xx
        self.failed = 0  # POSTs answered otherwise (redelivered)
        self._duplicates = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pubsub-push-relay", daemon=True)
        self._subscriber: Any = None

    def start(self) -> PushRelay:
        import os

        from google.cloud import pubsub_v1

        previous = os.environ.get("PUBSUB_EMULATOR_HOST")
        os.environ["PUBSUB_EMULATOR_HOST"] = self.emulator_host
        try:
            self._subscriber = pubsub_v1.SubscriberClient()
        finally:
            if previous is None:
                os.environ.pop("PUBSUB_EMULATOR_HOST", None)
            else:
                os.environ["PUBSUB_EMULATOR_HOST"] = previous
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        if self._subscriber is not None:
            self._subscriber.close()

    def duplicate_next(self, count: int = 1) -> None:
        """POST each of the next `count` messages twice before acknowledging (a redelivery)."""
        with self._lock:
            self._duplicates += count

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                response = self._subscriber.pull(
                    subscription=self.subscription_path, max_messages=PULL_BATCH, timeout=PULL_TIMEOUT_S
                )
            except Exception:  # noqa: BLE001 - emulator frozen or restarting: try again shortly
                self._stop.wait(IDLE_WAIT_S * 5)
                continue
            if not response.received_messages:
                self._stop.wait(IDLE_WAIT_S)
                continue
            for received in response.received_messages:
                self._push(received)

    def _push(self, received: Any) -> None:
        message = received.message
        envelope = {
            "message": {
                "data": base64.b64encode(message.data).decode("ascii"),
                "attributes": dict(message.attributes),
                "messageId": message.message_id,
            },
            "subscription": self.subscription_path,
        }
        with self._lock:
            times = 2 if self._duplicates > 0 else 1
            self._duplicates = max(0, self._duplicates - 1)
        ok = all(self._post(envelope) for _ in range(times))
        try:
            if ok:
                self._subscriber.acknowledge(subscription=self.subscription_path, ack_ids=[received.ack_id])
            else:
                self._subscriber.modify_ack_deadline(
                    subscription=self.subscription_path, ack_ids=[received.ack_id], ack_deadline_seconds=0
                )
        except Exception:  # noqa: BLE001, S110 - the ack deadline runs out and Pub/Sub redelivers anyway
            pass

    def _post(self, envelope: dict[str, Any]) -> bool:
        request = urllib.request.Request(
            self.endpoint, data=json.dumps(envelope).encode(), method="POST", headers=self.headers
        )
        try:
            with urllib.request.urlopen(request, timeout=POST_TIMEOUT_S) as response:
                good = 200 <= response.status < 300
        except (urllib.error.URLError, OSError):
            good = False
        with self._lock:
            if good:
                self.delivered += 1
            else:
                self.failed += 1
        return good
