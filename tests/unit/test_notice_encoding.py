"""A decision's note and reviewer name reach the reviewers' chats as text. JSON may carry a lone
surrogate ("\\ud800"), which no UTF-8 body can hold: taken in, it made every later post of the job's
thread raise, so the decision's lines and anything queued behind them in that thread never went
out, and what the same pass had already posted was never recorded (posted again on every pass).
Refused at the door, and a poster that raises anyway is one failed delivery, not a lost pass."""

from __future__ import annotations

import json
from typing import Any

import pytest

from safesend.core.errors import RequestValidationError
from safesend.core.lifecycle import current_review_id
from safesend.core.model import Delivery
from safesend.entrypoints.api_decisions import parse_decision_request
from tests.unit.test_api_decisions import api_for, post
from tests.unit.test_reviewers import in_review

HOOK = "https://n8n.example.com/webhook-waiting/91"


@pytest.mark.parametrize("field", ["note", "reviewer"])
def test_a_lone_surrogate_in_a_decision_is_a_400(field):
    world, job = in_review()
    review_id = current_review_id(job)
    api = api_for(world, "key:n8n-review")
    raw = json.dumps({"review_id": review_id, "decision": "cancel", field: "x\ud800y"})  # escaped: "\\ud800"
    status, view = post(api.decide, None, raw=raw)
    assert status == 400 and field in view["fields"], view
    assert world.store.get(job.id).decisions == []


def test_text_a_decision_may_carry_is_still_taken():
    asked = parse_decision_request(
        {"review_id": f"{'a' * 32}:1", "decision": "cancel", "note": "ok 😀\nline two", "reviewer": "Ann (Slack)"}
    )
    assert asked.note == "ok 😀\nline two" and asked.reviewer == "Ann (Slack)"
    with pytest.raises(RequestValidationError):
        parse_decision_request({"review_id": f"{'a' * 32}:1", "decision": "cancel", "note": "\udfff"})
    with pytest.raises(RequestValidationError) as refused:  # was a UnicodeEncodeError: a 500
        parse_decision_request({"review_id": f"{'a' * 32}:1", "decision": "cancel", "dedup_key": "k\ud800"})
    assert "dedup_key" in refused.value.fields


class RaisingOnChat:
    """Posts everything but chat, whose adapter raises (a bug, an unencodable body...)."""

    def __init__(self) -> None:
        self.posted: list[str] = []

    def can_deliver(self, notice: Any) -> bool:
        return True

    def deadline_s(self, notice: Any) -> float:
        return 10.0

    def deliver(self, notice: Any) -> Delivery:
        if notice["kind"] == "chat":
            raise UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed")
        self.posted.append(notice["id"])
        return Delivery(True, 200)


def test_a_poster_that_raises_is_a_failed_delivery_and_the_rest_of_the_pass_is_recorded():
    world, job = in_review()
    world.service.submit(world.request(channel="payments", callback_url=HOOK))  # the same job: registers its callback
    notifier = RaisingOnChat()
    world.service.notifier = notifier
    world.service.notify(job.id, current_review_id(job))
    for _ in range(3):  # passes after the holds lapse: nothing posted twice
        world.clock.advance(3600)
        world.service.advance(job.id)
    assert len(notifier.posted) == len(set(notifier.posted)), notifier.posted
    stored = world.store.get(job.id)
    by_kind = {n["kind"]: n for n in stored.notices}
    assert by_kind["slack"]["delivered_at"] is not None and by_kind["callback"]["delivered_at"] is not None
    chat = by_kind["chat"]
    assert chat["delivered_at"] is None and chat["tries"] >= 2 and "UnicodeEncodeError" in chat["last_error"]
    assert chat.get("overdue_at") is not None, "a reviewer notice that never goes out must raise the alert"
