"""Exception classes, one per way things go wrong that a handler must tell apart. Some become an
HTTP answer (validation 400, payload mismatch 422, review conflicts 409, store unavailable 503);
others stay inside (a lost compare-and-set, a failed enqueue or publish that the sweeper retries)."""

from __future__ import annotations


class SafesendError(Exception):
    """Base class for every error this package raises on purpose."""


class ConfigurationError(SafesendError):
    """The deployment is misconfigured (missing env, bad policy file): fail at start-up, loudly."""


class IndexMissingError(ConfigurationError):
    """A query needs a Firestore composite index that is not there (or still building): the sweeper
    would silently stop finding due jobs, so this is a loud configuration error, never 'nothing due'."""


class RequestValidationError(SafesendError):
    """The caller's request is invalid; `fields` maps each bad field to a reason (HTTP 400)."""

    def __init__(self, fields: dict[str, str]):
        super().__init__("invalid request: " + ", ".join(sorted(fields)))
        self.fields = dict(fields)


class UnknownChannelError(RequestValidationError):
    """The channel has no server-side policy, so we cannot know how to treat an unknown outcome."""

    def __init__(self, channel: str):
        super().__init__({"channel": f"unknown channel {channel!r}: not configured on the server"})
        self.channel = channel


class PayloadMismatchError(SafesendError):
    """The dedup key was already used with a different payload (HTTP 422), as in Stripe and the IETF draft."""

    def __init__(self, job_id: str):
        super().__init__(f"dedup key already used with a different payload (job {job_id})")
        self.job_id = job_id


class IllegalTransitionError(SafesendError):
    """A state change the job state machine does not allow: a bug, never a caller mistake."""

    def __init__(self, source: str, target: str):
        super().__init__(f"illegal job transition {source} -> {target}")
        self.source = source
        self.target = target


class StoreUnavailableError(SafesendError):
    """The job store could not be reached, or a write's outcome stayed unknown. Before a claim this
    is safe for the caller to retry (503); after it, the caller gets the last known state (202)."""


class CallbackNotStoredError(StoreUnavailableError):
    """A replay's callback_url could not be stored: nothing would ever call it, so the caller must
    retry (503 with Retry-After), not wait for a callback that cannot come."""


class ConcurrentUpdateError(SafesendError):
    """A compare-and-set lost the race: someone else advanced the job first. Never an error for the caller."""


class MailboxUnavailableError(SafesendError):
    """The mailbox search failed; a reconcile check must be retried later, never replaced by a guess."""


class MailboxNotConfiguredError(MailboxUnavailableError):
    """The mailbox that may hold a job's copy is no longer configured: no other mailbox's search can
    settle the job, and nothing may be resent until it is configured again (a person decides)."""


class HistoryExpiredError(SafesendError):
    """Gmail no longer has the change log from this startHistoryId (history.list answered 404: ids are
    typically valid for a week, rarely only hours). Not transient, so deliberately not a
    MailboxUnavailableError: asking again gives the same answer; settle by the rfc822msgid: search."""


class SchedulerError(SafesendError):
    """A Cloud Tasks enqueue failed; the sweeper still finds the job through next_check_at."""


class PublishError(SafesendError):
    """A review item could not be published; it stays due in the outbox and the sweeper tries again."""


class StaleReviewError(SafesendError):
    """A decision answers a review entry that is no longer the job's current one (HTTP 409)."""

    def __init__(self, job_id: str, review_id: str, current: str | None):
        super().__init__(
            f"review {review_id} is no longer current for job {job_id}"
            + (f" (now {current})" if current else " (the job is no longer in review)")
        )
        self.current = current


class DecisionConflictError(SafesendError):
    """Another decision was already made for this review entry (HTTP 409)."""


class DecisionNotAllowedError(SafesendError):
    """This decision does not apply to this job now, e.g. acknowledge on a non-duplicate (HTTP 409)."""
