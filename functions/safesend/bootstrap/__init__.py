"""The composition root: builds the adapters from the settings and wires them into the use cases
(runtime.py), and warms the send function's instance (warmup.py)."""
