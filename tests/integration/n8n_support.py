"""Drive a real n8n (installed by scripts/n8n-install.sh, outside the repo) headless from tests.

- `ensure_n8n()`: the n8n wrapper, installing it first when missing (minutes, once per machine).
- `N8nFolder`: one `N8N_USER_FOLDER` (its own SQLite database): import workflows and credentials,
  publish, list, with n8n's CLI.
- `N8nServer`: `n8n start` on a loopback port: production webhooks of published workflows, Wait
  nodes that resume "On Webhook Call", and manual runs of Manual Trigger workflows as the editor's
  "Execute workflow" button starts them (`execute()`: n8n's REST API, the run data read back through
  its public API). One server runs a module's workflows: an `n8n execute` per run booted n8n each time
  (~3 CPU-s and seconds of wall per run, about 30 runs a gate).
- `CountingProxy`: a byte-exact HTTP forwarder in front of safesend that records every request,
  so a test can say "the service saw exactly one request" without reading logs.
- `load_example()`: an example workflow from examples/n8n/, with the local send URL pointed at
  the stack and, where asked, the sample orders replaced: exactly what the README tells a user
  to change.

Every process is started in its own process group and stopped by that group; every wait is bounded.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import random
import secrets
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tests.loopback_http import LoopbackHttpServer, QuietHandler

REPO_ROOT = Path(__file__).resolve().parents[2]
INSTALL_SCRIPT = REPO_ROOT / "scripts" / "n8n-install.sh"
EXAMPLES = REPO_ROOT / "examples" / "n8n"
EXAMPLE_BASE_URL = "http://127.0.0.1:8080"  # run-local.sh's default, as written in the examples
INSTALL_TIMEOUT_S = 1500
DISABLED_MODULES = ",".join(
    (
        "mcp-registry",
        "insights",
        "chat-hub",
        "instance-ai",
        "agents",
        "agent-evals",
        "workflow-builder",
        "community-packages",
    )
)


UNREGISTERED_RETRY_S = 20.0  # N8nServer.post_webhook: how long a 404 "not registered" is retried
REST_TIMEOUT_S = 60.0  # one call to n8n's REST or public API
OWNER_EMAIL = "owner@example.com"  # the owner N8nServer.sign_in sets up in a new folder
UNFINISHED = frozenset({"new", "running", "waiting", "unknown"})  # n8n execution statuses before the end


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def free_port() -> int:
    """A free loopback port OUTSIDE the ephemeral range: a port the kernel hands out for outgoing
    connections can be taken between this check and n8n's bind (seen: the runner broker's port)."""
    low, high = _ephemeral_range()
    candidates = [port for port in range(20000, 65000) if not low <= port <= high] or list(range(20000, 30000))
    rng = random.SystemRandom()
    for _ in range(200):
        port = rng.choice(candidates)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free loopback port found outside the ephemeral range")


def ensure_n8n(timeout_s: float = INSTALL_TIMEOUT_S) -> Path:
    """Path of the n8n wrapper; runs scripts/n8n-install.sh (a no-op when installed)."""
    explicit = os.environ.get("SAFESEND_N8N_BIN")
    if explicit:
        path = Path(explicit)
        if not os.access(path, os.X_OK):
            raise RuntimeError(f"SAFESEND_N8N_BIN={explicit} is not an executable")
        return path
    proc = subprocess.Popen(
        ["bash", str(INSTALL_SCRIPT)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise RuntimeError(f"scripts/n8n-install.sh did not finish within {timeout_s:.0f} s") from None
    if proc.returncode != 0:
        raise RuntimeError(f"scripts/n8n-install.sh failed ({proc.returncode}):\n{err[-4000:]}")
    if err.strip():
        print(err, end="")  # the first install says what it did and how long it took
    return Path(out.strip().splitlines()[-1])


def _kill_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def stop_group(pgid: int, timeout_s: float = 10.0, leader: subprocess.Popen | None = None) -> None:
    """SIGTERM the whole group, then SIGKILL whatever is left after timeout_s. `leader` (our child,
    the group's first process) is reaped while waiting: a zombie still counts as a group member."""
    _kill_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if leader is not None:
            leader.poll()
        if not _group_alive(pgid):
            return
        time.sleep(0.1)
    _kill_group(pgid, signal.SIGKILL)
    if leader is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            leader.wait(timeout=5)


# --------------------------------------------------------------------------- workflows
def load_example(
    name: str, base_url: str, orders: list[dict[str, Any]] | None = None, **replace: str
) -> dict[str, Any]:
    """examples/n8n/<name>.json with the send URL pointed at base_url (and sample orders replaced)."""
    text = (EXAMPLES / f"{name}.json").read_text(encoding="utf-8")
    text = text.replace(EXAMPLE_BASE_URL, base_url.rstrip("/"))
    for old, new in replace.items():
        text = text.replace(old, new)
    workflow = json.loads(text)
    if orders is not None:
        node = node_named(workflow, "Sample orders")
        node["parameters"]["jsonOutput"] = json.dumps({"orders": orders}, indent=2)
    return workflow


def node_named(workflow: Mapping[str, Any], name: str) -> dict[str, Any]:
    for node in workflow["nodes"]:
        if node["name"] == name:
            return node
    raise KeyError(f"workflow {workflow.get('name')!r} has no node {name!r}")


def webhook_path(workflow: Mapping[str, Any]) -> str:
    for node in workflow["nodes"]:
        if node["type"] == "n8n-nodes-base.webhook":
            return node["parameters"]["path"]
    raise KeyError(f"workflow {workflow.get('name')!r} has no Webhook trigger")


@dataclass
class CliRun:
    """One n8n CLI command: exit code and output."""

    returncode: int
    stdout: str
    stderr: str
    seconds: float

    def describe(self) -> str:
        tail = "\n".join((self.stdout + "\n" + self.stderr).strip().splitlines()[-40:])
        return f"n8n exit {self.returncode} after {self.seconds:.1f}s\n{tail}"


@dataclass
class Execution:
    """One manual run of a workflow: n8n's final status for it and the run data of every node."""

    execution_id: str
    status: str  # n8n's execution status: success, error, crashed, canceled, ...
    seconds: float
    result: dict[str, Any]  # the execution's data: {"resultData": {"runData": ..., "error": ...}, ...}
    log: str = ""  # the server's log tail when the run did not succeed

    @property
    def ok(self) -> bool:
        return self.status == "success" and not self.error

    @property
    def error(self) -> Any:
        return self.result.get("resultData", {}).get("error")

    @property
    def run_data(self) -> dict[str, Any]:
        return self.result.get("resultData", {}).get("runData", {})

    def items(self, node: str, output: int = 0) -> list[dict[str, Any]]:
        """The json of every item `node` emitted on `output`, over all its runs (loops run a node again)."""
        found: list[dict[str, Any]] = []
        for run in self.run_data.get(node, []):
            outputs = (run.get("data") or {}).get("main") or []
            if len(outputs) > output and outputs[output]:
                found.extend(item["json"] for item in outputs[output])
        return found

    def runs(self, node: str) -> int:
        return len(self.run_data.get(node, []))

    def describe(self) -> str:
        return (
            f"n8n execution {self.execution_id}: {self.status} after {self.seconds:.1f}s, error={self.error!r}\n"
            f"{self.log}"
        )


class N8nFolder:
    """One N8N_USER_FOLDER: its own SQLite database, encryption key and imported workflows."""

    def __init__(self, n8n_bin: Path, path: Path, extra_env: Mapping[str, str] | None = None):
        self.bin = Path(n8n_bin)
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.extra_env = dict(extra_env or {})
        self.encryption_key = secrets.token_hex(24)
        self.runners_token = secrets.token_hex(16)

    def env(self, **extra: str) -> dict[str, str]:
        env = {key: value for key, value in os.environ.items() if not key.startswith(("N8N_", "DB_", "WEBHOOK_"))}
        env.update(
            {
                "N8N_USER_FOLDER": str(self.path),
                "N8N_ENCRYPTION_KEY": self.encryption_key,
                "N8N_RUNNERS_BROKER_PORT": str(free_port()),  # parallel n8n processes collide on the default
                "N8N_RUNNERS_BROKER_LISTEN_ADDRESS": "127.0.0.1",
                "N8N_DIAGNOSTICS_ENABLED": "false",
                "N8N_VERSION_NOTIFICATIONS_ENABLED": "false",
                "N8N_TEMPLATES_ENABLED": "false",
                "N8N_PERSONALIZATION_ENABLED": "false",
                # Modules no workflow here uses: about 2 s less per n8n process (each CLI command boots n8n),
                # and mcp-registry's only job at start is fetching a catalogue from api.n8n.io.
                "N8N_DISABLED_MODULES": DISABLED_MODULES,
                # No workflow here has a Code node, the only user of a task runner: in "internal" mode
                # every n8n process (each CLI command) starts a JS runner process, ~0.65 CPU-s per
                # `n8n execute`. "external" starts none; a Code node would fail after the broker's
                # request timeout with "no runner available", it would not run without one.
                "N8N_RUNNERS_MODE": "external",
                "N8N_RUNNERS_AUTH_TOKEN": self.runners_token,
                "N8N_GRACEFUL_SHUTDOWN_TIMEOUT": "5",
                "N8N_ENFORCE_SETTINGS_FILE_PERMISSIONS": "true",
                "N8N_LOG_LEVEL": "info",  # a failed run's description shows the server's log
                "N8N_LOG_OUTPUT": "console",
            }
        )
        # Node's on-disk compile cache (Node >= 22.1; keyed by Node's version and each file's bytes):
        # every CLI command boots n8n and compiled its JavaScript anew; with the cache a trivial
        # `n8n execute` took 4-9 % less CPU (2.8 -> 2.5 CPU-s, then 3.4 -> 3.3 in 5 runs interleaved,
        # 2026-12-02): small, but there are ~40 n8n processes a gate. Beside the install it belongs to.
        env.setdefault("NODE_COMPILE_CACHE", str(self.bin.parent.parent / "compile-cache"))
        env.update(self.extra_env)
        env.update(extra)
        return env

    def run(self, *args: str, timeout_s: float = 120) -> CliRun:
        """`n8n <args>` in its own process group; again (3 times at most) if a port it needs was taken
        before it could bind it: n8n checks that before it touches the database or runs anything."""
        for _ in range(3):
            result = self._run_once(args, timeout_s)
            if result.returncode == 0 or "is already in use" not in result.stdout + result.stderr:
                return result
        return result

    def _run_once(self, args: tuple[str, ...], timeout_s: float) -> CliRun:
        started = time.monotonic()
        proc = subprocess.Popen(
            [str(self.bin), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env(),
            cwd=self.path,
            start_new_session=True,
        )
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            stop_group(proc.pid, timeout_s=2, leader=proc)
            out, err = proc.communicate()
            err += f"\n[n8n_support] killed after {timeout_s:.0f} s"
            return CliRun(-9, out, err, time.monotonic() - started)
        finally:
            stop_group(proc.pid, timeout_s=2)  # task runners it may have left behind
        return CliRun(proc.returncode, out, err, time.monotonic() - started)

    def check(self, *args: str, timeout_s: float = 120) -> CliRun:
        result = self.run(*args, timeout_s=timeout_s)
        if result.returncode != 0:
            raise RuntimeError(f"n8n {' '.join(args)} failed:\n{result.describe()}")
        return result

    def import_workflow(self, workflow: Mapping[str, Any], publish: bool = False) -> str:
        target = self.path / f"import-{workflow['id']}.json"
        target.write_text(json.dumps(workflow, indent=2), encoding="utf-8")
        self.check("import:workflow", f"--input={target}")
        if publish:
            self.check("publish:workflow", f"--id={workflow['id']}")
        return workflow["id"]

    def import_workflows(self, workflows: Iterable[Mapping[str, Any]]) -> list[str]:
        """Several workflows in one n8n process (`import:workflow --separate`): each CLI command boots n8n."""
        target = self.path / f"import-{secrets.token_hex(4)}"
        target.mkdir()
        ids = []
        for workflow in workflows:
            (target / f"{workflow['id']}.json").write_text(json.dumps(workflow, indent=2), encoding="utf-8")
            ids.append(workflow["id"])
        self.check("import:workflow", "--separate", f"--input={target}")
        return ids

    def import_credentials(self, credentials: Iterable[Mapping[str, Any]]) -> None:
        target = self.path / "import-credentials.json"
        target.write_text(json.dumps(list(credentials), indent=2), encoding="utf-8")
        try:
            self.check("import:credentials", f"--input={target}")
        finally:
            target.unlink(missing_ok=True)  # holds secrets in clear


class N8nServer:
    """`n8n start` on 127.0.0.1:<port> for one folder; production webhooks of published workflows."""

    def __init__(self, folder: N8nFolder, port: int | None = None):
        self.folder = folder
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.webhook: str | None = None  # the path of the workflow under test, for the tests' convenience
        self.log_path = folder.path / "n8n-start.log"
        self._log = None
        self._cookie: str | None = None  # the owner's auth cookie (sign_in)
        self._key: str | None = None  # a public-API key (_api_key)
        self.owner_password: str | None = None

    def start(self, ready_paths: Iterable[str] = (), timeout_s: float = 90) -> N8nServer:
        env = self.folder.env(
            N8N_PORT=str(self.port),
            N8N_LISTEN_ADDRESS="127.0.0.1",
            N8N_HOST="127.0.0.1",
            N8N_PROTOCOL="http",
            WEBHOOK_URL=f"{self.url}/",
            N8N_SECURE_COOKIE="false",
            N8N_PROXY_HOPS="0",
            # No editor UI: nothing here opens it (the editor's REST API is served without it), and at
            # each start n8n wrote its static files anew through text replacements: start to ready
            # and stop 11.4 -> 7.5 CPU-s (2 runs each, 2-core machine, 2026-12-02).
            N8N_DISABLE_UI="true",
        )
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - n8n's log for its lifetime; closed by stop()
        self.proc = subprocess.Popen(
            [str(self.folder.bin), "start"],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=self.folder.path,
            start_new_session=True,
        )
        return self.wait_ready(ready_paths, timeout_s)

    def wait_ready(self, paths: Iterable[str] = (), timeout_s: float = 90) -> N8nServer:
        """Wait until n8n answers its readiness check and the production webhooks at `paths` are live;
        stopped (and an error raised) if n8n exits or is not ready within timeout_s."""
        assert self.proc is not None, "start() first"
        deadline = time.monotonic() + timeout_s
        pending = list(paths)
        while True:
            if self.proc.poll() is not None:
                self.stop()
                raise RuntimeError(f"n8n start exited with {self.proc.returncode}:\n{self.log_tail()}")
            pending = [path for path in pending if not self._webhook_registered(path)]
            if not pending and self._healthy():
                return self
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(
                    f"n8n start not ready within {timeout_s:.0f}s (waiting for {pending}):\n{self.log_tail()}"
                )
            time.sleep(0.5)

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/healthz/readiness", timeout=2) as response:
                return response.status == 200
        except (OSError, urllib.error.HTTPError):
            return False

    def _webhook_registered(self, path: str) -> bool:
        """A POST-only production webhook answers GET with 404 'not registered for GET' once it is live."""
        try:
            with urllib.request.urlopen(f"{self.url}/webhook/{path}", timeout=2):
                return True
        except urllib.error.HTTPError as exc:
            return "not registered for GET" in exc.read().decode("utf-8", "replace")
        except OSError:
            return False

    def post_webhook(
        self, path: str, payload: Any, timeout_s: float = 60, headers: Mapping[str, str] | None = None
    ) -> tuple[int, Any]:
        """POST to a production webhook. Again, for UNREGISTERED_RETRY_S at most, while n8n answers
        that the webhook is not registered: under load n8n 2.41 was seen to answer a GET as for a
        live POST webhook (start()'s readiness check) and the POST right after with this 404, which
        means no execution started, so the retry cannot run a workflow twice."""
        deadline = time.monotonic() + UNREGISTERED_RETRY_S
        while True:
            status, body, _ = self._request("POST", f"/webhook/{path}", payload, headers, timeout_s=timeout_s)
            text = body if isinstance(body, str) else json.dumps(body)  # n8n's 404 is JSON: {"message": ...}
            unregistered = status == 404 and "is not registered" in text
            if not unregistered or time.monotonic() > deadline:
                return status, body
            time.sleep(0.5)

    # ------------------------------------------------------------------ REST: the editor's calls
    def _request(
        self,
        method: str,
        path: str,
        payload: Any = None,
        headers: Mapping[str, str] | None = None,
        timeout_s: float = REST_TIMEOUT_S,
    ) -> tuple[int, Any, Any]:
        """One call to n8n's REST (/rest/...), public (/api/v1/...) or webhook (/webhook/...) API:
        status, body (parsed JSON, else text), headers."""
        request = urllib.request.Request(
            f"{self.url}{path}",
            data=None if payload is None else json.dumps(payload).encode(),
            headers={"Content-Type": "application/json", **(headers or {})},
            method=method,
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                body, status, got = response.read(), response.status, response.headers
        except urllib.error.HTTPError as exc:
            body, status, got = exc.read(), exc.code, exc.headers
        try:
            return status, json.loads(body), got
        except json.JSONDecodeError:
            return status, body.decode("utf-8", "replace"), got

    def rest(self, method: str, path: str, payload: Any = None) -> tuple[int, Any]:
        """/rest/<path> as the signed-in owner (signing in first): the editor's API."""
        status, body, _ = self._request(method, f"/rest/{path}", payload, {"Cookie": self.sign_in()})
        return status, body

    def sign_in(self) -> str:
        """The owner's auth cookie, setting the owner up on first use (a new folder has none)."""
        if self._cookie is None:
            self.owner_password = "Passw0rd-" + secrets.token_hex(12)
            owner = {"email": OWNER_EMAIL, "firstName": "Test", "lastName": "Owner", "password": self.owner_password}
            status, body, headers = self._request("POST", "/rest/owner/setup", owner)
            cookie = headers.get("Set-Cookie") if headers is not None else None
            if status != 200 or not cookie:
                raise RuntimeError(f"n8n owner setup failed ({status}): {body!r}")
            self._cookie = cookie.split(";", 1)[0]
        return self._cookie

    def _api_key(self) -> str:
        """A public-API key that may read executions (created once, as a user creates one in Settings)."""
        if self._key is None:
            status, body = self.rest(
                "POST", "api-keys", {"label": "safesend tests", "scopes": ["execution:read"], "expiresAt": None}
            )
            if status != 200:
                raise RuntimeError(f"n8n API key not created ({status}): {body!r}")
            self._key = body["data"]["rawApiKey"]
        return self._key

    def create_workflow(self, workflow: Mapping[str, Any]) -> str:
        """Save a new workflow (its id kept), as the editor does: no CLI import beside a running n8n."""
        fields = ("id", "name", "nodes", "connections", "settings")
        status, body = self.rest("POST", "workflows", {key: workflow[key] for key in fields if key in workflow})
        if status != 200:
            raise RuntimeError(f"n8n did not save workflow {workflow.get('id')} ({status}): {body!r}")
        return body["data"]["id"]

    def publish(self, workflow_id: str) -> None:
        """Publish the workflow's current version, as the editor's "Publish" button does: its production
        webhooks are live when n8n answers (no `n8n publish:workflow` beside a running n8n, which takes
        effect only at the next start)."""
        status, body = self.rest("GET", f"workflows/{workflow_id}")
        if status != 200:
            raise RuntimeError(f"n8n has no workflow {workflow_id} ({status}): {body!r}")
        version = body["data"]["versionId"]
        status, body = self.rest("POST", f"workflows/{workflow_id}/activate", {"versionId": version})
        if status != 200:
            raise RuntimeError(f"n8n did not publish workflow {workflow_id} ({status}): {body!r}")

    def execute(self, workflow_id: str, timeout_s: float = 120) -> Execution:
        """Run a Manual Trigger workflow as the editor's "Execute workflow" button does, wait for its end
        (bounded by timeout_s) and read its run data back through the public API, as plain JSON (the
        editor's own execution endpoint answers in the `flatted` encoding, which has no Python library)."""
        started = time.monotonic()
        status, body = self.rest("GET", f"workflows/{workflow_id}")
        if status != 200:
            raise RuntimeError(f"n8n has no workflow {workflow_id} ({status}): {body!r}")
        triggers = [n["name"] for n in body["data"]["nodes"] if n["type"] == "n8n-nodes-base.manualTrigger"]
        if len(triggers) != 1:
            raise RuntimeError(f"workflow {workflow_id} has {len(triggers)} Manual Trigger nodes, not one")
        status, body = self.rest("POST", f"workflows/{workflow_id}/run", {"triggerToStartFrom": {"name": triggers[0]}})
        execution_id = body.get("data", {}).get("executionId") if isinstance(body, dict) else None
        if status != 200 or not execution_id:
            raise RuntimeError(f"n8n did not start workflow {workflow_id} ({status}): {body!r}")
        deadline = started + timeout_s
        # Polls 0.2, 0.6, 1.1, 1.6 s ... after the start (then every 0.5 s): a run here makes HTTP calls
        # to the stack and seldom ends sooner, and each poll costs n8n ~25 ms of CPU (auth and database
        # per call, 2-core machine, 2026-12-02); polling at once, then after 0.05, 0.15, 0.35 s made ~3
        # more polls a run (148 polls in the node module's ~20 runs), for at most 0.2 s less wait.
        pause = 0.2
        while True:
            time.sleep(pause)
            pause = min(pause * 2, 0.5)
            status, found, _ = self._request(
                "GET", f"/api/v1/executions/{execution_id}?includeData=true", headers={"X-N8N-API-KEY": self._api_key()}
            )
            final = status == 200 and isinstance(found, dict) and found.get("status") not in UNFINISHED
            if final or time.monotonic() > deadline:
                break
        if not final:
            unfinished = f"not finished within {timeout_s:.0f} s"
            return Execution(str(execution_id), unfinished, timeout_s, {}, self.log_tail())
        run = Execution(str(execution_id), found["status"], time.monotonic() - started, found.get("data") or {})
        if not run.ok:
            run.log = self.log_tail()
        return run

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        if self.proc is not None:
            stop_group(self.proc.pid, timeout_s=15, leader=self.proc)
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> N8nServer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


# --------------------------------------------------------------------------- counting proxy
@dataclass
class SeenRequest:
    method: str
    path: str
    query: str
    status: int | None
    headers: dict[str, str]
    body: bytes
    at: float = field(default_factory=time.monotonic)

    @property
    def json(self) -> Any:
        try:
            return json.loads(self.body)
        except (ValueError, UnicodeDecodeError):
            return None


class CountingProxy:
    """Forward every request to `upstream` unchanged (body bytes included) and remember it."""

    http: LoopbackHttpServer  # set by start()
    url: str  # set by start()

    def __init__(self, upstream: str):
        parts = urlsplit(upstream)
        self.upstream_host, self.upstream_port = parts.hostname, parts.port or 80
        self.seen: list[SeenRequest] = []
        self._lock = threading.Lock()
        self._faults: list[tuple[str, int]] = []  # (kind, status): applied to the next POST /send requests
        proxy = self

        class Handler(QuietHandler):
            protocol_version = "HTTP/1.1"

            def _relay(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                path, _, query = self.path.partition("?")
                record = SeenRequest(
                    self.command, path, query, None, {k.lower(): v for k, v in self.headers.items()}, body
                )
                with proxy._lock:
                    proxy.seen.append(record)
                    fault = (
                        proxy._faults.pop(0) if (proxy._faults and self.command == "POST" and path == "/send") else None
                    )
                if fault is not None:
                    kind, status = fault
                    record.status = status
                    if kind == "drop":  # the connection closes without an answer: n8n sees a network error
                        self.close_connection = True
                        self.connection.shutdown(socket.SHUT_RDWR)
                        return
                    payload = json.dumps({"error": "injected", "message": "injected by the test proxy"}).encode()
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Retry-After", "1")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                headers = {
                    k: v
                    for k, v in self.headers.items()
                    if k.lower() not in ("host", "connection", "keep-alive", "proxy-connection", "transfer-encoding")
                }
                try:
                    upstream = http.client.HTTPConnection(proxy.upstream_host, proxy.upstream_port, timeout=120)
                    upstream.request(
                        self.command, self.path, body=body if body or self.command != "GET" else None, headers=headers
                    )
                    response = upstream.getresponse()
                    data = response.read()
                    status, reason, out_headers = response.status, response.reason, response.getheaders()
                    upstream.close()
                except OSError as exc:
                    record.status = 502
                    payload = json.dumps({"error": "proxy", "message": str(exc)}).encode()
                    self.send_response(502)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                record.status = status
                self.send_response(status, reason)
                for key, value in out_headers:
                    if key.lower() not in (
                        "content-length",
                        "connection",
                        "transfer-encoding",
                        "keep-alive",
                        "server",
                        "date",
                    ):
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _relay  # noqa: N815 - http.server's names

        self._handler = Handler

    def start(self) -> CountingProxy:
        self.http = LoopbackHttpServer(self._handler, "counting-proxy")
        self.url = self.http.url
        return self

    def stop(self) -> None:
        self.http.stop()

    def inject(self, kind: str, count: int = 1, status: int = 503) -> None:
        """Answer the next `count` POST /send requests without forwarding them: `status` ("status"), or
        by closing the connection ("drop"). Nothing reaches safesend for those."""
        assert kind in ("status", "drop")
        with self._lock:
            self._faults.extend([(kind, 0 if kind == "drop" else status)] * count)

    def requests(self, method: str | None = None, path: str | None = None) -> list[SeenRequest]:
        with self._lock:
            return [r for r in self.seen if (method is None or r.method == method) and (path is None or r.path == path)]

    def sends_for(self, **match: Any) -> list[SeenRequest]:
        """POST /send requests whose JSON body has all of `match`'s fields."""
        return [
            r
            for r in self.requests("POST", "/send")
            if isinstance(r.json, dict) and all(r.json.get(k) == v for k, v in match.items())
        ]
