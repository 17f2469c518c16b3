"""PubSubReviewPublisher against Google's Pub/Sub emulator (gRPC)."""

from __future__ import annotations

import json
import uuid

import pytest
from google.cloud import pubsub_v1

from safesend.adapters.pubsub_review import PubSubReviewPublisher
from safesend.core.errors import PublishError

PROJECT = "demo-safesend"


@pytest.fixture
def topic_and_subscription(pubsub_emulator, monkeypatch):
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", pubsub_emulator.host)
    suffix = uuid.uuid4().hex[:8]
    topic = f"projects/{PROJECT}/topics/review-{suffix}"
    subscription = f"projects/{PROJECT}/subscriptions/review-inbox-{suffix}"
    publisher = PubSubReviewPublisher(topic)
    pubsub_v1.PublisherClient().create_topic(name=topic)  # production topics come from Terraform
    subscriber = pubsub_v1.SubscriberClient()
    subscriber.create_subscription(name=subscription, topic=topic)
    yield publisher, subscriber, subscription
    subscriber.close()


def pull(subscriber, subscription, expected: int):
    received = []
    for _ in range(20):  # bounded: the emulator may return fewer than asked per pull
        response = subscriber.pull(subscription=subscription, max_messages=10, timeout=5)
        received += response.received_messages
        if response.received_messages:
            subscriber.acknowledge(subscription=subscription, ack_ids=[m.ack_id for m in response.received_messages])
        if len(received) >= expected:
            break
    return received


def test_review_item_arrives_with_attributes(topic_and_subscription):
    publisher, subscriber, subscription = topic_and_subscription
    item = {"job_id": "j1", "reason": "ambiguous", "subject": "Ümlaut receipt", "attempts": 1}
    message_id = publisher.publish(item, {"job_id": "j1", "reason": "ambiguous"})
    assert message_id
    [received] = pull(subscriber, subscription, 1)
    assert json.loads(received.message.data) == item
    assert dict(received.message.attributes) == {"job_id": "j1", "reason": "ambiguous"}
    assert received.message.message_id == message_id


def test_publishing_to_a_missing_topic_is_a_publish_error(pubsub_emulator, monkeypatch):
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", pubsub_emulator.host)
    publisher = PubSubReviewPublisher(f"projects/{PROJECT}/topics/missing-{uuid.uuid4().hex[:8]}", timeout_s=10)
    with pytest.raises(PublishError):
        publisher.publish({"job_id": "j"}, {"job_id": "j", "reason": "duplicate"})
