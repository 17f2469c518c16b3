"""Who hears of a job that needs a person: the reviewer targets configured on the server, per
safesend channel, and what each of them is sent for one review entry."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .keys import REVIEW_EMAIL_KEY_PREFIX
from .policy import ChannelPolicy
from .review_messages import chat_card, reviewer_email, slack_message

# Notification emails go out as safesend jobs themselves; their own review items must never email
# again (a job about a job about a job...): their dedup keys carry REVIEW_EMAIL_KEY_PREFIX (reserved).


@dataclass(frozen=True)
class ReviewerTargets:
    """What the deployment configured: chat/slack webhooks exist, an email address, the console."""

    configured: frozenset[str] = frozenset()  # subset of policy.NOTIFY_TARGETS
    email_to: str | None = None
    email_channel: str | None = None
    console_url: str | None = None
    # Where notify is deployed (the sweeper's setting, independent of which targets it may post to):
    # a review item not notified by then is published again. 0: no notify function, never republish.
    notify_timeout_s: float = 0.0

    @property
    def enabled(self) -> bool:
        return bool(self.configured)

    def for_job(self, policy: ChannelPolicy, dedup_key: str) -> list[str]:
        wanted = self.configured if policy.notify is None else self.configured & set(policy.notify)
        if dedup_key.startswith(REVIEW_EMAIL_KEY_PREFIX):
            wanted = wanted - {"email"}
        return sorted(wanted)

    def payloads(self, targets: list[str], item: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """The notices of one review entry, one per target. The email's is the whole send request
        (safesend's own send path delivers it, keyed by the review id): stored once, so a repeat
        of the entry's email is always a replay, whatever the evidence says by then."""
        render = {"chat": chat_card, "slack": slack_message}
        found = {t: render[t](item, self.console_url) for t in targets if t in render}
        if "email" in targets and self.email_to:
            subject, text = reviewer_email(item, self.console_url)
            found["email"] = {
                "dedup_key": f"{REVIEW_EMAIL_KEY_PREFIX}{item['review_id']}",
                "channel": self.email_channel,
                "to": self.email_to,
                "subject": subject,
                "text": text,
            }
        return found
