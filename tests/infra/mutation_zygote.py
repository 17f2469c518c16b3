"""A zygote for the mutation suite's nested pytest runs (tests/infra/test_mutations.py): one process
that has imported the interpreter's and pytest's modules once, and forks a child per run.

Each of the ~96 nested runs started a new interpreter and imported pytest and its plugins before it
collected a single test: ~0.8 of a run's ~2.7 CPU-s. Forked from a process that has done it, a child
starts with those modules loaded and imports only what the copy holds (its tests/infra modules, its
functions/, with its own sys.path and cwd), exactly as `python -m pytest` would in that copy.

Only modules from outside the repository are imported here, never a file of a copy or of this
checkout: this file is run as a script (`python mutation_zygote.py`) and drops its own folder from
sys.path first, so nothing a copy mutates can be in a child's memory before the child imports it.
The interpreter's start-up settings (PYTHONPYCACHEPREFIX, PYTHONDONTWRITEBYTECODE, the hash seed)
are the zygote's, started with the nested runs' environment; everything else a run reads at run
time (os.environ, cwd, argv) is the run's own.

Protocol, one JSON object per line: a request {"argv", "cwd", "env", "out", "err"} on stdin (argv:
pytest's arguments; out/err: files for the child's stdout and stderr) is answered {"pid": N} once
the child runs, then {"status": exit code} when it ends. One run at a time per zygote; EOF on stdin
ends the zygote. The client side is ZygotePool below (imported by the suite, not by the zygote).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, NoReturn

# The standard modules the infra checks and pytest import (a failed import here costs nothing: the
# child imports it itself). Imported in the zygote only when it runs as a script, below.
# Not pytest_timeout: a plugin named with -p is imported by pytest itself, to rewrite its asserts.
PRELOAD = (
    "pytest",
    "_pytest.legacypath",
    "_pytest.doctest",
    "ast",
    "base64",
    "concurrent.futures",
    "copy",
    "fnmatch",
    "glob",
    "hashlib",
    "json",
    "marshal",
    "shlex",
    "shutil",
    "socketserver",
    "subprocess",
    "tempfile",
    "threading",
    "uuid",
    "zipfile",
)


def serve(stdin: Any, stdout: Any) -> None:
    """Answers run requests until stdin ends: a child per request, its pid, then its exit status."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # an interrupt is for the run (sent to its pid), not us
    for line in stdin:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child: its SystemExit ends this process, never the loop
            run_child(request)
        stdout.write(json.dumps({"pid": pid}) + "\n")
        stdout.flush()
        _, status = os.waitpid(pid, 0)
        stdout.write(json.dumps({"status": os.waitstatus_to_exitcode(status)}) + "\n")
        stdout.flush()


