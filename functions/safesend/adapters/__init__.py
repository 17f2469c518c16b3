"""Thin adapters from the ports in `safesend.ports` to Google Cloud services and Gmail."""
