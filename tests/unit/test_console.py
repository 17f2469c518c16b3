"""The review console over the real service and the in-memory fakes: what a reviewer sees, what a
decision does, and everything a hostile page, a stale tab or a double click must not achieve."""

from __future__ import annotations

import html
import re
from typing import Any
from urllib.parse import parse_qs, urlsplit

import flask
import pytest

from safesend.core.classify import TransportErrorKind, classify_transport
from safesend.core.errors import ConfigurationError
from safesend.core.lifecycle import MAX_NOTE_CHARS
from safesend.core.states import State
from safesend.entrypoints.console import CONSOLE_JS, CSP, CSS_PATH, ICON_PATH, JS_PATH, MAX_FORM_BYTES, ReviewConsole
from safesend.entrypoints.reviewer_auth import CSRF_TTL_S, ReviewerAuth, ReviewerSettings
from tests.unit.conftest import World, make_world

APP = flask.Flask("console-tests")
ORIGIN = "http://localhost"  # werkzeug's test host
SECRET = b"c" * 40
EVIL_SUBJECT = '</title><script>alert("s")</script><img src=x onerror=alert(1)> "quoted" & more'


def timeout():
    return classify_transport(TransportErrorKind.TIMEOUT, "read timed out <b>talking to</b> ann.lee@example.com")


