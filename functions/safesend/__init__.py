"""safesend: Gmail sends that are safe to retry without a provider idempotency key.

The mailbox is the acceptance log: every job gets a deterministic Message-ID, and any ambiguous
attempt is settled by asking Gmail for that ID instead of guessing. The functional core (keys,
mime, states, lifecycle, classify, policy, validation, views, review) does no I/O; the adapters
for Firestore or PostgreSQL, Cloud Tasks, Pub/Sub, Gmail and chat webhooks are thin, and
service.py joins them.
"""
