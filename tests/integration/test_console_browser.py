"""The review console in a real browser: Debian's headless Chromium, driven by Playwright, against the
local stack (functions + Firestore, Pub/Sub and Cloud Tasks emulators + the Gmail simulator behind
the fault relay). A person opens the console, sees the item a faulted send put in review, and
decides; every "how many emails" answer comes from the simulator's acceptance log.

Needs /usr/bin/chromium (scripts/install-browser.sh; SAFESEND_CHROMIUM for another binary) and
Playwright from requirements-dev.txt; Playwright never downloads a browser here.

Screenshots (list, item, after a decision, phone size) go to SAFESEND_SCREENSHOT_DIR when it is
set (`SAFESEND_SCREENSHOT_DIR=docs/screenshots bash scripts/test.sh tests/integration/test_console_browser.py`
refreshes the README's), else next to the stack's logs, so a plain test run changes no file.
"""

from __future__ import annotations

import email.message
import json
import os
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
from playwright.sync_api import Browser, Page, expect, sync_playwright  # requirements-dev.txt

from devstack.stack import REPO_ROOT, LocalStack, StackConfig
from tests.emulator_fixtures import SharedEmulators

pytestmark = [pytest.mark.integration, pytest.mark.functions_out_of_process]

CHROMIUM = os.environ.get("SAFESEND_CHROMIUM", "/usr/bin/chromium")
# As root, in a sandbox with no outside network: these keep Chromium from phoning home at every start.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}
REVIEWER = "dev@localhost"
UI_TIMEOUT_MS = 20_000
# Chromium logs every non-2xx page load as a console error; these statuses are what the tests ask for.
EXPECTED = re.compile(r"Failed to load resource: the server responded with a status of (409|403)")
SUBJECT = "Payout 1001 — 1.234,00 EUR"
BODY = "Your payout of 1.234,00 EUR is on its way. IBAN DE89 3704 0044 0532 0130 00"


# ----------------------------------------------------------------------------- the stack and the browser
@pytest.fixture(scope="module")
def stack(shared_emulators: SharedEmulators) -> Iterator[LocalStack]:
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        pytest.fail(f"{CHROMIUM} not found: run scripts/install-browser.sh (Debian's chromium)")
    running = shared_emulators.stack_for("console", StackConfig())
    # The console's local settings (the stack may set them too; these win): a development identity,
    # shown in a red banner, accepted from loopback only; CSRF tokens; our own origin.
    running.config.service_env = {
        **running.config.service_env,
        "SAFESEND_REVIEW_DEV_IDENTITY": REVIEWER,
        "SAFESEND_REVIEW_CSRF_SECRET": uuid.uuid4().hex + uuid.uuid4().hex,
        "SAFESEND_REVIEW_CONSOLE_URL": running.url,
    }
    with running:
        probe = requests.get(f"{running.url}/review", timeout=10)
        if probe.status_code == 404:
            pytest.fail("the local stack does not serve /review: route it to main.review in devstack/local_app.py")
        yield running


@pytest.fixture(scope="module")
def browser(stack: LocalStack) -> Iterator[Browser]:
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: Browser, stack: LocalStack) -> Iterator[Page]:
    context = browser.new_context(viewport=DESKTOP, base_url=stack.url)
    context.set_default_timeout(UI_TIMEOUT_MS)
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda exc: errors.append(str(exc)))
    opened.on(
        "console",
        lambda msg: errors.append(msg.text) if msg.type == "error" and not EXPECTED.search(msg.text) else None,
    )
    try:
        yield opened
    finally:
        context.close()
    assert errors == [], f"the page logged errors (CSP violations, script errors): {errors}"


@pytest.fixture(autouse=True)
def clean_relay(stack: LocalStack) -> Iterator[None]:
    stack.relay.set_mode("forward-and-respond")
    yield
    stack.relay.set_mode("forward-and-respond")


@pytest.fixture(scope="module")
def shots(stack: LocalStack) -> Path:
    configured = os.environ.get("SAFESEND_SCREENSHOT_DIR")
    folder = (
        (REPO_ROOT / configured)
        if configured and not os.path.isabs(configured)
        else Path(configured)
        if configured
        else stack.log_dir / "screenshots"
    )
    folder.mkdir(parents=True, exist_ok=True)
    return folder


# ----------------------------------------------------------------------------- helpers
def status(stack: LocalStack, job_id: str) -> dict[str, Any]:
    response = requests.get(
        f"{stack.url}/status", params={"job_id": job_id}, headers=stack.caller_headers(), timeout=10
    )
    assert response.status_code == 200, response.text
    return response.json()


