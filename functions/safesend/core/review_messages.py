"""What reviewers read in their chat: a Google Chat card and a Slack message per review entry, and
the line that answers it once someone decided. Built from the review item (review.py), so they
carry the same evidence and the same privacy: masked recipients, never a body unless the channel
opted in (and even then not in chat: bodies stay in the console).

Every value is attacker-influenced (a subject, a dedup key, a reviewer's note). A Google Chat card's
decoratedText renders <a href>, <b> and <font>, so every value in a card is HTML-escaped; a Chat
text message turns `<users/all>` into a mention and `<url|text>` into a link, so its angle brackets
become look-alikes (U+2039, U+203A). Slack's mrkdwn is escaped with its own three entities."""

from __future__ import annotations

import copy
import html
from datetime import datetime
from typing import Any
from urllib.parse import quote

from ..logs import mask_emails

MAX_FIELD_CHARS = 300  # chat cards truncate long values anyway; keep the payload small and stable
_CHAT_TEXT_SYNTAX = str.maketrans({"<": "\u2039", ">": "\u203a"})  # single angle quotation marks


def console_link(console_url: str | None, job_id: str) -> str | None:
    return f"{console_url.rstrip('/')}/review/items/{quote(job_id)}" if console_url else None


def _recipients(item: dict[str, Any]) -> str:
    recipients = item.get("recipients") or {}
    parts = [
        f"{kind}: {', '.join(mask_emails(list(recipients.get(kind) or [])))}"
        for kind in ("to", "cc", "bcc")
        if recipients.get(kind)
    ]
    return "; ".join(parts) or "(none)"


def _short(value: Any) -> str:
    text = "" if value is None else str(value)
    return text if len(text) <= MAX_FIELD_CHARS else text[: MAX_FIELD_CHARS - 1] + "…"


def _facts(item: dict[str, Any]) -> list[tuple[str, str]]:
    error = item.get("last_error") or {}
    copies = item.get("known_copies") or []
    return [
        ("Reason", _short(item.get("reason"))),
        ("Channel", _short(item.get("channel"))),
        ("Recipients", _short(_recipients(item))),
        ("Subject", _short(item.get("subject"))),
        ("Attempts", str(item.get("attempts"))),
        ("Last error", _short(f"{error.get('code')} ({error.get('bucket')})" if error else "none")),
        ("Copies in the mailbox", _short(", ".join(copies) if copies else "none found")),
        ("Message-ID", _short(item.get("message_id"))),
        *_not_sent_fact(item),
    ]


def _not_sent_fact(item: dict[str, Any]) -> list[tuple[str, str]]:
    """Search hits that are not SENT copies (received or planted mail with our Message-ID)."""
    others = item.get("not_sent_hits") or []
    if not others:
        return []
    return [("NOT sent copies (received or planted: not proof)", _short(", ".join(others)))]


def _how_to_find(item: dict[str, Any]) -> list[tuple[str, str]]:
    """A mailbox without a search link (Graph): the instructions, as one more fact. Not shortened:
    cut, the query would not run; its parts are the configured address and our Message-ID."""
    instructions = item.get("search_instructions")
    return [(str(item.get("search_label") or "Find it in the mailbox"), str(instructions))] if instructions else []


def chat_card(item: dict[str, Any], console_url: str | None) -> dict[str, Any]:
    """Google Chat incoming-webhook message (cardsV2), one per review entry (cardId = review id)."""
    search_url = item.get("gmail_search_url")
    buttons = [{"text": "Search the mailbox", "onClick": {"openLink": {"url": search_url}}}] if search_url else []
    link = console_link(console_url, item["job_id"])
    if link:
        buttons.insert(0, {"text": "Open in the console", "onClick": {"openLink": {"url": link}}})
    widgets: list[dict[str, Any]] = [
        {"decoratedText": {"topLabel": label, "text": _chat_html(value), "wrapText": True}}
        for label, value in [*_facts(item), *_how_to_find(item)]
    ]
    if buttons:
        widgets.append({"buttonList": {"buttons": buttons}})
    return {
        "text": _chat_text(f"safesend: job {item['job_id']} needs a person ({item.get('reason')})"),
        "cardsV2": [
            {
                "cardId": item["review_id"].replace(":", "-"),
                "card": {
                    "header": {
                        "title": _chat_html(f"Review: {_short(item.get('reason'))}"),
                        "subtitle": _chat_html(_short(f"{item.get('channel')} · {item.get('dedup_key')}")),
                    },
                    "sections": [{"widgets": widgets}],
                },
            }
        ],
    }


