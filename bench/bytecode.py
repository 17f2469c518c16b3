"""Byte-compile a function's source as the deployed platform does, before timing its cold start.

Why: the Cloud Functions Python buildpack runs `python3 -m compileall -f -q .` over the function's
source at build time (GoogleCloudPlatform/buildpacks, cmd/python/functions_framework), so a
deployed instance imports main.py and safesend from bytecode. Where the bench runs with
PYTHONDONTWRITEBYTECODE=1 (or a tree never imported), every spawned instance compiled ~40 modules of
functions/ from source on each cold start instead: tens of milliseconds of CPU that production never
spends, charged to safesend and not to hello world's one-line main.py. Installed packages already
carry their bytecode (pip compiles them), as in the deployed image.
"""

from __future__ import annotations

import compileall
from pathlib import Path


class BytecodeError(RuntimeError):
    """A source file did not compile: the function would not deploy either."""


def compile_like_the_buildpack(source_dir: Path) -> None:
    """Write __pycache__/*.pyc for every module below `source_dir` that lacks an up-to-date one
    (git ignores them). Raises BytecodeError when a file does not compile."""
    if not compileall.compile_dir(str(source_dir), quiet=1, workers=1):
        raise BytecodeError(f"python -m compileall failed under {source_dir}")
