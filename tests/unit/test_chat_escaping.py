"""Issue 18.8: nothing a customer or a reviewer writes becomes markup in the reviewers' Google Chat.
A card's decoratedText renders <a href>, <b> and <font>: every value in a card is HTML-escaped. A Chat
text message turns <users/all> into a mention and <url|text> into a link: neither can form."""

from __future__ import annotations

import json
import re
from typing import Any

from safesend.core.lifecycle import current_review_id
from safesend.core.states import State
from tests.unit.conftest import make_world
from tests.unit.test_reviewers import CHAT_AND_SLACK, TIMEOUT, in_review, posted

FAKE_LINK = '<a href="https://evil.example/review">Open in the console</a>'
HOSTILE_SUBJECT = f'{FAKE_LINK} <b>URGENT</b> <font color="#ff0000">resend now</font> <users/all>'
HOSTILE_KEY = "k:<https://evil.example|Open-in-the-console>"
HOSTILE_NOTE = "checked <users/all> <https://evil.example/x|Open in the console> <b>done</b>"


def strings(node: Any) -> list[str]:
    """Every string in a JSON-like message."""
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [s for value in node.values() for s in strings(value)]
    if isinstance(node, list):
        return [s for value in node for s in strings(value)]
    return []


def hostile_job_in_review() -> tuple[Any, Any]:
    """in_review's payments job in doubt, with a hostile subject and dedup key."""
    world = make_world(script=[TIMEOUT], reviewers=CHAT_AND_SLACK)
    world.pushed = 10**9
    job, _ = world.service.submit(world.request(key=HOSTILE_KEY, channel="payments", subject=HOSTILE_SUBJECT))
    for _ in range(20):
        job = world.store.get(job.id)
        if job.state is State.REVIEW and job.review_published_at is not None:
            break
        world.clock.advance(max(0.0, (job.next_check_at - world.clock()).total_seconds()) + 0.001)
        world.service.advance(job.id)
    assert job.state is State.REVIEW
    return world, job


def test_a_hostile_subject_and_dedup_key_are_text_in_the_chat_card():
    world, job = hostile_job_in_review()
    world.service.notify(job.id, current_review_id(job))
    (card,) = posted(world, "chat")
    body = card["cardsV2"][0]["card"]
    texts = [w["decoratedText"]["text"] for w in body["sections"][0]["widgets"] if "decoratedText" in w]
    texts += [body["header"]["title"], body["header"]["subtitle"]]
    assert not any("<" in t or ">" in t for t in texts), texts
    assert any(
        "&lt;a href=&quot;https://evil.example/review&quot;&gt;Open in the console&lt;/a&gt;" in t for t in texts
    )
    assert any("&lt;https://evil.example|Open-in-the-console&gt;" in t for t in texts)  # the dedup key
    assert "<" not in card["text"] and ">" not in card["text"]
    urls = [u for u in strings(card) if u.startswith("http")]
    assert not any("evil.example" in u for u in urls)  # the only links are ours
    (slack,) = posted(world, "slack")
    assert "<a href" not in json.dumps(slack) and "&lt;a href" in json.dumps(slack)  # unchanged: escaped


def test_a_reviewer_note_cannot_mention_everyone_or_link_in_the_chat_thread():
    world, job = in_review()
    review_id = current_review_id(job)
    world.service.notify(job.id, review_id)
    world.service.decide(job.id, review_id, "cancel", "ann@example.com", HOSTILE_NOTE)
    world.service.notify(job.id, review_id)
    for _ in range(5):
        world.service.advance(job.id)
    updates = [n for n in posted(world, "chat") if "cardsV2" not in n]
    assert updates, "the decision was never answered in the chat thread"
    for update in updates:
        assert not re.search(r"<[^>]*>", update["text"]), update["text"]
        assert "users/all" in update["text"]  # shown, as text
    slack_updates = [n for n in posted(world, "slack") if "blocks" not in n]
    assert all("<users/all>" not in n["text"] for n in slack_updates)


def test_a_card_marked_answered_carries_the_note_as_text_too():
    """A card still pending when its entry is answered goes out marked with the decision's line,
    which holds the reviewer's note: escaped like every other value (issue 18.8 on issue 25.5's path)."""
    from tests.unit.test_messengers import FlakyReceiver

    world, job = in_review()
    chat_up = {"up": False}
    receiver = FlakyReceiver(lambda n: not chat_up["up"])
    world.service.notifier = receiver
    world.service.notify(job.id, current_review_id(job))
    world.clock.advance(3)
    world.service.decide(job.id, current_review_id(job), "cancel", "ann@example.com", HOSTILE_NOTE)
    chat_up["up"] = True
    world.run_until_settled(job.id)
    chat = [p for where, p in receiver.landed if where == "chat"]
    card = next(p for p in chat if "cardsV2" in p)
    assert "users/all" in card["text"] and not re.search(r"<[^>]*>", card["text"]), card["text"]
    title = card["cardsV2"][0]["card"]["header"]["title"]
    assert title.startswith("Answered: cancelled") and "<" not in title and ">" not in title, title
    slack = next(p for where, p in receiver.landed if where == "slack" and "blocks" in p)
    assert "<users/all>" not in json.dumps(slack)
