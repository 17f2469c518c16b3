"""safesend: Gmail sends that are safe to retry without a provider idempotency key.

The mailbox is the acceptance log: every job gets a deterministic Message-ID,
and any ambiguous attempt is settled by asking Gmail for that ID instead of
guessing. The functional core (keys, mime, states, classify, policy, decide)
has no I/O; adapters for Firestore, Cloud Tasks, Pub/Sub and Gmail are thin.
"""

__version__ = "0.1.0"