def wait_for_state(stack: LocalStack, job_id: str, states: set[str], timeout_s: float = 40) -> dict[str, Any]:
    """Bounded; sweeps too (Cloud Scheduler's part), so a lost task cannot stall the test."""
    deadline = time.monotonic() + timeout_s
    while True:
        view = status(stack, job_id)
        if view["state"] in states:
            return view
        if time.monotonic() > deadline:
            raise AssertionError(f"job {job_id} still {view['state']} after {timeout_s}s")
        requests.post(f"{stack.url}/sweep", json={}, headers=stack.internal_headers(), timeout=60)
        time.sleep(0.5)


def faulted_review_job(stack: LocalStack, subject: str = SUBJECT) -> dict[str, Any]:
    """A `payments` send that Gmail never got, though safesend cannot know: the relay fails it
    before forwarding. The channel never resends on a guess, so after the window it is in review."""
    stack.relay.set_mode("fail-before-forward", count=1)
    body = {
        "customer_id": f"cust-{uuid.uuid4().hex[:10]}",
        "event_type": "payout_sent",
        "order_id": "1001",
        "channel": "payments",
        "to": ["Ann Lee <ann.lee@example.com>"],
        "cc": ["audit@example.com"],
        "subject": subject,
        "text": BODY,
    }
    response = requests.post(f"{stack.url}/send", json=body, headers=stack.caller_headers(), timeout=30)
    assert response.status_code == 202 and response.json()["state"] == "unknown", response.text
    view = wait_for_state(stack, response.json()["job_id"], {"review", "sent", "failed", "cancelled"})
    assert (view["state"], view["review_reason"]) == ("review", "ambiguous"), view
    return view


def effects(stack: LocalStack, message_id: str) -> int:
    return sum(1 for e in stack.sim.effects() if e["message_id"] == message_id)


def open_item(page: Page, view: dict[str, Any]) -> None:
    page.goto("/review")
    page.locator(f'a[href="/review/items/{view["job_id"]}"]').click()
    expect(page.locator("h1.subject")).to_have_text(view.get("subject_shown", SUBJECT))
    expect(page.locator("input[name=review_id]")).to_have_value(f"{view['job_id']}:1")


def decide(page: Page, button: str, note: str) -> None:
    page.locator("#note").fill(note)
    page.get_by_role("button", name=button, exact=True).click()


def flash(page: Page) -> str:
    locator = page.locator(".flash")
    expect(locator).to_be_visible()
    return locator.get_attribute("data-result") or ""


def chat_thread(stack: LocalStack, job_id: str) -> list[Any]:
    """What the fake Google Chat webhook got in this job's thread (Chat threads by threadKey = job id)."""
    assert stack.chat is not None, "the local stack runs a fake Chat receiver (StackConfig.reviewers)"
    return [r for r in stack.chat.received if parse_qs(urlsplit(r.path).query).get("threadKey") == [job_id]]


