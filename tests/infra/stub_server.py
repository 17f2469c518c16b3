"""The stub gcloud/terraform of cloudbuild_sim: a bash script that hands its call to a loopback
server in the test process, which records it (one JSON line: [name, *argv]) and answers from the
table (regex searched in "name argv...", output to stdout or a file, exit code).

A Python stub cost an interpreter start per call (~0.015 CPU-s, ~400 calls per run of
test_env_parity.py); bash with /dev/tcp starts in a few milliseconds and runs no other program
unless an answer has output (`cat`).

Wire: the stub sends NUL-terminated fields, the first their count, then its working directory,
its name and its arguments (bash strings hold no NUL); the server answers "<exit code> <bytes>\\n"
and the output."""

from __future__ import annotations

import json
import os
import re
import socketserver
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

STUB = r"""#!{bash}
exec 3<>"/dev/tcp/127.0.0.1/$STUB_PORT" || exit 97
printf '%s\0' "$(($# + 2))" "$PWD" "${0##*/}" "$@" >&3
IFS=' ' read -r code size <&3 || exit 98
if [ "$size" != 0 ]; then cat <&3; fi
exit "$code"
"""
TIMEOUT_S = 30  # one call's read and answer; the steps' own timeout bounds the whole run


class _Handler(socketserver.StreamRequestHandler):
    server: _Server

    def handle(self) -> None:
        self.connection.settimeout(TIMEOUT_S)
        count = int(self._field())
        cwd, name, *argv = [os.fsdecode(self._field()) for _ in range(count)]
        code, out = self.server.answer(Path(cwd), name, argv)
        data = out.encode()
        self.wfile.write(f"{code} {len(data)}\n".encode() + data)

    def _field(self) -> bytes:
        field = b""
        while not field.endswith(b"\0"):
            chunk = self.rfile.read(1)
            if not chunk:
                raise ConnectionError("the stub hung up mid-call")
            field += chunk
        return field[:-1]


class _Server(socketserver.TCPServer):
    allow_reuse_address = True

    def __init__(self, log: Path, answers: list) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.log, self.answers, self.lock = log, answers, threading.Lock()

    def answer(self, cwd: Path, name: str, argv: list[str]) -> tuple[int, str]:
        with self.lock:
            with open(self.log, "a") as log:
                log.write(json.dumps([name, *argv]) + "\n")
            line = " ".join([name, *argv])
            for pattern, out, code, *write_to in self.answers:
                if re.search(pattern, line):
                    if write_to:
                        (cwd / write_to[0]).write_text(out)
                        return code, ""
                    return code, out
            return 0, ""


@contextmanager
def serving(log: Path, answers: list) -> Iterator[int]:
    """A server recording to `log` and answering from `answers` (as JSON would hand them over); its port."""
    server = _Server(log, json.loads(json.dumps(answers)))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=TIMEOUT_S)