def slack_message(item: dict[str, Any], console_url: str | None) -> dict[str, Any]:
    """Slack incoming-webhook message (Block Kit)."""
    link = console_link(console_url, item["job_id"])
    search_url = item.get("gmail_search_url")
    fields = [{"type": "mrkdwn", "text": f"*{label}*\n{_slack_escape(value)}"} for label, value in _facts(item)]
    how = [
        {"type": "section", "text": {"type": "mrkdwn", "text": f"*{label}*\n{_slack_escape(value)}"}}
        for label, value in _how_to_find(item)
    ]
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": f"safesend review: {_short(item.get('reason'))}"}},
        {"type": "section", "fields": fields[:10]},
        *how,
        {
            "type": "actions",
            "elements": [
                *(
                    [{"type": "button", "text": {"type": "plain_text", "text": "Open in the console"}, "url": link}]
                    if link
                    else []
                ),
                *(
                    [
                        {
                            "type": "button",
                            "text": {"type": "plain_text", "text": "Search the mailbox"},
                            "url": search_url,
                        }
                    ]
                    if search_url
                    else []
                ),
            ],
        },
    ]
    if not blocks[-1]["elements"]:
        blocks.pop()  # Slack refuses an actions block without elements
    return {"text": f"safesend: job {item['job_id']} needs a person ({item.get('reason')})", "blocks": blocks}


def decision_line(record: dict[str, Any]) -> str:
    at = record.get("at")
    when = at.strftime("%Y-%m-%d %H:%M UTC") if isinstance(at, datetime) else str(at)
    verb = {
        "resent": "resent",
        "marked_sent": "marked sent",
        "cancelled": "cancelled",
        "acknowledged": "acknowledged",
        "refused_copy_found": "resend refused (a copy was found)",
    }
    return f"{verb.get(record['result'], record['result'])} by {mask_emails(record['reviewer'])}, {when}" + (
        f": {_short(record.get('note'))}" if record.get("note") else ""
    )


def decision_update(target: str, record: dict[str, Any], job_id: str) -> dict[str, Any]:
    """The answer in the item's thread (Chat) or as a follow-up message (Slack: webhooks cannot thread)."""
    line = decision_line(record)
    if target == "slack":
        return {"text": f"safesend job {job_id}: {_slack_escape(line)}"}
    return {"text": _chat_text(line)}


def answered_card(target: str, payload: dict[str, Any], record: dict[str, Any]) -> dict[str, Any]:
    """A card not posted yet when its entry was answered: posted marked as answered, so nobody is
    asked for a decision already taken (the decision's own line follows it in the thread)."""
    return _marked_card(target, payload, "Answered", decision_line(record))


def superseded_card(target: str, payload: dict[str, Any]) -> dict[str, Any]:
    """A card not posted yet when a newer review entry of its job replaced it: posted marked as
    superseded, so nobody answers an entry the console no longer takes (the new card follows)."""
    return _marked_card(target, payload, "Superseded", "a newer review of this job follows; decide on that one")


def _marked_card(target: str, payload: dict[str, Any], mark: str, line: str) -> dict[str, Any]:
    """The line may carry a reviewer's note: escaped for the target like every other value."""
    marked = copy.deepcopy(payload)
    if target == "slack":
        marked["text"] = f"{payload.get('text', '')} ({mark.lower()}: {_slack_escape(line)})"
        answer = {"type": "section", "text": {"type": "mrkdwn", "text": f"*{mark}:* {_slack_escape(line)}"}}
        marked["blocks"] = [answer, *marked.get("blocks", [])]
    else:
        marked["text"] = f"{payload.get('text', '')} ({mark.lower()}: {_chat_text(line)})"
        for card in marked.get("cardsV2", []):
            header = card.get("card", {}).get("header", {})
            header["title"] = _chat_html(f"{mark}: {_short(line)}")
    return marked


def reviewer_email(item: dict[str, Any], console_url: str | None) -> tuple[str, str]:
    """(subject, text) of the email to the reviewers' address, sent through safesend's own send path."""
    link = console_link(console_url, item["job_id"])
    lines = [f"{label}: {value}" for label, value in _facts(item)]
    search_url = item.get("gmail_search_url")
    lines += [f"Search the mailbox: {search_url}"] if search_url else []
    lines += [f"{label}: {value}" for label, value in _how_to_find(item)] + ([f"Console: {link}"] if link else [])
    return f"[safesend] review needed: {_short(item.get('reason'))} ({item['job_id'][:8]})", "\n".join(lines) + "\n"


def _slack_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _chat_html(text: str) -> str:
    """A value inside a Chat card: text, never markup (a fake "Open in the console" link)."""
    return html.escape(text)


def _chat_text(text: str) -> str:
    """A Chat text message: no `<users/all>` mention, no `<url|text>` link can form."""
    return text.translate(_CHAT_TEXT_SYNTAX)
