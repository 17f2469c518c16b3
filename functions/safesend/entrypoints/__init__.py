"""The entry points: the HTTP API, the reviewers' console and its sign-in. They parse and check
requests, call a use case, and shape the answer; no business rule lives here."""
