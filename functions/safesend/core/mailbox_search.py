"""How a reviewer finds a job's copies in its sender mailbox, by the mailbox's kind (issue 22). Pure.

Why its own module: a Gmail mailbox has a search link (`rfc822msgid:`), a Microsoft 365 mailbox has
none. Outlook on the web documents deep links that compose or open an item by its id, not one that
searches by Message-ID (its search box does not match the Message-ID header), so a Graph job's
reviewers get the Message-ID and plain instructions instead of a link that finds nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

from .keys import bare_message_id

GMAIL_SEARCH_URL = "https://mail.google.com/mail/u/0/#search/"
GRAPH_MESSAGES_URL = "https://graph.microsoft.com/v1.0/users/{user}/mailFolders/SentItems/messages"


@dataclass(frozen=True)
class MailboxSearch:
    """What the review item, the chat messages, the email and the console offer. `url` and
    `sent_url` are set for Gmail only; `instructions` and `graph_query` for Graph only."""

    kind: str
    label: str
    url: str | None = None
    sent_url: str | None = None
    instructions: str | None = None
    graph_query: str | None = None


def gmail_search_link(message_id: str, sent_only: bool = False) -> str:
    """Opens the sender's mailbox on a search for this Message-ID. Our Message-IDs are predictable,
    so anyone can mail the mailbox a message carrying one: `sent_only` narrows to our sent mail."""
    query = f"rfc822msgid:{bare_message_id(message_id)}" + (" in:sent" if sent_only else "")
    return GMAIL_SEARCH_URL + quote(query, safe="")


def graph_query(message_id: str, user: str | None) -> str:
    """The Graph Explorer request that lists the Sent Items copies of this Message-ID (an OData
    string literal: a quote inside it is doubled, so the filter cannot be closed early)."""
    literal = message_id.replace("'", "''")
    url = GRAPH_MESSAGES_URL.format(user=user or "{mailbox address}")
    return f"GET {url}?$filter=internetMessageId eq '{literal}'"


def mailbox_search(kind: str, message_id: str, user: str | None = None) -> MailboxSearch:
    """The way to the copies of `message_id` in a mailbox of `kind` ("gmail" or "graph") whose
    address (Graph's user) is `user`. Any other kind gets Gmail's search, as before issue 22."""
    if kind != "graph":
        return MailboxSearch(
            kind="gmail",
            label="Search Gmail for this Message-ID",
            url=gmail_search_link(message_id),
            sent_url=gmail_search_link(message_id, sent_only=True),
        )
    where = f"the Sent Items of {user}" if user else "the mailbox's Sent Items"
    query = graph_query(message_id, user)
    instructions = (
        f"Outlook on the web has no link that searches by Message-ID. In Outlook, open {where}, "
        f"find the message (by subject and recipients) and compare its Message-ID {message_id} "
        f"(View message details); or list the copies in Graph Explorer: {query}. A copy still in "
        "Drafts has not gone out yet (transport takes it later); a non-delivery report in the Inbox "
        "means Exchange refused it after accepting the request."
    )
    return MailboxSearch(
        kind="graph",
        label="Find it in Outlook (Microsoft 365)",
        instructions=instructions,
        graph_query=query,
    )
