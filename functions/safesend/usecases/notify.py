"""Notify: the job's outbox of notices (callbacks, chat and Slack cards, reviewers' email) and
their delivery with holds, deadlines and give-ups; the reviewers told of a review item or of a
mailbox's daily-limit incident. The reviewers' email goes out as a safesend job (send)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from ..core import lifecycle, signals
from ..core.errors import (
    ConcurrentUpdateError,
    PayloadMismatchError,
    PublishError,
    RequestValidationError,
    StoreUnavailableError,
)
from ..core.model import Delivery, Job
from ..core.review import review_item
from ..core.signals import emit
from ..core.validation import parse_send_request
from ..logs import log
from .jobs import HOLD_MARGIN_S, MAX_NOTICES_PER_ADVANCE, MAX_RECORD_TRIES
from .notice_watch import note
from .send import SendJobs


class ReviewerNotices(SendJobs):
    """The notify use case: deliver a job's notices, tell the reviewers of a review item."""

    def notify_incident(self, mailbox_id: str, incident: str, text: str | None = None) -> str:
        """A mailbox incident's review item arrived from Pub/Sub: post it to the reviewers' chats, one
        message per incident (threaded by mailbox). PublishError when a post failed: Pub/Sub delivers
        the item again (at least once; a chat that already has it may see it twice)."""
        until = incident.rsplit(":", 1)[-1]
        when = datetime.fromtimestamp(int(until), UTC).isoformat() if until.isdigit() else "up to 24 h"
        text = text or (
            f"safesend: mailbox {mailbox_id} reached Gmail's daily sending limit. Its jobs wait (queued) "
            f"until {when} or move to another mailbox of its pool; none is failed for it. See GET /mailboxes."
        )
        failed = []
        for kind in ("chat", "slack"):
            notice = {"id": incident, "kind": kind, "payload": {"text": text}, "thread": f"mailbox-{mailbox_id}"}
            if self.notifier is None or not self.notifier.can_deliver(notice):
                continue
            if not self.notifier.deliver(notice).ok:
                failed.append(kind)
        if failed:
            raise PublishError(f"mailbox incident {incident}: not delivered to {failed}")
        log(logging.WARNING, "mailbox incident told to the reviewers", mailbox=mailbox_id, incident=incident)
        return "mailbox_incident_told"

    def _deliver_notices(self, job: Job) -> tuple[Job, int]:
        """POST the due notices, then record what happened (re-applied over a lost race). At least
        once: a crash between the POST and the record sends the same body again. The hold on them
        lasts as long as the whole pass may take, so no second deliverer posts them meanwhile; a
        destination's notices go in order, and one that fails holds back the rest of its own."""
        due = lifecycle.due_notices(job, self.clock())
        unroutable = [n for n in due if not self._can_deliver(n)]
        if unroutable:
            job = self._give_up_unroutable(job, unroutable)
            due = [n for n in due if self._can_deliver(n)]
        due = due[:MAX_NOTICES_PER_ADVANCE]
        if not due:
            return job, 0
        pass_s = sum(self._notice_deadline_s(n) for n in due)
        try:  # hold them first, so a second deliverer (task, sweep, notify instance) posts nothing
            job = self._cas(
                job, lifecycle.claim_notices(job, [n["id"] for n in due], self.clock(), pass_s + HOLD_MARGIN_S)
            )
        except ConcurrentUpdateError:
            return self._reload(job), 0  # someone else moved the job: the next task or sweep delivers
        ends = self.monotonic() + pass_s
        results: dict[str, Delivery] = {}
        failed: set[tuple[str, str]] = set()
        for notice in due:
            if lifecycle.destination(notice) in failed or self.monotonic() >= ends:
                continue  # behind a failed one of its destination (order), or past the hold's budget
            results[notice["id"]] = delivery = self._post_notice(notice)
            if not delivery.ok:
                failed.add(lifecycle.destination(notice))
            log(
                logging.INFO if delivery.ok else logging.WARNING,
                "notice",
                event=None if delivery.ok else signals.NOTIFY_DELIVERY_FAILED,
                job_id=job.id,
                kind=notice["kind"],
                notice_id=notice["id"],
                ok=delivery.ok,
                status=delivery.status,
                detail=delivery.detail,
                retry_after_s=delivery.retry_after_s,
            )
        held = [n["id"] for n in due]
        current = job
        for _ in range(MAX_RECORD_TRIES):
            updated = lifecycle.record_deliveries(current, results, self.clock(), self.callback_horizon_s, held)
            try:
                stored = self._cas(current, updated)
            except ConcurrentUpdateError:
                current = self._reload(current)
                continue
            self._log_unanswered(stored, results)
            self._follow_up(stored)
            return stored, len(results)
        return current, len(results)

    def _can_deliver(self, notice: dict[str, Any]) -> bool:
        if notice.get("kind") == "email":
            return True  # safesend's own send path: every deliverer has it
        return self.notifier is not None and self.notifier.can_deliver(notice)

    def _notice_deadline_s(self, notice: dict[str, Any]) -> float:
        if notice.get("kind") == "email":
            return self.request_budget_s + self.send_timeout_s
        return self.notifier.deadline_s(notice) if self.notifier is not None else 0.0

    def _post_notice(self, notice: dict[str, Any]) -> Delivery:
        """One notice's try. Whatever it raises is that try's failure (retried, or overdue): raised
        out of the pass, it would lose the record of the notices already posted in it (posted again
        once the hold lapses) and hold its destination's thread for ever, with no alert."""
        try:
            if notice.get("kind") == "email":
                return self._email_reviewers(notice["payload"])
            assert self.notifier is not None  # noqa: S101 - _can_deliver let only routable notices through
            return self.notifier.deliver(notice)
        except Exception as exc:  # noqa: BLE001 - see above
            log(
                logging.ERROR,
                "notice post raised",
                notice_id=notice["id"],
                kind=notice.get("kind"),
                error_type=type(exc).__name__,  # its text may hold a webhook URL (a secret): not logged
            )
            return Delivery(False, None, f"unexpected {type(exc).__name__}")

    def _give_up_unroutable(self, job: Job, notices: list[dict[str, Any]]) -> Job:
        """Notices of a kind no route is configured for (switched off since they were queued) would
        wait for ever: given up, with the reason recorded on each."""
        kinds = sorted({n.get("kind") or "callback" for n in notices})
        reason = f"no {'/'.join(kinds)} route is configured"
        try:
            stored = self._cas(job, lifecycle.give_up_notices(job, [n["id"] for n in notices], reason, self.clock()))
        except ConcurrentUpdateError:
            return self._reload(job)
        for notice in notices:
            emit(
                signals.CALLBACK_GIVEN_UP,
                logging.ERROR,
                "notices given up: no route for their kind",
                job_id=job.id,
                kind=notice.get("kind") or "callback",
                notice_id=notice["id"],
                error=reason,
            )
            note(self.store, signals.CALLBACK_GIVEN_UP, self.clock(), job_id=job.id, kind=notice.get("kind"))
        return stored

    def _log_unanswered(self, stored: Job, results: dict[str, Delivery]) -> None:
        """Loud lines for what a person or a workflow may never hear: a callback given up, a
        reviewer notice still failing past the horizon (`reviewer_notice_overdue`, for alerts)."""
        for notice in stored.notices:
            if notice["id"] not in results or results[notice["id"]].ok:
                continue
            if notice.get("gave_up_at") is not None:
                emit(
                    signals.CALLBACK_GIVEN_UP,
                    logging.ERROR,
                    "callback notice given up",
                    job_id=stored.id,
                    kind=notice.get("kind") or "callback",
                    notice_id=notice["id"],
                    error=notice.get("last_error"),
                )
                note(self.store, signals.CALLBACK_GIVEN_UP, self.clock(), job_id=stored.id, kind=notice.get("kind"))
            elif notice.get("overdue_at") is not None:
                emit(
                    signals.REVIEWER_NOTICE_OVERDUE,
                    logging.ERROR,
                    "reviewer notice overdue: still retried, not delivered within the callback horizon",
                    job_id=stored.id,
                    kind=notice.get("kind"),
                    notice_id=notice["id"],
                    tries=notice.get("tries"),
                    error=notice.get("last_error"),
                )
                note(
                    self.store, signals.REVIEWER_NOTICE_OVERDUE, self.clock(), job_id=stored.id, kind=notice.get("kind")
                )

    def notify(self, job_id: str, review_id: str) -> tuple[Job | None, str]:
        """A review item arrived from Pub/Sub (at least once): queue one notice per reviewer target
        for this review entry, once, and deliver them. Queued notices are retried by the outbox, so
        the Pub/Sub message can be acknowledged as soon as they are stored."""
        job = self.store.get(job_id)
        if job is None:
            return None, "not_found"
        if lifecycle.current_review_id(job) != review_id:
            return job, "stale"  # decided, or a newer review entry whose own item follows
        targets = self.reviewers.for_job(self.policies.for_job(job.channel), job.dedup_key)
        item = review_item(job, include_body=False, search=self.senders.search_for(job))
        for _ in range(MAX_RECORD_TRIES):
            changed = lifecycle.add_review_notices(job, review_id, self.reviewers.payloads(targets, item), self.clock())
            if changed is None:
                break
            try:
                job = self._cas(job, changed)
                break
            except ConcurrentUpdateError:
                job = self._reload(job)
                if lifecycle.current_review_id(job) != review_id:
                    return job, "stale"
        job, _ = self._deliver_notices(job)
        log(logging.INFO, "reviewers notified", job_id=job.id, review_id=review_id, targets=targets)
        return job, "notified"

    def _email_reviewers(self, payload: dict[str, Any]) -> Delivery:
        """The reviewers' email, as the outbox stored it, through safesend's own send path (keyed by
        the review id in the reserved `review:` key space): a repeat is a replay."""
        try:
            request = parse_send_request(payload, self.default_from, reserved_ok=True)
            self.submit(request)
        except PayloadMismatchError:
            return Delivery(True, None, "already sent with other text (replay)")
        except RequestValidationError as exc:
            return Delivery(False, None, f"invalid reviewer email: {sorted(exc.fields)}")
        except StoreUnavailableError as exc:
            return Delivery(False, None, f"store unavailable: {exc}"[:200])
        return Delivery(True, None)
