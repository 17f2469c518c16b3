"""ReviewPublisher on Pub/Sub: one JSON message per entry into review (review.review_item), with
attributes job_id, reason, channel and review_id (review.review_attributes) so subscribers can
filter without parsing the body."""

from __future__ import annotations

import json
from typing import Any

from ..core.errors import PublishError


class PubSubReviewPublisher:
    """Publishes to `topic_path` (projects/P/topics/T). The client is created lazily, once.

    With PUBSUB_EMULATOR_HOST set the client library talks to the emulator by itself.
    """

    def __init__(self, topic_path: str, client: Any = None, timeout_s: float = 30.0):
        self.topic_path = topic_path
        self._client = client
        self._timeout_s = timeout_s

    @property
    def client(self) -> Any:
        """Created (and google.cloud.pubsub_v1 imported, ~100 ms) on the first publish only."""
        if self._client is None:
            from google.cloud.pubsub_v1 import PublisherClient

            self._client = PublisherClient()
        return self._client

    def publish(self, item: dict[str, Any], attributes: dict[str, str]) -> str:
        from google.api_core import exceptions as gexc  # with grpc, ~40 ms: a status instance never publishes

        data = json.dumps(item, ensure_ascii=False, default=str).encode("utf-8")
        try:
            future = self.client.publish(self.topic_path, data, **attributes)
            message_id: str = future.result(timeout=self._timeout_s)  # Pub/Sub's id of the message
            return message_id
        except (gexc.GoogleAPICallError, TimeoutError) as exc:
            raise PublishError(f"pubsub: {exc}") from exc
        except Exception as exc:  # concurrent.futures timeouts and transport errors
            raise PublishError(f"pubsub: {exc!r}") from exc
