"""The pure core: the rules of a job (states, lifecycle, policy, classify, keys, MIME, reviews).

No I/O here: stdlib and other core modules only (plus `safesend.logs`), so every decision can be
tested without a network, and the layers contract (.importlinter) keeps it so.
"""
