"""Issue 9.3: the workflow learns the outcome. Callback URLs (SSRF policy), notices queued when a job
settles (and again when it changes), delivered at least once with identical content, per request."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from safesend.core.callbacks import MAX_CALLBACKS, CallbackPolicy, CallbackUrlError
from safesend.core.classify import TransportErrorKind, classify_transport
from safesend.core.errors import PayloadMismatchError, RequestValidationError
from safesend.core.model import Delivery
from safesend.core.states import State
from safesend.core.validation import parse_send_request
from tests.unit.conftest import CALLBACKS, make_world

HOOK_A = "https://n8n.example.com/webhook-waiting/101"
HOOK_B = "https://n8n.example.com/webhook-waiting/202"
TIMEOUT = classify_transport(TransportErrorKind.TIMEOUT, "read timed out")


# --------------------------------------------------------------------------- the URL policy
@pytest.mark.parametrize(
    "url",
    [
        "https://n8n.example.com/webhook-waiting/1",
        "https://tenant.app.n8n.cloud/webhook-waiting/2",
        "https://n8n.example.com:8443/x?y=1",
    ],
)
def test_allowed_callback_urls(url):
    assert CALLBACKS.check_url(url) == url


@pytest.mark.parametrize(
    "url, why",
    [
        ("http://n8n.example.com/x", "https"),
        ("https://evil.example.com/x", "allowlist"),
        ("https://app.n8n.cloud/x", "allowlist"),  # "*.app.n8n.cloud" is for subdomains only
        ("https://n8n.example.com.evil.example/x", "allowlist"),
        ("https://user:pw@n8n.example.com/x", "credentials"),
        ("https://169.254.169.254/computeMetadata/v1/", "allowlist"),
        ("https://n8n.example.com/" + "x" * 2100, "at most"),
        ("https://n8n.example.com/a b", "printable"),
        ("https://n8n.example.com:99999/x", "valid URL"),
        ("file:///etc/passwd", "https"),
    ],
)
def test_refused_callback_urls_say_why(url, why):
    with pytest.raises(CallbackUrlError, match=why):
        CALLBACKS.check_url(url)


def test_no_allowlist_means_no_callbacks():
    with pytest.raises(CallbackUrlError, match="not enabled"):
        CallbackPolicy().check_url(HOOK_A)


@pytest.mark.parametrize(
    "address, allowed",
    [
        ("93.184.216.34", True),
        ("2606:2800:220:1::", True),
        ("127.0.0.1", False),
        ("10.0.0.8", False),
        ("192.168.1.1", False),
        ("169.254.169.254", False),
        ("::1", False),
        ("fd00::1", False),
        ("0.0.0.0", False),
        ("224.0.0.1", False),
        ("100.64.0.1", False),
        ("not-an-ip", False),
    ],
)
def test_only_public_addresses_are_connected_to(address, allowed):
    assert CALLBACKS.address_allowed(address) is allowed
    assert CallbackPolicy(frozenset({"x"}), allow_http=True).address_allowed(address) is True  # local stacks


def test_the_callback_url_is_not_part_of_the_payload():
    body = {"dedup_key": "k:e:1", "channel": "receipts", "to": "ann@example.com", "subject": "s", "text": "t"}
    a = parse_send_request({**body, "callback_url": HOOK_A}, "shop@example.com", callbacks=CALLBACKS)
    b = parse_send_request({**body, "callback_url": HOOK_B}, "shop@example.com", callbacks=CALLBACKS)
    c = parse_send_request(body, "shop@example.com", callbacks=CALLBACKS)
    assert a.payload_hash == b.payload_hash == c.payload_hash and (a.callback_url, c.callback_url) == (HOOK_A, None)


def test_a_refused_callback_url_is_a_400_naming_the_field():
    with pytest.raises(RequestValidationError) as info:
        parse_send_request(
            {
                "dedup_key": "k:e:1",
                "channel": "receipts",
                "to": "ann@example.com",
                "subject": "s",
                "text": "t",
                "callback_url": "http://127.0.0.1:5678/x",
            },
            "s@example.com",
            callbacks=CALLBACKS,
        )
    assert "https" in info.value.fields["callback_url"]


# --------------------------------------------------------------------------- notices
def settle(world, job_id: str) -> None:
    world.run_until_settled(job_id)


def test_a_sent_job_calls_its_callback_once_with_the_outcome(world):
    job, _ = world.service.submit(world.request(callback_url=HOOK_A))
    assert job.state is State.SENT and world.notifier.posts == []  # the first try waits for the Wait node
    assert job.notice_due_at == job.updated_at + timedelta(seconds=1)
    settle(world, job.id)
    (notice,) = world.notifier.bodies_for(HOOK_A)
    assert {k: notice[k] for k in ("job_id", "dedup_key", "state", "message_id", "verified")} == {
        "job_id": job.id,
        "dedup_key": job.dedup_key,
        "state": "sent",
        "message_id": job.message_id,
        "verified": True,
    }
    assert "text" not in notice and world.store.get(job.id).notice_due_at is None


def test_a_refused_first_call_is_retried_with_identical_content(world):
    """n8n answers 409 until the execution reached its Wait node: retried, same bytes."""
    world.notifier.script = [Delivery(False, 409), Delivery(False, None, "connect_refused")]
    job, _ = world.service.submit(world.request(callback_url=HOOK_A))
    settle(world, job.id)
    bodies = [body for url, body in world.notifier.posts]
    assert len(bodies) == 3 and len(set(bodies)) == 1
    final = world.store.get(job.id)
    assert final.notices[0]["tries"] == 3 and final.notices[0]["delivered_at"] is not None
    assert [e["kind"] for e in final.events].count("notice_delivered") == 1


def test_a_callback_that_never_answers_is_given_up_at_the_horizon(world):
    world.notifier.script = [Delivery(False, 500)] * 200
    job, _ = world.service.submit(world.request(callback_url=HOOK_A))
    settle(world, job.id)
    notice = world.store.get(job.id).notices[0]
    assert notice["gave_up_at"] is not None and notice["delivered_at"] is None
    assert (notice["gave_up_at"] - notice["created_at"]) <= timedelta(seconds=3600)
    assert 5 <= len(world.notifier.posts) <= 30  # backoff, not a hammer
    assert world.store.get(job.id).notice_due_at is None


def test_each_webhook_execution_gets_its_own_callback(world):
    """Two executions fire the same key: one email, both workflows resume."""
    world.mailer.script = [("accept", TIMEOUT)]  # settles only after reconciling
    first, _ = world.service.submit(world.request(callback_url=HOOK_A))
    _second, replayed = world.service.submit(world.request(callback_url=HOOK_B))
    assert replayed and world.store.get(first.id).callbacks == [HOOK_A, HOOK_B]
    settle(world, first.id)
    assert [n["state"] for n in world.notifier.bodies_for(HOOK_A)] == ["sent"]
    assert [n["state"] for n in world.notifier.bodies_for(HOOK_B)] == ["sent"]
    assert world.effects(first.id) == 1


def test_a_callback_registered_after_the_job_settled_is_called_for_the_current_outcome(world):
    job, _ = world.service.submit(world.request(callback_url=HOOK_A))
    settle(world, job.id)
    world.service.submit(world.request(callback_url=HOOK_B))  # a retry from another execution, later
    settle(world, job.id)
    assert [n["state"] for n in world.notifier.bodies_for(HOOK_B)] == ["sent"]
    assert len(world.notifier.bodies_for(HOOK_A)) == 1  # the first callback is not called again


def test_the_same_callback_twice_is_one_registration(world):
    job, _ = world.service.submit(world.request(callback_url=HOOK_A))
    world.service.submit(world.request(callback_url=HOOK_A))  # n8n Retry On Fail: same execution
    settle(world, job.id)
    assert len(world.notifier.bodies_for(HOOK_A)) == 1


def test_a_job_that_changes_after_settling_calls_again():
    """A duplicate found by verification turns `sent` into `review`: the workflow hears both."""
    world = make_world(script=[("accept", TIMEOUT)], index_lag_s=400)  # beyond the window: two copies
    job, _ = world.service.submit(world.request(callback_url=HOOK_A))
    settle(world, job.id)
    states = [n["state"] for n in world.notifier.bodies_for(HOOK_A)]
    assert states == ["sent", "review"] and world.notifier.bodies_for(HOOK_A)[1]["review_reason"] == "duplicate"


def test_a_review_channel_tells_the_workflow_review():
    world = make_world(script=[TIMEOUT])
    job, _ = world.service.submit(world.request(channel="payments", callback_url=HOOK_A))
    settle(world, job.id)
    (notice,) = world.notifier.bodies_for(HOOK_A)
    assert (notice["state"], notice["review_reason"]) == ("review", "ambiguous")
    assert world.effects(job.id) == 0


def test_the_sweeper_delivers_notices_whose_task_was_lost(world):
    world.service.scheduler = None  # no Cloud Tasks at all
    _job, _ = world.service.submit(world.request(callback_url=HOOK_A))
    world.clock.advance(2)
    report = world.service.sweep()
    assert report.actions.get("notices_delivered") == 1
    assert world.notifier.bodies_for(HOOK_A)[0]["state"] == "sent"


def test_a_duplicate_with_a_different_payload_registers_nothing(world):
    world.service.submit(world.request(callback_url=HOOK_A))
    with pytest.raises(PayloadMismatchError):
        world.service.submit(world.request(subject="other", callback_url=HOOK_B))
    assert world.store.get(world.store.all()[0].id).callbacks == [HOOK_A]


def test_callbacks_per_key_are_bounded(world):
    job, _ = world.service.submit(world.request(callback_url=f"{HOOK_A}0"))
    for n in range(1, MAX_CALLBACKS):
        world.service.submit(world.request(callback_url=f"{HOOK_A}{n}"))
    with pytest.raises(RequestValidationError, match="callback_url"):
        world.service.submit(world.request(callback_url=f"{HOOK_A}{MAX_CALLBACKS}"))
    assert len(world.store.get(job.id).callbacks) == MAX_CALLBACKS


def test_concurrent_registrations_are_all_kept():
    world = make_world(script=[TIMEOUT])
    job, _ = world.service.submit(world.request(callback_url=f"{HOOK_A}x"))
    barrier = threading.Barrier(6)

    def register(n: int) -> None:
        barrier.wait(timeout=5)
        world.service.submit(world.request(callback_url=f"{HOOK_B}{n}"))

    threads = [threading.Thread(target=register, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert len(world.store.get(job.id).callbacks) == 7


@pytest.mark.parametrize("status", [401, 404, 410])
def test_a_final_refusal_is_not_retried(world, status):
    """n8n: 401 for a bad resume signature, 404 for an execution that does not exist: final."""
    world.notifier.script = [Delivery(False, status)]
    job, _ = world.service.submit(world.request(callback_url=HOOK_A))
    settle(world, job.id)
    notice = world.store.get(job.id).notices[0]
    assert len(world.notifier.posts) == 1 and notice["gave_up_at"] is not None


def test_409_is_retried_until_the_workflow_waits(world):
    """n8n answers 409 while the execution has not reached its Wait node yet."""
    world.notifier.script = [Delivery(False, 409), Delivery(False, 409)]
    job, _ = world.service.submit(world.request(callback_url=HOOK_A))
    settle(world, job.id)
    assert len(world.notifier.posts) == 3 and world.store.get(job.id).notices[0]["delivered_at"] is not None