class Clock:
    def __init__(self, now: float = 1_800_000_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def dev_auth(clock: Clock | None = None) -> ReviewerAuth:
    return ReviewerAuth(ReviewerSettings(dev_identity="dev@localhost", csrf_secret=SECRET), clock=clock or Clock())


def call(
    console: ReviewConsole,
    method: str,
    path: str,
    *,
    data: Any = None,
    headers: dict | None = None,
    remote: str = "127.0.0.1",
    content_type: str | None = None,
) -> tuple[str, int, dict[str, str]]:
    with APP.test_request_context(
        path,
        method=method,
        data=data,
        headers=headers or {},
        content_type=content_type,
        environ_base={"REMOTE_ADDR": remote},
    ):
        return console.handle(flask.request)


def review_job(world: World, key: str = "cust-7:payout:7", channel: str = "payments", **fields: Any) -> str:
    """A send whose answer was lost, on a channel that never resends on a guess: review/ambiguous."""
    world.mailer.script.append(timeout())
    job, _ = world.service.submit(world.request(key=key, channel=channel, **fields))
    world.run_until_settled(job.id)
    stored = world.store.get(job.id)
    assert (stored.state, stored.review_reason) == (State.REVIEW, "ambiguous")
    return job.id


def duplicate_job() -> tuple[World, str]:
    """Index lag beyond the window: the resend makes a second copy; verification finds both."""
    world = make_world(script=[("accept", timeout()), "accept"], index_lag_s=400)
    job, _ = world.service.submit(world.request(key="cust-8:receipt:8", channel="receipts"))
    world.run_until_settled(job.id)
    stored = world.store.get(job.id)
    assert (stored.state, stored.review_reason) == (State.REVIEW, "duplicate")
    return world, job.id


def hidden_fields(page: str) -> dict[str, str]:
    return {
        name: html.unescape(value)
        for name, value in re.findall(r'<input type="hidden" name="([a-z_]+)" value="([^"]*)">', page)
    }


def buttons(page: str) -> list[str]:
    return re.findall(r'<button type="submit" name="decision" value="([a-z_]+)"', page)


def snapshot(world: World) -> list[dict[str, Any]]:
    return sorted((j.to_dict() for j in world.store.all()), key=lambda d: d["id"])


@pytest.fixture
def world() -> World:
    return make_world()


@pytest.fixture
def console(world: World) -> ReviewConsole:
    auth = dev_auth()
    return ReviewConsole(lambda: world.service, lambda: auth)


def decide(
    console: ReviewConsole,
    job_id: str,
    decision: str,
    *,
    note: str = "checked",
    form: dict | None = None,
    headers: dict | None = None,
) -> tuple[str, int, dict[str, str]]:
    if form is None:
        page, status, _ = call(console, "GET", f"/review/items/{job_id}")
        assert status == 200
        form = hidden_fields(page)
    return call(
        console,
        "POST",
        f"/review/items/{job_id}/decision",
        data={**form, "decision": decision, "note": note},
        headers={"Origin": ORIGIN} if headers is None else headers,
    )


def follow(console: ReviewConsole, response: tuple[str, int, dict[str, str]]) -> tuple[str, dict[str, list[str]]]:
    _, status, headers = response
    assert status == 303, response
    location = urlsplit(headers["Location"])
    page, page_status, _ = call(console, "GET", headers["Location"])
    assert page_status == 200
    return page, parse_qs(location.query)


# ----------------------------------------------------------------------------- the list
def test_the_list_shows_open_items_oldest_first_and_filters(world, console):
    first = review_job(world, key="c:1:1", subject="First payout")
    world.clock.advance(60)
    second = review_job(world, key="c:2:2", channel="plain", subject="Second refund")
    world.clock.advance(60)
    sent, _ = world.service.submit(world.request(key="c:3:3", subject="Already sent"))
    page, status, _ = call(console, "GET", "/review")
    assert status == 200
    assert page.index(first) < page.index(second) and sent.id not in page and "Already sent" not in page
    assert "2 open items" in page
    page, _, _ = call(console, "GET", "/review?channel=plain")
    assert second in page and first not in page and "1 open item matching" in page
    page, _, _ = call(console, "GET", "/review?reason=duplicate")
    assert first not in page and second not in page and "Nothing waits for a person with this filter" in page
    page, _, _ = call(console, "GET", "/review?channel=payments&reason=ambiguous")
    assert first in page and second not in page


def test_get_never_changes_anything(world, console):
    job_id = review_job(world)
    before = snapshot(world)
    sends, searches = world.mailer.sends, world.mailer.searches
    for path in (
        "/review",
        f"/review/items/{job_id}",
        f"/review/items/{job_id}/decision",
        "/review?channel=x",
        CSS_PATH,
        "/",
        "/review/nope",
    ):
        call(console, "GET", path)
        call(console, "HEAD", path)
    assert snapshot(world) == before and (world.mailer.sends, world.mailer.searches) == (sends, searches)
    _, status, headers = call(console, "GET", f"/review/items/{job_id}/decision")
    assert status == 405 and headers["Allow"] == "POST"
    _, status, headers = call(console, "POST", "/review", data={})
    assert status == 405 and headers["Allow"] == "GET, HEAD"


# ----------------------------------------------------------------------------- one item
def test_an_item_shows_the_evidence_and_only_the_allowed_decisions(world, console):
    job_id = review_job(world, to=["Ann Lee <ann.lee@example.com>"], cc="carol@example.com")
    job = world.store.get(job_id)
    page, status, _ = call(console, "GET", f"/review/items/{job_id}")
    assert status == 200
    assert html.escape(job.message_id) in page and job.id in page
    assert "https://mail.google.com/mail/u/0/#search/rfc822msgid%3A" in page
    assert "Ann Lee &lt;a***@example.com&gt;" in page and "c***@example.com" in page
    assert "ann.lee@example.com" not in page and "carol@example.com" not in page  # masked like logs
    assert world.request().payload["text"] not in page  # never the body
    assert "Outcome unknown" in page and "Mailbox searched" in page and "Entered review" in page
    assert "read timed out &lt;b&gt;talking to&lt;/b&gt; a***@example.com" in page  # the error, masked + escaped
    assert "ambiguous" in page and "1 (may have landed: 1)" in page
    assert buttons(page) == ["resend", "mark_sent", "cancel"]
    form = hidden_fields(page)
    assert form["review_id"] == f"{job_id}:1" and form["csrf"].startswith("v1.")
    assert 'name="note"' in page and f'maxlength="{MAX_NOTE_CHARS}"' in page


def test_a_duplicate_can_only_be_acknowledged():
    world, job_id = duplicate_job()
    console = ReviewConsole(lambda: world.service, dev_auth)
    page, _, _ = call(console, "GET", f"/review/items/{job_id}")
    assert buttons(page) == ["acknowledge"]
    job = world.store.get(job_id)
    assert len(job.known_copies) == 2 and all(copy in page for copy in job.known_copies)
    response = decide(console, job_id, "resend")
    assert response[1] == 409  # not offered, and refused if forged
    page, query = follow(console, decide(console, job_id, "acknowledge", note="customer told"))
    assert query["result"] == ["acknowledged"] and "Duplicate acknowledged." in page
    assert world.store.get(job_id).state is State.SENT and world.effects(job_id) == 2


def test_unknown_and_malformed_job_ids_are_404(console):
    for path in ("/review/items/" + "0" * 32, "/review/items/NOT-A-JOB", "/review/items/%3Cscript%3E"):
        page, status, _ = call(console, "GET", path)
        assert status == 404 and "<script>" not in page


def test_every_value_is_escaped(world, console):
    job_id = review_job(
        world, subject=EVIL_SUBJECT, to=['"Eve & \\"Co\\"" <eve@example.com>'], key="k<script>x</script>"
    )
    for path in ("/review", f"/review/items/{job_id}"):
        page, _, _ = call(console, "GET", path)
        assert "<script>alert" not in page and "<img" not in page and "<b>" not in page
        assert html.escape(EVIL_SUBJECT) in page
    page, _, _ = call(console, "GET", f"/review/items/{job_id}")
    assert "k&lt;script&gt;x&lt;/script&gt;" in page
    assert html.escape('"Eve & \\"Co\\"" <e***@example.com>') in page


def test_pages_carry_a_strict_csp_and_no_inline_code(world, console):
    job_id = review_job(world)
    pages = [call(console, "GET", p) for p in ("/review", f"/review/items/{job_id}", "/review/items/" + "0" * 32)]
    pages.append(decide(console, job_id, "cancel", headers={"Origin": "https://evil.example"}))  # a 403 page
    assert [status for _, status, _ in pages] == [200, 200, 404, 403]
    for page, _, headers in pages:
        assert headers["Content-Security-Policy"] == CSP
        assert "'unsafe-inline'" not in CSP and "default-src 'none'" in CSP and "frame-ancestors 'none'" in CSP
        assert headers["X-Frame-Options"] == "DENY" and headers["Cache-Control"] == "no-store"
        assert headers["X-Content-Type-Options"] == "nosniff"
        assert headers["Content-Type"] == "text/html; charset=utf-8"
        scripts = re.findall(r"<script\b[^>]*>", page)
        assert scripts == [f'<script src="{JS_PATH}" defer>'], scripts  # no inline script
        assert "<style" not in page and " style=" not in page and not re.search(r"\son[a-z]+=", page)
        assert not re.search(
            r'(src|href)="(https?:)?//', page.replace('href="https://mail.google.com/mail/u/0/#search/', "")
        ), "no external assets"
        assert '<meta name="viewport" content="width=device-width, initial-scale=1">' in page


def test_assets_are_served_with_their_types(console):
    for path, kind in ((CSS_PATH, "text/css"), (JS_PATH, "text/javascript"), (ICON_PATH, "image/svg+xml")):
        body, status, headers = call(console, "GET", path, remote="203.0.113.5")  # static: no reviewer needed
        assert status == 200 and headers["Content-Type"].startswith(kind) and body
    assert "data-once" in CONSOLE_JS and "preventDefault" in CONSOLE_JS


def test_the_development_identity_is_shown_in_a_red_banner(world, console):
    page, _, _ = call(console, "GET", "/review")
    assert 'class="devbanner"' in page and "dev@localhost" in page and "local stacks only" in page


# ----------------------------------------------------------------------------- decisions
def test_resend_checks_the_mailbox_sends_once_and_redirects_with_the_result(world, console):
    job_id = review_job(world)
    searches = world.mailer.searches
    response = decide(console, job_id, "resend", note="not in the mailbox, resending")
    assert response[2]["Location"] == f"/review/items/{job_id}?result=resent"
    page, _ = follow(console, response)
    assert "Resent" in page and 'data-result="resent"' in page
    job = world.store.get(job_id)
    assert job.state is State.SENT and world.effects(job_id) == 1 and world.mailer.searches == searches + 1
    assert [(d["decision"], d["reviewer"], d["note"], d["result"]) for d in job.decisions] == [
        ("resend", "dev@localhost", "not in the mailbox, resending", "resent")
    ]
    assert "not in the mailbox, resending" in page and buttons(page) == []
    assert "there is nothing to decide" in page


def test_a_double_click_has_one_effect(world, console):
    job_id = review_job(world)
    page, _, _ = call(console, "GET", f"/review/items/{job_id}")
    form = hidden_fields(page)
    first = decide(console, job_id, "resend", form=form)
    second = decide(console, job_id, "resend", form=form)  # the same form posted again
    assert first[2]["Location"].endswith("result=resent")
    assert second[1] == 303 and second[2]["Location"].endswith("result=replayed")
    page, _ = follow(console, second)
    assert "not applied twice" in page
    assert world.effects(job_id) == 1 and len(world.store.get(job_id).decisions) == 1


def test_a_stale_review_id_is_a_409_page_and_changes_nothing(world, console):
    job_id = review_job(world)
    old_form = hidden_fields(call(console, "GET", f"/review/items/{job_id}")[0])
    follow(console, decide(console, job_id, "mark_sent", note="found it in Gmail"))
    before = snapshot(world)
    page, status, _ = decide(console, job_id, "cancel", form=old_form)
    assert status == 409 and "changed since the page was loaded" in page and "Nothing was done" in page
    assert f'href="/review/items/{job_id}"' in page
    assert snapshot(world) == before


def test_a_second_decision_on_the_same_review_is_a_409(world, console):
    job_id = review_job(world)
    form = hidden_fields(call(console, "GET", f"/review/items/{job_id}")[0])
    follow(console, decide(console, job_id, "resend", form=form))
    _page, status, _ = decide(console, job_id, "cancel", form=form)
    assert status == 409
    assert world.store.get(job_id).state is State.SENT


def test_a_resend_is_refused_when_a_copy_is_in_the_mailbox(world, console):
    job_id = review_job(world)
    job = world.store.get(job_id)
    copy = world.mailbox.accept(f"Message-ID: {job.message_id}\r\nSubject: x\r\n\r\nbody".encode())
    world.clock.advance(31)  # past the fake mailbox's index lag
    response = decide(console, job_id, "resend")
    assert parse_qs(urlsplit(response[2]["Location"]).query) == {
        "result": ["refused_copy_found"],
        "copy": [copy.gmail_id],
    }
    page, _ = follow(console, response)
    assert "Resend refused" in page and copy.gmail_id in page
    assert world.effects(job_id) == 1  # only the copy that was already there
    assert world.store.get(job_id).state is State.REVIEW and buttons(page) == ["resend", "mark_sent", "cancel"]
    page, _ = follow(console, decide(console, job_id, "mark_sent", note="that copy is it"))
    assert world.store.get(job_id).state is State.SENT and world.effects(job_id) == 1


def test_a_decision_that_sends_the_job_back_to_review_says_so():
    """Mark sent over a page that showed no copy, when the decision's own search finds two: the job
    goes back to review (duplicate), and the flash must say that, never "Marked as sent."."""
    world = make_world(index_lag_s=0)
    auth = dev_auth()
    console = ReviewConsole(lambda: world.service, lambda: auth)
    job_id = review_job(world)
    message_id = world.store.get(job_id).message_id
    for _ in range(2):
        world.mailbox.accept(f"Message-ID: {message_id}\r\nSubject: x\r\n\r\nhi\r\n".encode())
    page, query = follow(console, decide(console, job_id, "mark_sent", note="it is there"))
    assert query == {"result": ["reopened"]} and 'data-result="reopened"' in page
    assert "back in review" in page and "Marked as sent." not in page
    job = world.store.get(job_id)
    assert (job.state, job.review_reason) == (State.REVIEW, "duplicate")


def test_cancel_ends_the_job(world, console):
    job_id = review_job(world)
    page, query = follow(console, decide(console, job_id, "cancel", note="customer withdrew"))
    assert query == {"result": ["cancelled"]} and "Cancelled" in page
    assert world.store.get(job_id).state is State.CANCELLED and world.effects(job_id) == 0


def test_flash_and_copy_parameters_are_a_fixed_vocabulary(world, console):
    job_id = review_job(world)
    page, _, _ = call(console, "GET", f"/review/items/{job_id}?result=<script>&copy=<b>x</b>")
    assert "<script>" not in page and "<b>x" not in page and 'class="flash' not in page
    page, _, _ = call(console, "GET", f"/review/items/{job_id}?result=refused_copy_found&copy=%3Cb%3E&copy=abc123")
    copies = re.search(r'<ul class="copies">(.*?)</ul>', page).group(1)
    assert "abc123" in copies and "&lt;b&gt;" not in copies


# ----------------------------------------------------------------------------- what a decision must carry
@pytest.mark.parametrize(
    "headers",
    [
        {},  # neither Origin nor Referer
        {"Origin": "https://evil.example"},
        {"Origin": "null"},
        {"Origin": ORIGIN, "Sec-Fetch-Site": "cross-site"},
        {"Referer": "https://evil.example/page"},
    ],
)
def test_a_decision_from_another_origin_is_refused(world, console, headers):
    job_id = review_job(world)
    before = snapshot(world)
    page, status, _ = decide(console, job_id, "resend", headers=headers)
    assert status == 403 and "Decision refused" in page
    assert snapshot(world) == before and world.effects(job_id) == 0


def test_a_referer_from_our_own_origin_is_enough(world, console):
    job_id = review_job(world)
    _, status, _ = decide(console, job_id, "cancel", headers={"Referer": f"{ORIGIN}/review/items/{job_id}"})
    assert status == 303


def test_the_csrf_token_is_bound_to_the_review_and_the_reviewer(world):
    clock = Clock()
    auth = dev_auth(clock)
    console = ReviewConsole(lambda: world.service, lambda: auth)
    job_id = review_job(world, key="c:a:1")
    other_id = review_job(world, key="c:b:2")
    form = hidden_fields(call(console, "GET", f"/review/items/{job_id}")[0])
    other_form = hidden_fields(call(console, "GET", f"/review/items/{other_id}")[0])
    before = snapshot(world)
    cases = [
        {**form, "csrf": other_form["csrf"]},  # another item's token
        {**form, "csrf": form["csrf"][:-2] + "AA"},  # tampered
        {**form, "csrf": ""},
        {k: v for k, v in form.items() if k != "csrf"},
    ]
    for bad in cases:
        page, status, _ = decide(console, job_id, "cancel", form=bad)
        assert status == 403 and "Decision refused" in page, bad
    foreign = ReviewerAuth(ReviewerSettings(dev_identity="eve@localhost", csrf_secret=SECRET), clock=clock)
    from safesend.entrypoints.reviewer_auth import Reviewer

    eve_token = foreign.csrf_token(Reviewer("eve@localhost", "dev"), form["review_id"])
    assert decide(console, job_id, "cancel", form={**form, "csrf": eve_token})[1] == 403  # another reviewer's
    clock.now += CSRF_TTL_S + 1
    page, status, _ = decide(console, job_id, "cancel", form=form)
    assert status == 403 and "too old" in page
    assert snapshot(world) == before


@pytest.mark.parametrize(
    "change, status",
    [
        ({"decision": "delete_everything"}, 400),
        ({"review_id": "garbage"}, 400),
        ({"review_id": "0" * 32 + ":1"}, 400),  # a review of another job
        ({"note": "x" * (MAX_NOTE_CHARS + 1)}, 400),
        ({"extra": "field"}, 400),
    ],
)
def test_malformed_decisions_are_refused(world, console, change, status):
    job_id = review_job(world)
    form = hidden_fields(call(console, "GET", f"/review/items/{job_id}")[0])
    before = snapshot(world)
    data = {**form, "decision": "cancel", "note": "", **change}
    page, got, _ = call(console, "POST", f"/review/items/{job_id}/decision", data=data, headers={"Origin": ORIGIN})
    assert got == status, page
    assert snapshot(world) == before


def test_oversized_and_non_form_bodies_are_refused(world, console):
    job_id = review_job(world)
    path = f"/review/items/{job_id}/decision"
    _, status, _ = call(
        console,
        "POST",
        path,
        data="x" * (MAX_FORM_BYTES + 1),
        headers={"Origin": ORIGIN},
        content_type="application/x-www-form-urlencoded",
    )
    assert status == 413
    _, status, _ = call(
        console,
        "POST",
        path,
        data='{"decision": "cancel"}',
        headers={"Origin": ORIGIN},
        content_type="application/json",
    )
    assert status == 415
    form = hidden_fields(call(console, "GET", f"/review/items/{job_id}")[0])
    body = "&".join(f"{k}={v}" for k, v in {**form, "decision": "cancel"}.items()) + "&decision=resend"
    _, status, _ = call(
        console, "POST", path, data=body, headers={"Origin": ORIGIN}, content_type="application/x-www-form-urlencoded"
    )
    assert status == 400  # a repeated field is never guessed at
    assert world.store.get(job_id).state is State.REVIEW


def test_a_mailbox_outage_during_a_resend_sends_nothing(world, console):
    from safesend.core.errors import MailboxUnavailableError

    job_id = review_job(world)
    world.mailer.search_error = MailboxUnavailableError("search failed")
    page, status, _ = decide(console, job_id, "resend")
    assert status == 503 and "nothing was done" in page
    assert world.effects(job_id) == 0 and world.store.get(job_id).state is State.REVIEW


# ----------------------------------------------------------------------------- who may come in
AUDIENCE = "/projects/1/locations/europe-west1/services/review"


def iap_console(world: World, calls: list[str]) -> ReviewConsole:
    settings = ReviewerSettings(
        iap_audiences=frozenset({AUDIENCE}),
        allowed_emails=frozenset({"ann@example.com"}),
        csrf_secret=SECRET,
        console_url="https://review.example.com",
    )
    auth = ReviewerAuth(settings, clock=Clock())
    auth.verifier._fetch = lambda url: (_ for _ in ()).throw(AssertionError("no key fetch expected"))

    def service():
        calls.append("service")
        return world.service

    return ReviewConsole(service, lambda: auth)


def test_without_an_iap_assertion_nothing_is_read(world):
    job_id = review_job(world)
    calls: list[str] = []
    console = iap_console(world, calls)
    for method, path in (
        ("GET", "/review"),
        ("GET", f"/review/items/{job_id}"),
        ("POST", f"/review/items/{job_id}/decision"),
    ):
        page, status, _ = call(
            console,
            method,
            path,
            remote="203.0.113.7",
            headers={"x-goog-authenticated-user-email": "accounts.google.com:ann@example.com"},
        )
        assert status == 401 and "Sign-in required" in page and "devbanner" not in page
    assert calls == []  # refused before the store is touched


def test_a_development_identity_never_answers_a_remote_address(world, console):
    page, status, _ = call(console, "GET", "/review", remote="198.51.100.4")
    assert status == 401 and "loopback" in page


def test_a_misconfigured_console_is_a_500_page(world):
    def broken() -> ReviewerAuth:
        raise ConfigurationError("SAFESEND_REVIEW_CSRF_SECRET must be at least 32 bytes")

    page, status, headers = call(ReviewConsole(lambda: world.service, broken), "GET", "/review")
    assert status == 500 and "misconfigured" in page and "SAFESEND_REVIEW_CSRF_SECRET" not in page
    assert headers["Content-Security-Policy"] == CSP


def test_root_redirects_to_the_list(console):
    _, status, headers = call(console, "GET", "/")
    assert status == 302 and headers["Location"] == "/review"


def test_behind_iap_a_signed_reviewer_decides_without_a_banner(world):
    from tests.unit.test_reviewer_auth import IAP_ISSUER, Keys

    keys = Keys()
    clock = Clock()
    settings = ReviewerSettings(
        iap_audiences=frozenset({AUDIENCE}),
        allowed_emails=frozenset({"ann@example.com"}),
        csrf_secret=SECRET,
        console_url="https://review.example.com",
    )
    auth = ReviewerAuth(settings, clock=clock)
    auth.verifier._fetch = keys.fetch
    auth.verifier._clock = clock
    console = ReviewConsole(lambda: world.service, lambda: auth)

    def assertion(email: str) -> dict[str, str]:
        now = int(clock())
        return {
            "x-goog-iap-jwt-assertion": keys.sign(
                {
                    "iss": IAP_ISSUER,
                    "aud": AUDIENCE,
                    "iat": now,
                    "exp": now + 600,
                    "email": email,
                    "sub": "accounts.google.com:1",
                }
            )
        }

    job_id = review_job(world)
    page, status, _ = call(console, "GET", "/review", headers=assertion("Ann@example.com"), remote="203.0.113.7")
    assert status == 200 and "ann@example.com" in page and "devbanner" not in page and job_id in page
    page, _, _ = call(
        console, "GET", f"/review/items/{job_id}", headers=assertion("ann@example.com"), remote="203.0.113.7"
    )
    form = hidden_fields(page)
    post = dict(data={**form, "decision": "cancel", "note": "by IAP"}, remote="203.0.113.7")
    _, status, _ = call(
        console,
        "POST",
        f"/review/items/{job_id}/decision",
        headers={**assertion("ann@example.com"), "Origin": "http://localhost"},
        **post,
    )
    assert status == 403  # our origin is the configured console URL, not whatever Host says
    response = call(
        console,
        "POST",
        f"/review/items/{job_id}/decision",
        headers={**assertion("ann@example.com"), "Origin": "https://review.example.com"},
        **post,
    )
    assert response[1] == 303
    job = world.store.get(job_id)
    assert job.state is State.CANCELLED and job.decisions[0]["reviewer"] == "ann@example.com"
    page, status, _ = call(console, "GET", "/review", headers=assertion("eve@example.com"), remote="203.0.113.7")
    assert status == 403 and "eve@example.com" in page and "allowlist" in page


def test_every_review_reason_has_an_explanation_for_the_reviewer():
    """A reason added to the lifecycle without a line here would show a person nothing to go on."""
    from safesend.core.lifecycle import ReviewReason
    from safesend.entrypoints.console import REASONS

    reasons = {v for k, v in vars(ReviewReason).items() if k.isupper()}
    assert reasons - set(REASONS) == set()
