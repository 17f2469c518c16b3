"""Issue 12.1 over fakes: the mailbox's change log settles an ambiguous attempt in seconds; absence in
the log is no evidence, so resends still wait for the search; the checkpoint costs no call per send."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from safesend.core.classify import TransportErrorKind, classify_http, classify_transport
from safesend.core.states import State
from tests.props import examples
from tests.unit.conftest import make_world

TIMEOUT = classify_transport(TransportErrorKind.TIMEOUT, "read timed out")
LOST = classify_transport(TransportErrorKind.DISCONNECTED_AFTER_WRITE, "never arrived")
DROPPED = ("accept", TIMEOUT)


def history_world(script, history_lag_s: float = 0.0, index_lag_s: float = 30.0):
    return make_world(script=script, history_check_s=5.0, history_lag_s=history_lag_s, index_lag_s=index_lag_s)


def step(world, job_id: str) -> None:
    job = world.store.get(job_id)
    world.clock.advance(max(0.0, (job.next_check_at - world.clock()).total_seconds()) + 0.001)
    world.service.advance(job_id)


def test_a_dropped_answer_is_settled_from_the_change_log_in_seconds_without_a_search():
    world = history_world([DROPPED])
    job, _ = world.service.submit(world.request())
    assert job.state is State.UNKNOWN and job.next_check_at == job.last_attempt_at + timedelta(seconds=5)
    step(world, job.id)
    final = world.store.get(job.id)
    assert (final.state, final.verified) == (State.SENT, True)
    assert (final.updated_at - job.last_attempt_at) <= timedelta(seconds=5.1)  # time to certainty
    assert world.mailer.searches == 0 and world.mailer.history_reads == 1
    assert final.provider_ref["gmail_id"] == world.mailbox.effects[0]["gmail_id"]
    assert "found_in_history" in [e["kind"] for e in final.events]


def test_absence_in_the_change_log_is_no_evidence_resends_wait_for_the_search_window():
    world = history_world([LOST, "accept"])
    job, _ = world.service.submit(world.request())
    for _ in range(40):
        current = world.store.get(job.id)
        if current.attempts == 2:
            break
        step(world, job.id)
    resent = [e for e in world.store.get(job.id).events if e["kind"] == "attempt_started"][-1]["at"]
    assert resent - job.last_attempt_at >= timedelta(seconds=300)  # the unknown window, as before
    assert world.mailer.history_reads >= 2 and world.mailer.searches >= 1
    world.run_until_settled(job.id)
    assert world.store.get(job.id).state is State.SENT and world.effects(job.id) == 1


def test_a_change_log_slower_than_the_first_look_is_read_again():
    world = history_world([DROPPED], history_lag_s=8.0)
    job, _ = world.service.submit(world.request())
    step(world, job.id)
    assert world.store.get(job.id).state is State.UNKNOWN  # at 5 s the log does not list it yet
    step(world, job.id)
    final = world.store.get(job.id)
    assert final.state is State.SENT and world.mailer.searches == 0
    assert (final.updated_at - job.last_attempt_at) <= timedelta(seconds=16)


def test_an_attempt_gmail_never_saw_costs_a_few_change_log_reads_then_the_search():
    """Not found in the change log: each look waits as long again as the time since the attempt
    (5, 15, 30, 60 s with a 90 s index lag), not a read every 10 s until the search is due."""
    world = history_world([LOST, "accept"], index_lag_s=90.0)
    job, _ = world.service.submit(world.request())
    looks = []
    for _ in range(20):
        current = world.store.get(job.id)
        if world.mailer.searches:
            break
        looks.append((current.next_check_at - job.last_attempt_at).total_seconds())
        step(world, job.id)
    assert [round(t) for t in looks] == [5, 15, 30, 60, 90]  # four change-log reads, then the search
    assert world.mailer.history_reads == 4 and world.mailer.searches == 1


def test_an_expired_checkpoint_falls_back_to_the_search():
    world = history_world([DROPPED])
    job, _ = world.service.submit(world.request())
    world.mailbox.expire_history()
    step(world, job.id)
    after = world.store.get(job.id)
    assert after.history_start is None and "history_expired" in [e["kind"] for e in after.events]
    assert after.next_check_at == job.last_attempt_at + timedelta(seconds=90)
    world.run_until_settled(job.id)
    assert world.store.get(job.id).state is State.SENT and world.mailer.searches >= 1


def test_two_copies_in_the_change_log_are_a_duplicate():
    world = history_world([DROPPED])
    job, _ = world.service.submit(world.request())
    world.mailbox.accept(world.mailbox.raws[0])  # a second copy of the same message
    step(world, job.id)
    final = world.store.get(job.id)
    assert (final.state, final.review_reason) == (State.REVIEW, "duplicate")


def test_the_checkpoint_costs_no_gmail_call_per_send_and_predates_the_attempt():
    world = history_world(["accept"] * 30)
    before = world.mailbox.history_id
    jobs = [world.service.submit(world.request(key=f"k:e:{n}"))[0] for n in range(20)]
    assert world.mailer.profile_reads == 1  # one checkpoint for the instance, not one per send
    assert all(int(j.history_start) <= int(before) for j in jobs)
    world.clock.advance(601)  # the checkpoint's TTL: refreshed once, still not per send
    world.service.submit(world.request(key="k:e:late"))
    world.service.submit(world.request(key="k:e:later"))
    assert world.mailer.profile_reads == 2


@settings(max_examples=examples(150), deadline=None)
@given(
    script=st.lists(
        st.sampled_from(
            [
                "accept",
                DROPPED,
                LOST,
                classify_http(429, "rateLimitExceeded"),
                ("accept", classify_http(503, "backendError")),
            ]
        ),
        min_size=1,
        max_size=5,
    ),
    history_lag_s=st.sampled_from([0.0, 3.0, 20.0, 200.0]),
)
def test_with_the_change_log_every_script_still_settles_with_an_honest_mailbox(script, history_lag_s):
    """Whatever the log's own lag (even past the index lag), it never causes a second copy."""
    world = history_world(list(script), history_lag_s=history_lag_s)
    job, _ = world.service.submit(world.request())
    world.run_until_settled(job.id)
    final = world.store.get(job.id)
    assert world.effects(job.id) <= 1
    if final.state is State.SENT:
        assert world.effects(job.id) == 1 and final.verified is True
