"""Helpers for tests that start a CLI server as a subprocess."""

from __future__ import annotations

import os
import select
import subprocess
import time


def read_line_bounded(proc: subprocess.Popen, timeout: float) -> str:
    """Read one stdout line without ever blocking past ``timeout``."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    deadline = time.monotonic() + timeout
    data = b""
    while b"\n" not in data and len(data) < 4096:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        readable, _, _ = select.select([fd], [], [], left)
        if not readable:
            break
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        data += chunk
    return data.decode("utf-8", "replace").strip()
