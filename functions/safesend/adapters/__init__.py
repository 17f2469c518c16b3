"""Thin adapters from the ports in `safesend.core.ports` to Google Cloud services and Gmail."""
