"""The use cases: send, reconcile, sweep, review and decide, notify, health. Each works over the
ports (core/ports.py) and the core's rules; the adapters are injected, never imported."""
