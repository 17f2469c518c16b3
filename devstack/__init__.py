"""Local dev tools (Gmail API simulator, fault-injecting relay) for exercising safesend's retry safety."""