def wait_for_chat(stack: LocalStack, job_id: str, predicate, timeout_s: float = 30) -> list[Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        thread = chat_thread(stack, job_id)
        if predicate(thread):
            return thread
        if time.monotonic() > deadline:
            raise AssertionError(f"the Chat thread of {job_id} never showed it: {[r.body[:300] for r in thread]}")
        time.sleep(0.3)


def raw_copy(message_id: str) -> bytes:
    message = email.message.EmailMessage()
    message["From"] = "Safesend Local <sender@safesend.localhost>"
    message["To"] = "ann.lee@example.com"
    message["Subject"] = SUBJECT
    message["Message-ID"] = message_id
    message.set_content("a copy that reached the mailbox by another way")
    return message.as_bytes()


# ----------------------------------------------------------------------------- the story
def test_a_reviewer_resends_an_item_a_faulted_send_put_in_review(page, browser, stack, shots):
    view = faulted_review_job(stack)
    job_id, message_id = view["job_id"], view["message_id"]
    assert effects(stack, message_id) == 0  # Gmail never got it: the relay failed it before forwarding

    # On a phone first: the list and the item at 390 px, nothing wider than the screen.
    phone = browser.new_context(viewport=PHONE, base_url=stack.url, is_mobile=True, has_touch=True)
    try:
        small = phone.new_page()
        small.goto("/review")
        expect(small.locator(f'a[href="/review/items/{job_id}"]')).to_be_visible()
        assert small.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
        small.screenshot(path=str(shots / "console-list-phone.png"), full_page=True)
        small.locator(f'a[href="/review/items/{job_id}"]').click()
        expect(small.get_by_role("button", name="Resend", exact=True)).to_be_visible()
        assert small.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
        small.screenshot(path=str(shots / "console-item-phone.png"), full_page=True)
    finally:
        phone.close()

    page.goto("/review")
    expect(page.locator(".devbanner")).to_contain_text(REVIEWER)  # the red development-identity banner
    entry = page.locator(f'a[href="/review/items/{job_id}"]')
    expect(entry).to_contain_text(SUBJECT)
    expect(entry).to_contain_text("ambiguous")
    page.screenshot(path=str(shots / "console-list.png"), full_page=True)

    entry.click()
    expect(page.locator("h1.subject")).to_have_text(SUBJECT)
    text = page.locator("main").inner_text()
    assert message_id in text and job_id in text and "Outcome unknown" in text and "Mailbox searched" in text
    assert "a***@example.com" in text and "ann.lee@example.com" not in text  # masked like the logs
    assert BODY not in page.content()  # never the body
    assert (
        page.locator("a", has_text="Search Gmail")
        .get_attribute("href")
        .startswith("https://mail.google.com/mail/u/0/#search/rfc822msgid%3A")
    )
    assert [b.get_attribute("value") for b in page.locator("button[name=decision]").all()] == [
        "resend",
        "mark_sent",
        "cancel",
    ]
    page.screenshot(path=str(shots / "console-item.png"), full_page=True)

    decide(page, "Resend", "Not in the mailbox (searched it); resending.")
    assert flash(page) == "resent"
    expect(page.locator(".badge.state-sent").first).to_be_visible()
    expect(page.locator("section.decisions")).to_contain_text("Not in the mailbox (searched it); resending.")
    page.screenshot(path=str(shots / "console-after-resend.png"), full_page=True)

    settled = wait_for_state(stack, job_id, {"sent"})
    assert settled["attempts"] == 2 and effects(stack, message_id) == 1
    decision = [e for e in settled["events"] if e["kind"] == "decision"]
    # /status masks a reviewer's address (issue 25.15), as the logs do.
    assert [(d["decision"], d["reviewer"], d["result"]) for d in decision] == [("resend", "d***@localhost", "resent")]

    # The notification's thread in the fake Chat receiver: the review card, then the answer to it.
    thread = wait_for_chat(stack, job_id, lambda posts: any("resent by" in p.json().get("text", "") for p in posts))
    cards = [p.json() for p in thread if "cardsV2" in p.json()]
    assert len(cards) == 1 and cards[0]["cardsV2"][0]["cardId"] == f"{job_id}-1"
    assert f"{stack.url}/review/items/{job_id}" in json.dumps(cards[0])  # the card links to this console page
    answers = [p.json()["text"] for p in thread if "cardsV2" not in p.json()]
    assert len(answers) == 1 and answers[0].startswith("resent by d***@localhost")
    assert "Not in the mailbox (searched it); resending." in answers[0]
    assert thread.index(next(p for p in thread if "cardsV2" in p.json())) == 0  # card first, answer after


def test_a_reviewer_cancels(page, stack):
    view = faulted_review_job(stack, "Refund 77 — cancel me")
    open_item(page, {**view, "subject_shown": "Refund 77 — cancel me"})
    decide(page, "Cancel", "Customer withdrew the request.")
    assert flash(page) == "cancelled"
    expect(page.locator(".badge.state-cancelled").first).to_be_visible()
    expect(page.locator(".decide")).to_contain_text("nothing to decide")
    assert wait_for_state(stack, view["job_id"], {"cancelled"})["state"] == "cancelled"
    time.sleep(1.5)  # a sweep or a late task must not send it either
    requests.post(f"{stack.url}/sweep", json={}, headers=stack.internal_headers(), timeout=60)
    assert effects(stack, view["message_id"]) == 0


def test_a_stale_review_id_gets_the_409_page(page, browser, stack, shots):
    view = faulted_review_job(stack, "Payout 2002 — two tabs")
    open_item(page, {**view, "subject_shown": "Payout 2002 — two tabs"})  # tab 1 loads the form...
    other = browser.new_context(viewport=DESKTOP, base_url=stack.url)
    try:
        second = other.new_page()
        open_item(second, {**view, "subject_shown": "Payout 2002 — two tabs"})  # ...tab 2 decides first
        decide(second, "Mark as sent", "Found it in Gmail.")
        assert flash(second) == "marked_sent"
    finally:
        other.close()
    decide(page, "Resend", "Resending from the stale tab.")
    expect(page.locator(".problem h1")).to_have_text("This item changed since the page was loaded")
    expect(page.locator(".problem")).to_contain_text("Nothing was done")
    page.screenshot(path=str(shots / "console-409.png"), full_page=True)
    assert effects(stack, view["message_id"]) == 0
    assert status(stack, view["job_id"])["state"] == "sent"
    page.get_by_role("link", name="Open the current item").click()
    expect(page.locator(".decide")).to_contain_text("nothing to decide")


def test_a_double_click_has_one_effect(page, stack):
    view = faulted_review_job(stack, "Payout 3003 — double click")
    open_item(page, {**view, "subject_shown": "Payout 3003 — double click"})
    form = {name: page.locator(f"input[name={name}]").input_value() for name in ("review_id", "csrf")}
    page.locator("#note").fill("double click")
    page.get_by_role("button", name="Resend", exact=True).dblclick()
    assert flash(page) == "resent"
    assert wait_for_state(stack, view["job_id"], {"sent"})["attempts"] == 2
    # The same form posted again, as a browser without our script would: replayed, never applied twice.
    again = page.request.post(
        f"/review/items/{view['job_id']}/decision",
        form={**form, "decision": "resend", "note": "double click"},
        headers={"Origin": stack.url},
    )
    assert again.ok and parse_qs(urlsplit(again.url).query)["result"] == ["replayed"]
    time.sleep(1.5)
    assert effects(stack, view["message_id"]) == 1
    decisions = [e for e in status(stack, view["job_id"])["events"] if e["kind"] == "decision"]
    assert len(decisions) == 1


def test_a_resend_is_refused_when_a_copy_appeared(page, stack, shots):
    view = faulted_review_job(stack, "Payout 4004 — a copy appeared")
    open_item(page, {**view, "subject_shown": "Payout 4004 — a copy appeared"})
    copy_id = stack.sim.insert_message(raw_copy(view["message_id"]))  # e.g. sent by hand meanwhile
    time.sleep(stack.config.sim_index_lag_s + 0.5)  # searchable
    decide(page, "Resend", "Resending.")
    assert flash(page) == "refused_copy_found"
    expect(page.locator(".flash .copies")).to_contain_text(copy_id)
    expect(page.locator(".badge.state-review").first).to_be_visible()
    page.screenshot(path=str(shots / "console-refused.png"), full_page=True)
    assert effects(stack, view["message_id"]) == 1  # only the copy that was already there
    decide(page, "Mark as sent", "That copy is the message.")
    assert flash(page) == "marked_sent"
    assert wait_for_state(stack, view["job_id"], {"sent"})["state"] == "sent"
    assert effects(stack, view["message_id"]) == 1


def test_a_cross_site_post_is_refused(page, stack):
    view = faulted_review_job(stack, "Payout 5005 — forged")
    open_item(page, {**view, "subject_shown": "Payout 5005 — forged"})
    form = {name: page.locator(f"input[name={name}]").input_value() for name in ("review_id", "csrf")}
    forged = page.request.post(
        f"/review/items/{view['job_id']}/decision",
        form={**form, "decision": "resend", "note": ""},
        headers={"Origin": "https://evil.example"},
    )
    assert forged.status == 403 and re.search("Decision refused", forged.text())
    assert status(stack, view["job_id"])["state"] == "review" and effects(stack, view["message_id"]) == 0


def test_the_health_page_answers_what_get_health_does(page, stack, shots):
    """Issue 20.4: GET /review/health, reached from the nav, shows /health's answers: the sweep, the
    notices, each mailbox's measured index lag (a sampled send's, found by the search)."""
    from devstack.stack import fetch_health

    response = requests.post(f"{stack.url}/sweep", json={}, headers=stack.internal_headers(), timeout=60)
    assert response.status_code == 200, response.text
    sent = requests.post(f"{stack.url}/send", json=_plain_job(), headers=stack.caller_headers(), timeout=30)
    assert sent.status_code == 200, sent.text
    deadline = time.monotonic() + 30
    while not fetch_health(stack.url, stack.internal_headers())["index_lag"] and time.monotonic() < deadline:
        time.sleep(0.25)
    health = fetch_health(stack.url, stack.internal_headers())
    [(mailbox, lag)] = health["index_lag"].items()
    page.goto("/review")
    page.locator("nav.nav a", has_text="Health").click()
    expect(page.locator("h1")).to_contain_text(f"Health: {health['status']}")
    text = page.locator("main").inner_text()
    assert mailbox in text and f"{lag['search']['max_s']} s" in text and "Last callback given up" in text
    assert f"{lag['window_s']:g}" in text
    page.screenshot(path=str(shots / "console-health.png"), full_page=True)


def _plain_job() -> dict[str, Any]:
    return {
        "customer_id": f"cust-{uuid.uuid4().hex[:10]}",
        "event_type": "order_paid",
        "order_id": "1001",
        "channel": "transactional",
        "to": ["ann@example.com"],
        "subject": "Your receipt",
        "text": "Thanks for your order.",
    }
