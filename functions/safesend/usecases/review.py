"""Review and decide: the open review entries, and a person's decision on one (resend, mark
sent, cancel, acknowledge), recorded once after a fresh mailbox search."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from ..core import lifecycle
from ..core.errors import (
    ConcurrentUpdateError,
    RequestValidationError,
    StaleReviewError,
    StoreUnavailableError,
)
from ..core.model import Job
from ..core.review_messages import answered_card, decision_update
from ..core.states import State
from ..logs import log
from .jobs import MAX_RECORD_TRIES
from .send import SendJobs


@dataclass(frozen=True)
class DecisionOutcome:
    """What a reviewer's decision did. `applied` is False when it replays an earlier identical one."""

    job: Job
    applied: bool
    result: str  # resent, marked_sent, cancelled, acknowledged, refused_copy_found
    copies: list[dict[str, Any]]  # what the mailbox showed for the Message-ID


class ReviewDecisions(SendJobs):
    """The review use case: open reviews and a reviewer's decision."""

    def open_reviews(self, limit: int = 200) -> list[Job]:
        """Jobs waiting for a person (review, failed), oldest first: the console's list."""
        return list(self.store.find_open_reviews(limit))

    def decide(self, job_id: str, review_id: str, decision: str, reviewer: str, note: str = "") -> DecisionOutcome:
        """A person's decision on a job in review or failed. Checked against the review entry it
        answers (stale: StaleReviewError); the same decision again replays its first result; a
        resend asks the mailbox first and goes through the same attempt path as any send."""
        if decision not in lifecycle.Decision.ALL:
            raise RequestValidationError({"decision": f"one of {', '.join(lifecycle.Decision.ALL)}"})
        if len(note) > lifecycle.MAX_NOTE_CHARS:
            raise RequestValidationError({"note": f"at most {lifecycle.MAX_NOTE_CHARS} characters"})
        for _ in range(MAX_RECORD_TRIES):
            job = self.store.get(job_id)
            if job is None:
                raise StaleReviewError(job_id, review_id, None)
            prior = lifecycle.prior_decision(job, review_id, decision)
            if prior is not None:
                return DecisionOutcome(job, False, prior["result"], self._copies(job))
            hits = self._search(job)  # MailboxUnavailableError -> retry later
            owner = self.new_owner()
            decided, result = lifecycle.decide(
                job, review_id, decision, reviewer, note, hits, self.clock(), owner, self.timing
            )
            try:
                stored = self._cas(
                    job,
                    lifecycle.add_decision_notices(
                        decided, review_id, self._update_payloads(decided), self.clock(), self._answered(decided)
                    ),
                )
            except ConcurrentUpdateError:
                continue  # re-read: a double click or another reviewer; replay or conflict decides
            log(
                logging.WARNING,
                "reviewer decision",
                job_id=job_id,
                review_id=review_id,
                decision=decision,
                result=result,
                reviewer=reviewer,
            )
            if stored.state is State.SENDING:
                policy = self.policies.for_job(stored.channel)
                stored = self._attempt_loop(stored, owner, policy, self.monotonic() + self.request_budget_s)
            else:
                self._follow_up(stored)
            return DecisionOutcome(stored, result != "refused_copy_found", result, self._copies(stored))
        raise StoreUnavailableError(f"job {job_id}: decision not recorded after repeated conflicts")

    def _update_payloads(self, job: Job) -> dict[str, dict[str, Any]]:
        """The thread answer for every chat target the item went to."""
        record = job.decisions[-1]
        targets = {
            n["kind"]
            for n in job.notices
            if n["id"].startswith(f"{record['review_id']}:") and n["kind"] in ("chat", "slack")
        }
        return {t: decision_update(t, record, job.id) for t in sorted(targets)}

    @staticmethod
    def _answered(job: Job) -> dict[str, dict[str, Any] | None]:
        """The pending cards of the entry this decision closed: marked answered (an email: retired)."""
        record = job.decisions[-1]
        if lifecycle.current_review_id(job) == record["review_id"]:
            return {}  # refused: the entry is still open, its card still asks
        return {
            n["id"]: None if n["kind"] == "email" else answered_card(n["kind"], n["payload"], record)
            for n in lifecycle.open_cards(job, record["review_id"])
        }

    @staticmethod
    def _copies(job: Job) -> list[dict[str, Any]]:
        return [h for h in job.mailbox_hits if "SENT" in (h.get("label_ids") or [])] or [
            {"gmail_id": gmail_id} for gmail_id in job.known_copies
        ]
