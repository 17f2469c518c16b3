"""Developer tools that are not part of the deployed service (see each package's docstring)."""
