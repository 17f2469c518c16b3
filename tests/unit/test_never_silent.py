"""Issue 8 over fakes: every duplicate reaches a human, no job is burnt or stalled, and a claimed
job never answers "nothing was sent". Each test names the issue point it reproduces."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from safesend.core.classify import TransportErrorKind, classify_http, classify_transport
from safesend.core.errors import RequestValidationError, StoreUnavailableError
from safesend.core.keys import job_id_for
from safesend.core.model import Bucket, Failure
from safesend.core.policy import ChannelPolicies
from safesend.core.states import State
from safesend.entrypoints.http_api import HttpApi
from tests.unit.conftest import POLICIES, make_world
from tests.unit.test_http_api import BODY, call

TIMEOUT = classify_transport(TransportErrorKind.TIMEOUT, "read timed out")
LOST = classify_transport(TransportErrorKind.DISCONNECTED_AFTER_WRITE, "reset")
HTTP_429 = classify_http(429, "rateLimitExceeded")
HTTP_400 = classify_http(400, "invalidArgument")
HTTP_503 = classify_http(503, "backendError")
KEY = "cust-1:order_paid:42"


def kinds(job) -> list[str]:
    return [e["kind"] for e in job.events]


# --------------------------------------------------------------------------- 8.1 verification
def test_a_resend_accepted_past_the_window_is_verified_and_the_second_copy_goes_to_review():
    """8.1 reproduction: index lag (400 s) > window (300 s), Gmail accepts then answers 503 once.
    Before: `sent`, attempts 2, two copies, no review item."""
    world = make_world(script=[("accept", HTTP_503)], index_lag_s=400)
    job, _ = world.service.submit(world.request())
    assert job.state is State.UNKNOWN
    world.run_until_settled(job.id)
    final = world.store.get(job.id)
    assert world.effects(job.id) == 2 and final.attempts == 2
    assert (final.state, final.review_reason, final.verified) == (State.REVIEW, "duplicate", False)
    item, attributes = world.publisher.items[-1]
    assert attributes["reason"] == "duplicate"
    assert sorted(item["known_copies"]) == sorted(e["gmail_id"] for e in world.mailbox.effects)


def test_a_resend_is_sent_unverified_until_the_horizon_shows_one_copy():
    world = make_world(script=[LOST, "accept"], index_lag_s=30)  # the first attempt never reached Gmail
    job, _ = world.service.submit(world.request())
    for _ in range(10):
        world.clock.advance((world.store.get(job.id).next_check_at - world.clock()).total_seconds() + 0.001)
        world.service.advance(job.id)
        if world.store.get(job.id).state is State.SENT:
            break
    sent = world.store.get(job.id)
    assert (sent.state, sent.verified, sent.attempts) == (State.SENT, False, 2)
    assert sent.verify_until == sent.last_attempt_at + timedelta(seconds=1800)
    searches_before = world.mailer.searches
    world.run_until_settled(job.id)
    final = world.store.get(job.id)
    assert (final.state, final.verified, final.next_check_at) == (State.SENT, True, None)
    assert world.mailer.searches - searches_before == 2  # after the index lag, and at the horizon
    assert kinds(final)[-3:] == ["verification_checked", "verification_checked", "verified"]
    assert world.effects(job.id) == 1 and world.publisher.items == []


def test_one_copy_found_after_a_resend_is_not_yet_proof():
    """8.1: a check that found one copy after a resend, when the other may not be searchable yet."""
    world = make_world(script=[("accept", TIMEOUT), ("accept", TIMEOUT)], index_lag_s=400)
    job, _ = world.service.submit(world.request())
    seen_sent_unverified = False
    for _ in range(50):
        current = world.store.get(job.id)
        if current.next_check_at is None:
            break
        seen_sent_unverified |= current.state is State.SENT and current.verified is False
        world.clock.advance(max(0.0, (current.next_check_at - world.clock()).total_seconds()) + 0.001)
        world.service.advance(job.id)
    final = world.store.get(job.id)
    assert seen_sent_unverified, "the first copy found must leave the job unverified"
    assert world.effects(job.id) == 2
    assert (final.state, final.review_reason) == (State.REVIEW, "duplicate")
    assert world.publisher.items[-1][1]["reason"] == "duplicate"


def test_one_possible_attempt_is_verified_at_once_without_a_search(world):
    job, _ = world.service.submit(world.request())
    assert (job.state, job.verified, job.next_check_at) == (State.SENT, True, None)
    assert world.mailer.searches == 0


def test_a_copy_the_search_cannot_see_at_the_horizon_goes_to_a_human():
    """If the mailbox cannot show exactly our copy at the end of the horizon (Message-ID rewritten,
    copy deleted), one copy can no longer be proven: review, reason unverified."""
    world = make_world(script=[LOST, "accept"], index_lag_s=30)
    job, _ = world.service.submit(world.request())
    original = world.mailer.find_by_message_id

    def blind_after_send(message_id):
        if world.store.get(job.id).state is State.SENT:
            return []
        return original(message_id)

    world.mailer.find_by_message_id = blind_after_send
    world.run_until_settled(job.id)
    final = world.store.get(job.id)
    assert (final.state, final.review_reason) == (State.REVIEW, "unverified")
    assert world.publisher.items[-1][1]["reason"] == "unverified"


# --------------------------------------------------------------------------- 8.2 late accept
def _late_world(takeover_script: list):
    """Our first send hangs inside Gmail while the lease and the window run out; the sweeper takes
    over and resends (outcome from takeover_script); then our first send is accepted after all."""
    world = make_world(script=["accept", *takeover_script], index_lag_s=30)
    job_id = job_id_for(KEY)
    armed = {"once": True}

    def takeover() -> None:
        if not armed.pop("once", False):
            return
        world.clock.advance(301)  # the lease (120 s) and the unknown window (300 s) have passed
        world.service.sweep()

    world.mailer.on_send = takeover
    return world, job_id


def test_a_late_accept_after_a_takeover_resend_is_a_proven_duplicate():
    """8.2 reproduction: an attempt in flight when the lease expired lands after the sweeper resent.
    Before: an event and an ERROR log only, the job `sent`."""
    world, job_id = _late_world(["accept"])
    world.service.submit(world.request())
    final = world.store.get(job_id)
    assert world.effects(job_id) == 2
    assert (final.state, final.review_reason) == (State.REVIEW, "duplicate")
    assert "late_accept" in kinds(final) and len(final.known_copies) == 2
    assert world.publisher.items[-1][1]["reason"] == "duplicate"


def test_a_late_accept_after_a_refused_takeover_reopens_review_with_the_news():
    world, job_id = _late_world([HTTP_400])
    world.service.submit(world.request())
    final = world.store.get(job_id)
    assert world.effects(job_id) == 1
    assert (final.state, final.review_reason, final.review_entries) == (State.REVIEW, "late_accept", 2)
    reasons = [attributes["reason"] for _, attributes in world.publisher.items]
    assert reasons == ["ambiguous", "late_accept"]  # the human hears both, the newer one supersedes


def test_a_permanent_refusal_after_an_attempt_in_doubt_is_not_reported_as_nothing_sent():
    world = make_world(script=[("accept", TIMEOUT), HTTP_400], index_lag_s=400)  # past the window
    job, _ = world.service.submit(world.request())
    world.run_until_settled(job.id)
    final = world.store.get(job.id)
    assert world.effects(job.id) == 1
    assert (final.state, final.review_reason) == (State.REVIEW, "ambiguous")
    assert final.last_error["status"] == 400


# --------------------------------------------------------------------------- 8.5 one bad job
def _due_unknown_jobs(world, keys: list[str]) -> list[str]:
    ids = []
    for key in keys:
        world.mailer.script = [TIMEOUT]
        job, _ = world.service.submit(world.request(key=key))
        ids.append(job.id)
        world.clock.advance(1)
    world.clock.advance(400)  # checks due, windows over
    return ids


def test_a_job_whose_channel_was_removed_follows_the_review_policy_and_stalls_nobody():
    world = make_world()
    first, second = _due_unknown_jobs(world, ["k:e:1", "k:e:2"])
    world.service.policies = ChannelPolicies.from_mapping(
        {"defaults": POLICIES["defaults"], "channels": {"payments": {"on_unknown": "review"}}}
    )
    report = world.service.sweep()
    assert report.errors == 0
    for job_id in (first, second):
        job = world.store.get(job_id)
        assert (job.state, job.review_reason) == (State.REVIEW, "ambiguous")  # never resent on a guess
    assert world.mailer.sends == 2 and len(world.publisher.items) == 2


def test_an_unexpected_error_on_one_job_is_isolated_and_the_sweep_goes_on():
    world = make_world()
    first, second = _due_unknown_jobs(world, ["k:e:1", "k:e:2"])
    poisoned = world.store.get(first).message_id
    original = world.mailer.find_by_message_id

    def search(message_id):
        if message_id == poisoned:
            raise RuntimeError("a bug, or a library error nobody mapped")
        return original(message_id)

    world.mailer.find_by_message_id = search
    report = world.service.sweep()
    assert report.errors == 1 and report.actions.get("error") == 1
    assert world.store.get(second).state is not State.UNKNOWN  # the job behind it was handled


def test_a_poison_payload_fails_with_a_review_item_instead_of_crashing_every_try():
    world = make_world(script=[HTTP_429])
    world.service.request_budget_s = 0.1
    job, _ = world.service.submit(world.request())
    stored = world.store.get(job.id)
    damaged = stored.copy()
    del damaged.payload["to"]
    world.store.compare_and_set(damaged, stored.version)
    world.clock.advance(60)
    report = world.service.sweep()
    final = world.store.get(job.id)
    assert report.errors == 0
    assert (final.state, final.review_reason, final.last_error["code"]) == (
        State.FAILED,
        "permanent_error",
        "unbuildable_message",
    )
    assert world.mailer.sends == 1 and world.publisher.items[-1][1]["reason"] == "permanent_error"


def test_a_store_outage_on_one_state_does_not_stop_the_other_states():
    world = make_world()
    (job_id,) = _due_unknown_jobs(world, ["k:e:1"])
    original = world.store.find_due

    def find_due(state, now, limit, start_after=None):
        if state is State.SENDING:
            raise StoreUnavailableError("index missing or store down")
        return original(state, now, limit, start_after)

    world.store.find_due = find_due
    report = world.service.sweep()
    assert report.errors == 1 and world.store.get(job_id).state is not State.UNKNOWN


# --------------------------------------------------------------------------- 8.8 store after the claim
class _StoreDownAfterClaim:
    """The claim commits; every later write fails as if Firestore went away."""

    def __init__(self, inner):
        self.inner = inner

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def compare_and_set(self, job, expected_version):
        raise StoreUnavailableError("firestore: 503 unavailable")

    def get(self, job_id):
        raise StoreUnavailableError("firestore: 503 unavailable")


def test_a_store_outage_after_the_claim_answers_202_with_the_last_known_state():
    """8.8: Gmail accepted, recording failed. Before: 503 "nothing was sent; retry later"."""
    world = make_world()
    world.service.store = _StoreDownAfterClaim(world.store)
    api = _api(world)
    status, payload, headers = call(api.send, body=BODY)
    assert world.mailbox.effects and status == 202, payload
    assert payload["state"] == "sending" and "nothing was sent" not in str(payload)
    assert "Retry-After" in headers


def test_a_store_outage_during_quick_retries_is_202_too():
    world = make_world(script=[HTTP_429, "accept"])
    inner = world.store

    class FailsOnSecondStart(_StoreDownAfterClaim):
        def get(self, job_id):
            return inner.get(job_id)

        def compare_and_set(self, job, expected_version):
            if job.attempts >= 2:
                raise StoreUnavailableError("firestore: deadline exceeded")
            return inner.compare_and_set(job, expected_version)

    world.service.store = FailsOnSecondStart(inner)
    status, payload, _ = call(_api(world).send, body=BODY)
    assert status == 202 and payload["state"] == "retry_wait"


def test_a_store_outage_before_the_claim_is_still_503_nothing_sent():
    world = make_world()

    class Down(_StoreDownAfterClaim):
        def claim_or_get(self, job):
            raise StoreUnavailableError("firestore: 503")

    world.service.store = Down(world.store)
    status, payload, headers = call(_api(world).send, body=BODY)
    assert status == 503 and payload["error"] == "store_unavailable" and headers["Retry-After"]
    assert world.mailer.sends == 0


def _api(world) -> HttpApi:
    from safesend.bootstrap.runtime import Runtime
    from safesend.config import Settings
    from safesend.core.auth import Authenticator, AuthPolicy
    from tests.unit.test_http_api import SECRET

    settings = Settings(project="demo", default_from="Shop <shop@example.com>")
    authenticator = Authenticator(AuthPolicy(SECRET, frozenset(), frozenset()), None, time.time)
    return HttpApi(lambda: Runtime(settings, world.service.policies, world.service, authenticator))


# --------------------------------------------------------------------------- 8.4 MIME before the claim
def test_a_message_that_cannot_be_built_is_refused_before_anything_is_stored(world, monkeypatch):
    import safesend.usecases.send as send_module

    def refuse(*args, **kwargs):
        raise ValueError("header block would be altered")

    monkeypatch.setattr(send_module, "build_mime", refuse)
    with pytest.raises(RequestValidationError) as info:
        world.service.submit(world.request())
    assert "message" in info.value.fields
    assert world.store.get(job_id_for(KEY)) is None and world.mailer.sends == 0


def test_the_first_attempt_sends_the_bytes_checked_before_the_claim(world, monkeypatch):
    import safesend.usecases.send as send_module

    built = []
    real = send_module.build_mime
    monkeypatch.setattr(send_module, "build_mime", lambda *a, **k: built.append(real(*a, **k)) or built[-1])
    _job, _ = world.service.submit(world.request())
    assert len(built) == 1 and world.mailbox.raws == built  # built once, before the claim, and sent as is


# --------------------------------------------------------------------------- 8.13 rate limits
def test_refusals_are_retried_until_the_retry_horizon_then_a_human_is_told():
    world = make_world(script=[HTTP_429] * 2000)
    job, _ = world.service.submit(world.request())
    world.run_until_settled(job.id, max_steps=1000)
    final = world.store.get(job.id)
    assert (final.state, final.review_reason) == (State.FAILED, "retry_horizon")
    gave_up_at = next(e["at"] for e in final.events if e["kind"] == "entered_failed")
    assert timedelta(seconds=3600 - 30) <= gave_up_at - final.retrying_since <= timedelta(seconds=3600)
    assert world.effects(job.id) == 0 and world.publisher.items[-1][1]["reason"] == "retry_horizon"


def test_retry_after_is_honoured_beyond_the_backoff_cap(world):
    world.service.request_budget_s = 0.1
    world.mailer.script = [Failure(Bucket.NOT_ACCEPTED, True, "http_429", status=429, retry_after_s=1200.0)]
    job, _ = world.service.submit(world.request())
    assert job.state is State.RETRY_WAIT
    assert job.next_check_at == job.last_attempt_at + timedelta(seconds=1200)


def test_a_review_channel_that_is_only_rate_limited_is_sent_not_handed_to_humans():
    world = make_world(script=[HTTP_429] * 5)
    job, _ = world.service.submit(world.request(channel="payments"))
    world.run_until_settled(job.id)
    final = world.store.get(job.id)
    assert (final.state, final.verified) == (State.SENT, True) and world.publisher.items == []


def test_a_missing_firestore_index_is_a_loud_500_not_an_empty_sweep(caplog):
    """Issue 11.2: a query without its composite index must not look like 'nothing due'."""
    from safesend.core.errors import IndexMissingError

    world = make_world()

    def find_due(state, now, limit, start_after=None):
        raise IndexMissingError("firestore_index_missing: 400 The query requires an index")

    world.store.find_due = find_due
    with pytest.raises(IndexMissingError):
        world.service.sweep()
    status, payload, _ = call(_internal_api(world).sweep, body={})
    assert status == 500 and payload["error"] == "firestore_index_missing"
    assert any(r.levelname == "CRITICAL" and "index" in r.getMessage() for r in caplog.records)


def _internal_api(world) -> HttpApi:
    from safesend.bootstrap.runtime import Runtime
    from safesend.config import Settings
    from safesend.core.api_keys import ApiKeyRing
    from safesend.core.auth import Authenticator, AuthPolicy
    from tests.unit.test_http_api import SECRET

    policy = AuthPolicy(SECRET, frozenset(), frozenset(), disabled=True, internal_keys=ApiKeyRing({}))
    return HttpApi(
        lambda: Runtime(
            Settings(project="demo"), world.service.policies, world.service, Authenticator(policy, None, time.time)
        )
    )
