"""Issue 18.14: our Message-IDs are predictable, so anyone can mail the mailbox a message carrying one,
and "Search Gmail" finds it too. The console and the review evidence mark every hit that is not a
SENT copy, and offer a search of sent mail only."""

from __future__ import annotations

import html
from urllib.parse import unquote

from safesend.core.lifecycle import current_review_id
from safesend.core.review import review_item
from safesend.core.review_messages import chat_card, reviewer_email, slack_message
from safesend.core.states import State
from safesend.entrypoints.console import ReviewConsole
from tests.unit.conftest import make_world
from tests.unit.test_console import call, dev_auth, duplicate_job, timeout
from tests.unit.test_reviewers import CHAT_AND_SLACK


def planted_job():
    """A payments job whose answer was lost; before the mailbox is searched, someone mails the
    mailbox a message carrying the job's Message-ID (it arrives in the INBOX, not SENT)."""
    world = make_world(reviewers=CHAT_AND_SLACK)
    world.mailer.script.append(timeout())
    job, _ = world.service.submit(world.request(key="cust-9:payout:9", channel="payments"))
    planted = world.mailbox.accept(
        f"Message-ID: {job.message_id}\r\nSubject: Receipt\r\n\r\nplanted".encode(), labels=("INBOX", "UNREAD")
    )
    world.run_until_settled(job.id)
    stored = world.store.get(job.id)
    assert (stored.state, stored.review_reason) == (State.REVIEW, "ambiguous")
    assert [h["gmail_id"] for h in stored.mailbox_hits] == [planted.gmail_id]  # found by the search
    assert stored.known_copies == []  # and rightly not counted as a copy
    return world, stored, planted.gmail_id


def test_the_console_marks_a_hit_that_is_not_a_sent_copy():
    world, job, planted = planted_job()
    console = ReviewConsole(lambda: world.service, dev_auth)
    page, status, _ = call(console, "GET", f"/review/items/{job.id}")
    assert status == 200
    hit = page.split(f"<code>{planted}</code>", 1)[1].split("</li>", 1)[0]
    assert "NOT a sent copy" in hit and "sent copy</span>" not in hit
    assert "1 hit of the last search is NOT a sent copy" in page
    sent_only = [unquote(html.unescape(h)) for h in page.split('href="')[1:] if "in%3Asent" in h.split('"')[0]]
    assert sent_only and sent_only[0].startswith("https://mail.google.com/mail/u/0/#search/rfc822msgid:")


def test_sent_copies_are_marked_as_such_and_nothing_warns():
    world, job_id = duplicate_job()  # two SENT copies: a real duplicate, no planted mail
    stored = world.store.get(job_id)
    assert len(stored.known_copies) == 2
    console = ReviewConsole(lambda: world.service, dev_auth)
    page, _, _ = call(console, "GET", f"/review/items/{job_id}")
    assert page.count('<span class="hit sent">sent copy</span>') == 2
    assert "NOT a sent copy" not in page
    assert review_item(stored)["not_sent_hits"] == []


def test_the_review_evidence_names_the_hits_that_are_not_sent_copies():
    world, job, planted = planted_job()
    item = review_item(job)
    assert item["not_sent_hits"] == [planted] and item["known_copies"] == []
    assert item["gmail_sent_search_url"].endswith("%20in%3Asent")
    card, slack = chat_card(item, None), slack_message(item, None)
    _, mail = reviewer_email(item, None)
    for text in (str(card), str(slack), mail):
        assert "NOT sent copies" in text and planted in text
    world.service.notify(job.id, current_review_id(job))
    (posted,) = world.notifier.bodies_for("chat")
    assert planted in str(posted) and "NOT sent copies" in str(posted)