def run_child(request: dict[str, Any]) -> NoReturn:
    """`python -m pytest ARGV` in request's cwd with request's environment, in this forked process.
    It ends as that interpreter would: SystemExit with pytest's code, so the interpreter's shutdown
    (atexit handlers, flushing) runs as in a process of its own."""
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for name, fd in (("out", 1), ("err", 2)):
            target = os.open(request[name], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(target, fd)
            os.close(target)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.path.insert(0, os.getcwd())  # as `python -m` puts the working directory first
        sys.argv = ["pytest", *request["argv"]]
        import pytest

        code = int(pytest.main(request["argv"]))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - as an interpreter would: the traceback on stderr, exit 1
        import traceback

        traceback.print_exc()
        code = 1
    raise SystemExit(code)


# --------------------------------------------------------------------------- the client side
class LineChannel:
    """Lines from a pipe, each read within a timeout. Read from the file descriptor itself: a buffered
    reader may take the next line (a fast run's exit status right behind its pid) into its buffer,
    where select() no longer sees it, and the run would wait out its whole timeout."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.pending = b""

    def read_line(self, timeout: float) -> str | None:
        """The next line (without its newline), None when `timeout` passes first; OSError at EOF."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.pending:
            ready, _, _ = select.select([self.fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                return None
            chunk = os.read(self.fd, 65536)
            if not chunk:
                raise OSError("the pipe closed before a whole line")
            self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        return line.decode()


class Zygote:
    """One zygote process and the channel its answers come on."""

    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, __file__], env=env, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        assert self.process.stdout is not None
        self.answers = LineChannel(self.process.stdout.fileno())

    def ask(self, request: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(request).encode() + b"\n")
        self.process.stdin.flush()

    def answer(self, timeout: float) -> dict[str, Any] | None:
        """The zygote's next answer, None when `timeout` passes first; OSError when it died."""
        try:
            line = self.answers.read_line(timeout)
        except OSError as exc:
            raise OSError(f"the mutation zygote ended (exit {self.process.poll()})") from exc
        return None if line is None else dict(json.loads(line))


class ZygoteRun:
    """One nested run in a zygote's child, with the part of subprocess.Popen's interface run_checks
    uses: communicate(timeout) -> (stdout, stderr), send_signal, kill."""

    def __init__(self, pool: ZygotePool, zygote: Zygote, request: dict[str, Any]) -> None:
        self.pool, self.zygote, self.request = pool, zygote, request
        zygote.ask(request)
        answer = zygote.answer(timeout=60)
        if answer is None or "pid" not in answer:
            raise OSError(f"the mutation zygote did not start a run: {answer}")
        self.pid: int = answer["pid"]
        self.returncode: int | None = None

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        if self.returncode is None:
            answer = self.zygote.answer(timeout if timeout is not None else 24 * 3600)
            if answer is None:
                raise subprocess.TimeoutExpired(["pytest", *self.request["argv"]], timeout or 0)
            self.returncode = int(answer["status"])
            self.pool.release(self.zygote)
        out, err = (Path(self.request[name]) for name in ("out", "err"))
        texts = out.read_text(errors="replace"), err.read_text(errors="replace")
        out.unlink(missing_ok=True)
        err.unlink(missing_ok=True)
        return texts

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class ZygotePool:
    """Zygotes started on demand (one per run at a time), each serving runs one after another."""

    def __init__(self, env: dict[str, str], scratch: Path) -> None:
        self.env, self.scratch = env, scratch
        self.idle: list[Zygote] = []
        self.every: list[Zygote] = []
        self.lock = threading.Lock()
        self.count = 0
        scratch.mkdir(parents=True, exist_ok=True)

    def popen(self, argv: list[str], *, cwd: Path, env: dict[str, str], **_: Any) -> ZygoteRun:
        """Like subprocess.Popen(argv, cwd=, env=, stdout=PIPE, stderr=PIPE, text=True) for
        `[sys.executable, "-m", "pytest", ARGS...]`; any other command is refused."""
        if argv[:3] != [sys.executable, "-m", "pytest"]:
            raise ValueError(f"the zygote runs pytest only, not {argv[:3]}")
        with self.lock:
            if self.idle:
                zygote = self.idle.pop()
            else:
                zygote = Zygote(self.env, self.scratch)
                self.every.append(zygote)
            self.count += 1
            stem = self.scratch / f"run-{self.count}"
        request = {"argv": argv[3:], "cwd": str(cwd), "env": env, "out": f"{stem}.out", "err": f"{stem}.err"}
        return ZygoteRun(self, zygote, request)

    def release(self, zygote: Zygote) -> None:
        with self.lock:
            if zygote.process.poll() is None:
                self.idle.append(zygote)

    def close(self, timeout: float = 30) -> None:
        """Ends every zygote (EOF on its stdin); one still serving a run after `timeout` is killed."""
        deadline = time.monotonic() + timeout
        for zygote in self.every:
            with contextlib.suppress(OSError):
                if zygote.process.stdin is not None:
                    zygote.process.stdin.close()
        for zygote in self.every:
            try:
                zygote.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                zygote.process.kill()
                zygote.process.wait(timeout=30)
            if zygote.process.stdout is not None:
                zygote.process.stdout.close()


if __name__ == "__main__":
    # This folder is a checkout's tests/infra: off sys.path before anything is imported from it.
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") not in (here, os.getcwd())]
    import importlib

    for module in PRELOAD:
        with contextlib.suppress(Exception):
            importlib.import_module(module)
    serve(sys.stdin, sys.stdout)
