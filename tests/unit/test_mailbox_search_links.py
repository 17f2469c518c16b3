"""Issue 22: reviewers find a job's copies where its mailbox is. A Microsoft 365 (Graph) job's review
item, chat messages, email and console page carry the Message-ID and instructions (Outlook on the
web has no link that searches by Message-ID), never a Gmail search link; a Gmail job's keep theirs."""

from __future__ import annotations

import json
from html import unescape
from typing import Any

from safesend.core.lifecycle import current_review_id
from safesend.core.mailbox_search import graph_query, mailbox_search
from safesend.core.mailboxes import DEFAULT_MAILBOX_ID, PRESETS, Mailbox, MailboxDirectory, Pools
from safesend.core.review_messages import chat_card, reviewer_email, slack_message
from safesend.core.states import State
from safesend.entrypoints.console import ReviewConsole
from tests.unit.conftest import make_world
from tests.unit.test_console import call, dev_auth
from tests.unit.test_reviewers import ALL_TARGETS, TIMEOUT

GMAIL = "mail.google.com"
ADDRESS = "shop@example.com"


def graph_directory() -> MailboxDirectory:
    mailbox = Mailbox(
        DEFAULT_MAILBOX_ID, ADDRESS, user_id=ADDRESS, limits=PRESETS["unlimited"], any_sender=True, kind="graph"
    )
    return MailboxDirectory([mailbox], Pools(default=(DEFAULT_MAILBOX_ID,)))


def review(kind: str) -> tuple[Any, Any]:
    """A job in review whose mailbox is of `kind`, its item published and notified to every target."""
    world = make_world(script=[TIMEOUT], reviewers=ALL_TARGETS)
    if kind == "graph":
        world.service.senders.directory = graph_directory()
    world.pushed = 10**9  # this test plays the push subscription itself
    job, _ = world.service.submit(world.request(channel="payments"))
    for _ in range(20):
        job = world.store.get(job.id)
        if job.state is State.REVIEW and job.review_published_at is not None:
            break
        world.clock.advance(max(0.0, (job.next_check_at - world.clock()).total_seconds()) + 0.001)
        world.service.advance(job.id)
    world.service.notify(job.id, current_review_id(job))
    return world, world.store.get(job.id)


def texts(world: Any, job: Any) -> dict[str, str]:
    """What the reviewers got: the published item, the Chat card, the Slack message, the email."""
    email = next(j for j in world.store.all() if j.dedup_key == f"review:{current_review_id(job)}")
    return {
        "item": json.dumps(world.publisher.items[-1][0]),
        "chat": json.dumps(world.notifier.bodies_for("chat")),
        "slack": json.dumps(world.notifier.bodies_for("slack")),
        "email": email.payload["text"],
    }


def page(world: Any, job_id: str) -> str:
    auth = dev_auth()
    console = ReviewConsole(lambda: world.service, lambda: auth)
    body, status, _ = call(console, "GET", f"/review/items/{job_id}")
    assert status == 200
    return body


def test_a_graph_job_gets_instructions_and_no_gmail_link_everywhere():
    world, job = review("graph")
    query = graph_query(job.message_id, ADDRESS)
    item = world.publisher.items[-1][0]
    assert item["mailbox_kind"] == "graph" and item["gmail_search_url"] is None
    assert item["graph_query"] == query and ADDRESS in query and job.message_id in query
    for where, text in texts(world, job).items():
        assert GMAIL not in text, where
        assert "Outlook on the web has no link that searches by Message-ID" in text, where
        assert "internetMessageId eq" in text, where
    html = page(world, job.id)
    assert GMAIL not in html and "Search Gmail" not in html
    assert f"internetMessageId eq '{job.message_id}'" in unescape(html)
    assert job.message_id not in html  # the query and the Message-ID, autoescaped
    assert "Graph Explorer" in html


def test_a_gmail_job_keeps_its_gmail_search_link_everywhere():
    world, job = review("gmail")
    item = world.publisher.items[-1][0]
    assert item["mailbox_kind"] == "gmail" and item["gmail_search_url"].startswith(f"https://{GMAIL}/")
    for where, text in texts(world, job).items():
        assert GMAIL in text, where
        assert "internetMessageId" not in text, where
    html = page(world, job.id)
    assert "Search Gmail for this Message-ID" in html and "Graph Explorer" not in html


def test_graph_instructions_are_escaped_for_each_target():
    search = mailbox_search("graph", "<job-1@mail.example.com>", ADDRESS)
    item = {
        "job_id": "j" * 32,
        "review_id": "j:1",
        "message_id": "<job-1@mail.example.com>",
        "gmail_search_url": None,
        "search_label": search.label,
        "search_instructions": search.instructions,
    }
    card = json.dumps(chat_card(item, None))
    assert "&lt;job-1@mail.example.com&gt;" in card and "<job-1@" not in card
    assert "buttonList" not in card  # no console link, no search link: no empty button list
    slack = slack_message(item, None)
    assert "&lt;job-1@mail.example.com&gt;" in json.dumps(slack) and "<job-1@" not in json.dumps(slack)
    assert all(block["type"] != "actions" for block in slack["blocks"])  # Slack refuses an empty one
    _, mail = reviewer_email(item, None)
    assert "Search the mailbox" not in mail and f"/users/{ADDRESS}/mailFolders/SentItems" in mail


def test_a_quote_cannot_close_the_graph_filter():
    assert graph_query("<a'b@x>", ADDRESS).endswith("internetMessageId eq '<a''b@x>'")
