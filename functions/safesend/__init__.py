"""safesend: Gmail sends that are safe to retry without a provider idempotency key.

The mailbox is the acceptance log: every job gets a deterministic Message-ID, and any ambiguous
attempt is settled by asking Gmail for that ID instead of guessing. The layers are the folders:
core/ (pure rules, no I/O), usecases/ (send, reconcile, sweep, review, notify over the ports),
adapters/ (Firestore or PostgreSQL, Cloud Tasks, Pub/Sub, Gmail, webhooks), entrypoints/ (HTTP API,
console, sign-in) and bootstrap/ (the wiring); config.py and logs.py serve every layer.
"""
