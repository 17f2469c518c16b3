"""The whole service on one machine: emulators, Gmail simulator, fault relay, and the functions.

Used by scripts/run-local.sh (foreground, with a Cloud Scheduler stand-in calling /sweep)
and by the end-to-end tests (tests/integration/test_stack.py). Loopback only.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import secrets
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from devstack.balancer import RoundRobinBalancer
from devstack.emulators import DEFAULT_LOCATION, EmulatorStack, ManagedProcess, free_port
from devstack.gmail_sim import GmailSimulator
from devstack.graph_sim import GraphSimulator
from devstack.postgres import PostgresServer
from devstack.push_relay import PushRelay
from devstack.receiver import RecordingReceiver
from devstack.relay import FaultRelay

_FUNCTIONS_DIR = Path(__file__).resolve().parent.parent / "functions"
if str(_FUNCTIONS_DIR) not in sys.path:
    sys.path.insert(0, str(_FUNCTIONS_DIR))
from safesend.core.api_keys import mint  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent
PROJECT = "demo-safesend"
QUEUE_ID = "safesend-reconcile"
TOPIC_ID = "safesend-review"
SUBSCRIPTION_ID = "safesend-review-inbox"  # pulled by tests: every review item
NOTIFY_SUBSCRIPTION_ID = "safesend-review-notify"  # pushed to /notify (devstack/push_relay.py)
MAILBOX_QUEUE_PREFIX = "safesend-mbx-"  # one paced queue per sender mailbox, as infra/ creates them


@dataclass
class StackConfig:
    """Timings are short by default so a reconcile cycle takes seconds, not minutes."""

    port: int | None = None
    log_dir: Path | None = None
    use_simulator: bool = True  # False: real Gmail with the credentials in the environment
    sim_index_lag_s: float = 0.5
    # Auth on, as deployed: an API key for callers (n8n), one for the internal endpoints (the Cloud
    # Tasks emulator and the sweep ticker send it: they cannot mint OIDC tokens), an HMAC secret,
    # and signed callbacks to loopback. False: SAFESEND_AUTH_DISABLED (explicitly asked for).
    auth: bool = True
    # Reviewers: notify runs (push relay), with fake Google Chat and Slack webhooks that record what
    # they get (stack.chat, stack.slack); items not notified in 5 s are published again.
    reviewers: bool = True
    service_env: dict[str, str] = field(
        default_factory=lambda: {
            "SAFESEND_SEND_TIMEOUT_S": "2",
            "SAFESEND_READ_TIMEOUT_S": "5",
            "SAFESEND_LEASE_S": "5",
            "SAFESEND_INDEX_LAG_S": "1",
            "SAFESEND_UNKNOWN_WINDOW_S": "3",
            "SAFESEND_VERIFY_HORIZON_S": "10",
            "SAFESEND_HISTORY_CHECK_S": "0.3",  # the change log first (index lag 1 s), then the search
            "SAFESEND_RECHECK_S": "1",
            "SAFESEND_PUBLISH_LEASE_S": "2",
            "SAFESEND_REQUEST_BUDGET_S": "8",
            "SAFESEND_CHANNELS_JSON": json.dumps(
                {
                    "transactional": {"retry_base_s": 0.2, "retry_cap_s": 1.0},
                    "notifications": {"retry_base_s": 0.2, "retry_cap_s": 1.0},
                }
            ),
        }
    )
    # The job store: "firestore" (its emulator, as deployed by default) or "postgres" (a throwaway
    # PostgreSQL server from Debian's packages, devstack/postgres.py; SAFESEND_STORE=postgres).
    store: str = "firestore"
    # Function processes behind one round-robin front (devstack/balancer.py): like Cloud Run's
    # instances, they share nothing but the stores, so the mailbox budget must hold across them.
    function_processes: int = 1
    # Sender mailboxes and pools (SAFESEND_MAILBOXES_JSON's document, safesend/core/mailboxes.py): each
    # gets its own mailbox in the simulator (its delegated user) and its own paced queue.
    mailboxes: dict[str, Any] | None = None
    # The Google Cloud project the service and its queues, topic and documents live in. Stacks that
    # share one EmulatorStack (LocalStack(emulators=...)) each take their own: the emulators keep every
    # project apart (documents, topics, subscriptions, queues), so no stack sees another's data.
    project: str = PROJECT


def mailbox_queue_rate(mailbox: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, float]:
    """A mailbox queue's rate_limits as infra/modules/safesend/mailboxes.tf sets them: its sends per
    second (units per minute / 100 units / 60 s) times the safety share, at most 500/s."""
    from safesend.core.mailboxes import DEFAULT_SAFETY_SHARE, KIND_DEFAULT_LIMITS, PRESETS

    spec = mailbox.get("limits", KIND_DEFAULT_LIMITS.get(str(mailbox.get("kind"))) or defaults.get("limits"))
    table: dict[str, Any] = {"preset": spec} if isinstance(spec, str) else dict(spec or {})
    preset = PRESETS[table["preset"]] if "preset" in table else PRESETS["unlimited"]
    units = table.get("units_per_minute", preset.units_per_minute)
    share = float(mailbox.get("safety_share", defaults.get("safety_share", DEFAULT_SAFETY_SHARE)))
    rate = 500.0 if units is None else min(500.0, units * share / 6000.0)
    return {"max_dispatches_per_second": rate, "max_concurrent_dispatches": 4}


class LocalStack:
    """The whole service; ``emulators``: an already started EmulatorStack the caller owns (started
    once for many stacks: two JVM boots saved per stack), neither started nor stopped here."""

    def __init__(self, config: StackConfig | None = None, emulators: EmulatorStack | None = None):
        self.config = config or StackConfig()
        self.project = self.config.project
        self.log_dir = Path(self.config.log_dir or tempfile.mkdtemp(prefix="safesend-stack-"))
        self.shared_emulators = emulators is not None
        self.emulators = emulators or EmulatorStack(
            project=self.project, log_dir=self.log_dir, tasks_queues=[QUEUE_ID], tasks_max_retries=5
        )
        self.sim: GmailSimulator | None = None
        self.relay: FaultRelay | None = None
        # Microsoft 365 mailboxes (kind = "graph"): their own simulator behind their own fault relay.
        self.graph_sim: GraphSimulator | None = None
        self.graph_relay: FaultRelay | None = None
        self.chat: RecordingReceiver | None = None
        self.slack: RecordingReceiver | None = None
        self.push_relay: PushRelay | None = None
        self.functions: ManagedProcess | None = None
        self.function_processes: list[ManagedProcess] = []
        self.balancer: RoundRobinBalancer | None = None
        if self.config.store not in ("firestore", "postgres"):
            raise ValueError(f"StackConfig.store must be firestore or postgres, not {self.config.store!r}")
        self.postgres = PostgresServer(log_dir=self.log_dir) if self.config.store == "postgres" else None
        self.port = self.config.port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.api_key, api_key_entry = mint("local-caller")
        self.internal_api_key, internal_key_entry = mint("local-internal")
        self._key_entries = (api_key_entry, internal_key_entry)
        self.hmac_secret = secrets.token_hex(32)
        self.review_identity = "dev@localhost"  # the console's development identity (red banner)
        self.callback_secret = secrets.token_hex(32)
        self.review_csrf_secret = secrets.token_hex(32)

    def caller_headers(self) -> dict[str, str]:
        """What an n8n HTTP Request node sends with its Bearer Auth credential."""
        return {"Authorization": f"Bearer {self.api_key}"} if self.config.auth else {}

    def internal_headers(self) -> dict[str, str]:
        """What Cloud Scheduler / Cloud Tasks stand-ins send to /sweep and /reconcile here."""
        return {"Authorization": f"Bearer {self.internal_api_key}"} if self.config.auth else {}

    def auth_env(self) -> dict[str, str]:
        if not self.config.auth:
            # Explicitly asked for (run-local.sh --no-auth); deployed configs never set this (infra policy test).
            return {
                "SAFESEND_AUTH_DISABLED": "1",
                "SAFESEND_CALLBACK_HMAC_SECRET": self.callback_secret,
                "SAFESEND_CALLBACK_ALLOWED_HOSTS": "127.0.0.1,localhost",
                "SAFESEND_CALLBACK_ALLOW_HTTP": "1",
            }
        caller_entry, internal_entry = self._key_entries
        return {
            "SAFESEND_AUTH_API_KEYS": caller_entry,
            "SAFESEND_AUTH_INTERNAL_API_KEYS": internal_entry,  # local stacks only (infra policy test)
            "SAFESEND_TASKS_API_KEY": self.internal_api_key,
            "SAFESEND_AUTH_HMAC_SECRET": self.hmac_secret,
            "SAFESEND_CALLBACK_HMAC_SECRET": self.callback_secret,
            "SAFESEND_CALLBACK_ALLOWED_HOSTS": "127.0.0.1,localhost",
            "SAFESEND_CALLBACK_ALLOW_HTTP": "1",  # loopback http callbacks: local stacks only
        }

    @property
    def queue_path(self) -> str:
        return self.tasks_queue_path(QUEUE_ID)

    @property
    def tasks_location_path(self) -> str:
        return f"projects/{self.project}/locations/{DEFAULT_LOCATION}"

    def tasks_queue_path(self, queue: str) -> str:
        """A queue of this stack's project (a shared Tasks emulator serves other projects too)."""
        return f"{self.tasks_location_path}/queues/{queue}"

    @property
    def topic_path(self) -> str:
        return f"projects/{self.project}/topics/{TOPIC_ID}"

    @property
    def subscription_path(self) -> str:
        return f"projects/{self.project}/subscriptions/{SUBSCRIPTION_ID}"

    @property
    def notify_subscription_path(self) -> str:
        return f"projects/{self.project}/subscriptions/{NOTIFY_SUBSCRIPTION_ID}"

    def reviewer_env(self) -> dict[str, str]:
        console = {
            "SAFESEND_REVIEW_CONSOLE_URL": self.url,
            "SAFESEND_REVIEW_DEV_IDENTITY": self.review_identity,
            "SAFESEND_REVIEW_CSRF_SECRET": self.review_csrf_secret,
        }
        if not (self.config.reviewers and self.chat and self.slack):
            return console
        return {
            **console,
            # Shaped like real webhook URLs (the credential is in the query string).
            "SAFESEND_NOTIFY_CHAT_WEBHOOK_URL": f"{self.chat.url}/v1/spaces/LOCAL/messages?key=k&token=t",
            "SAFESEND_NOTIFY_SLACK_WEBHOOK_URL": f"{self.slack.url}/services/T0/B0/local",
            "SAFESEND_REVIEW_NOTIFY_TIMEOUT_S": "5",
        }

    def service_env(self) -> dict[str, str]:
        env = {
            "GOOGLE_CLOUD_PROJECT": self.project,
            "SAFESEND_DEFAULT_FROM": "Safesend Local <sender@safesend.localhost>",
            "SAFESEND_MESSAGE_ID_DOMAIN": "mail.safesend.localhost",
            "SAFESEND_TASKS_QUEUE": self.queue_path,
            "SAFESEND_RECONCILE_URL": f"{self.url}/reconcile",
            "SAFESEND_REVIEW_TOPIC": self.topic_path,
            **self.auth_env(),
            **self.reviewer_env(),
            **self.emulators.env(),
            **self.config.service_env,
        }
        if self.postgres is not None:  # one pooled connection per functions-framework thread (THREADS=16)
            env.update({**self.postgres.env(), "SAFESEND_POSTGRES_POOL_MAX": "16"})
        if self.relay is not None:
            env["SAFESEND_GMAIL_API_ENDPOINT"] = self.relay.url
        if self.config.mailboxes is not None:
            env["SAFESEND_MAILBOXES_JSON"] = json.dumps(self._mailboxes_doc())
            env["SAFESEND_MAILBOX_QUEUE_PREFIX"] = self.tasks_queue_path(MAILBOX_QUEUE_PREFIX)
        return env

    def graph_mailboxes(self) -> list[str]:
        boxes = (self.config.mailboxes or {}).get("mailboxes") or {}
        return [name for name, m in boxes.items() if m.get("kind") == "graph"]

    def _mailboxes_doc(self) -> dict[str, Any]:
        """The configured mailboxes, Graph ones pointed at the Graph relay (no login_endpoint: no token)."""
        doc = json.loads(json.dumps(self.config.mailboxes))
        if self.graph_relay is not None:
            for name in self.graph_mailboxes():
                doc["mailboxes"][name]["api_endpoint"] = self.graph_relay.url.rstrip("/")
        return dict(doc)

    def mailbox_users(self) -> dict[str, str]:
        """Each configured mailbox's Gmail userId (its delegated user, else its address)."""
        boxes = (self.config.mailboxes or {}).get("mailboxes") or {}
        return {name: str(m.get("delegated_user") or m["address"]).lower() for name, m in boxes.items()}

    def _prepare_mailboxes(self) -> None:
        """One simulator mailbox and one paced Cloud Tasks queue per configured sender mailbox."""
        if self.config.mailboxes is None:
            return
        if self.sim is not None:
            for user in self.mailbox_users().values():
                self.sim.add_mailbox(user)
        client = self.emulators.tasks.client()
        defaults = self.config.mailboxes.get("defaults") or {}
        for name, mailbox in (self.config.mailboxes.get("mailboxes") or {}).items():
            client.create_queue(
                parent=self.tasks_location_path,
                queue={
                    "name": self.tasks_queue_path(MAILBOX_QUEUE_PREFIX + name),
                    "rate_limits": mailbox_queue_rate(mailbox, defaults),
                },
            )

    def start(self) -> LocalStack:
        try:
            if self.shared_emulators:  # its reconcile queue, in this stack's project
                self.emulators.tasks.client().create_queue(
                    parent=self.tasks_location_path, queue={"name": self.queue_path}
                )
            else:
                self.emulators.start()
            self._create_topic_and_subscription()
            if self.postgres is not None:
                self.postgres.start()
            if self.config.use_simulator:
                self.sim = GmailSimulator(
                    index_lag_s=self.config.sim_index_lag_s, effects_path=str(self.log_dir / "effects.jsonl")
                ).start()
                self.relay = FaultRelay(self.sim.url).start()
                if self.graph_mailboxes():
                    self.graph_sim = GraphSimulator(index_lag_s=self.config.sim_index_lag_s).start()
                    self.graph_relay = FaultRelay(self.graph_sim.url).start()
            self._prepare_mailboxes()
            if self.config.reviewers:
                self.chat = RecordingReceiver().start()
                self.slack = RecordingReceiver().start()
            self._start_functions()
            if self.config.reviewers:
                self.push_relay = PushRelay(
                    self.notify_subscription_path,
                    f"{self.url}/notify",
                    self.internal_headers(),
                    self.emulators.pubsub.host,
                ).start()
        except BaseException:
            self.stop()
            raise
        return self

    def _create_topic_and_subscription(self) -> None:
        from google.api_core import exceptions as gexc
        from google.cloud import pubsub_v1

        previous = os.environ.get("PUBSUB_EMULATOR_HOST")
        os.environ["PUBSUB_EMULATOR_HOST"] = self.emulators.pubsub.host
        try:
            publisher = pubsub_v1.PublisherClient()
            subscriber = pubsub_v1.SubscriberClient()
            for create in (
                lambda: publisher.create_topic(name=self.topic_path),
                lambda: subscriber.create_subscription(name=self.subscription_path, topic=self.topic_path),
                lambda: subscriber.create_subscription(name=self.notify_subscription_path, topic=self.topic_path),
            ):
                with contextlib.suppress(gexc.AlreadyExists):
                    create()
            subscriber.close()
        finally:
            if previous is None:
                os.environ.pop("PUBSUB_EMULATOR_HOST", None)
            else:
                os.environ["PUBSUB_EMULATOR_HOST"] = previous

    def _start_functions(self) -> None:
        count = max(1, self.config.function_processes)
        ports = [self.port] if count == 1 else [free_port() for _ in range(count)]
        for index, port in enumerate(ports):
            name = "functions" if index == 0 else f"functions-{index + 1}"
            process = self._function_process(name, port)
            self.function_processes.append(process)
            process.start()
        self.functions = self.function_processes[0]
        if count > 1:
            self.balancer = RoundRobinBalancer(self.port, ports).start()
        for process, port in zip(self.function_processes, ports, strict=True):
            process.wait_ready(
                functools.partial(self._ready_at, f"http://127.0.0.1:{port}"), timeout=30, what="serving HTTP"
            )

    def _function_process(self, name: str, port: int) -> ManagedProcess:
        env = {**os.environ, **self.service_env(), "PYTHONUNBUFFERED": "1", "THREADS": "16"}
        argv = [
            sys.executable,
            "-m",
            "functions_framework",
            "--source",
            str(REPO_ROOT / "devstack" / "local_app.py"),
            "--target",
            "router",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ]
        return ManagedProcess(argv, name=name, log_dir=self.log_dir, env=env, cwd=REPO_ROOT)

    def _functions_ready(self) -> bool:
        """Serving: any answer from the app itself (404 for the probe id, or 401 if credentials are off)."""
        return self._ready_at(self.url)

    def _ready_at(self, url: str) -> bool:
        request = urllib.request.Request(f"{url}/status?job_id=ready-probe", headers=self.caller_headers())
        try:
            with urllib.request.urlopen(request, timeout=2) as response:
                return response.status in (200, 404)
        except urllib.error.HTTPError as exc:
            return exc.code in (401, 404)
        except OSError:
            return False

    def stop(self) -> None:
        """Stop everything we started, each by its own handle; keep going past failures."""
        parts: tuple[Any, ...] = (
            self.push_relay,
            self.balancer,
            *reversed(self.function_processes),
            self.chat,
            self.slack,
            self.relay,
            self.sim,
            self.graph_relay,
            self.graph_sim,
            self.postgres,
            None if self.shared_emulators else self.emulators,
        )
        for part in parts:
            if part is None:
                continue
            try:
                part.stop()
            except Exception as exc:  # noqa: BLE001 - report and continue stopping the rest
                print(f"stack stop: {exc}", file=sys.stderr)
        if self.shared_emulators:
            try:
                self._release_project()
            except Exception as exc:  # noqa: BLE001 - the emulators' owner stops them anyway
                print(f"stack stop: {exc}", file=sys.stderr)

    def _release_project(self) -> None:
        """On shared emulators: delete this stack's queues (their dispatch threads poll, and nothing may
        call the stopped functions) and its documents; the emulators go on serving other stacks."""
        client = self.emulators.tasks.client()
        names = [self.queue_path, *(self.tasks_queue_path(MAILBOX_QUEUE_PREFIX + n) for n in self.mailbox_users())]
        for name in names:
            client.delete_queue(name=name)
        self.emulators.firestore.reset(self.project)

    def __enter__(self) -> LocalStack:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # Added for the fault storm (tests/integration/test_fault_storm.py, devstack/chaos.py).
    def functions_serving(self) -> bool:
        """True when the functions server answers HTTP (e.g. again, after its worker was killed)."""
        return self._functions_ready()

    def process_groups(self) -> dict[str, int | None]:
        """pgid of each process this stack started in its own group (for freezing one in tests)."""
        groups = {emulator.name: emulator.pgid for emulator in self.emulators.emulators}
        groups["functions"] = self.functions.pgid if self.functions else None
        for process in self.function_processes[1:]:
            groups[process.name] = process.pgid
        if self.postgres is not None:
            groups["postgres"] = self.postgres.pgid
        return groups


class SweepTicker:
    """Cloud Scheduler's stand-in: POST /sweep every `interval_s` until stopped. Like a Scheduler job
    it can be paused: POST /_scheduler/pause and /_scheduler/resume on its own loopback control
    server (`control_url`), GET /_scheduler says whether it is paused and how many sweeps it sent."""

    def __init__(self, url: str, interval_s: float = 10.0, headers: Mapping[str, str] | None = None):
        self.url = url
        self.interval_s = interval_s
        self.headers = {"Content-Type": "application/json", **(headers or {})}
        self.paused = threading.Event()
        self.ticks = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sweep-ticker", daemon=True)
        self._control = _scheduler_control(self)
        self._control_thread = threading.Thread(
            target=self._control.serve_forever, name="scheduler-control", daemon=True
        )

    @property
    def control_url(self) -> str:
        host, port = self._control.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> SweepTicker:
        self._control_thread.start()
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            if self.paused.is_set():
                continue
            self.ticks += 1
            try:
                request = urllib.request.Request(f"{self.url}/sweep", data=b"{}", method="POST", headers=self.headers)
                with urllib.request.urlopen(request, timeout=120) as response:
                    response.read()
            except OSError as exc:
                print(f"sweep tick failed: {exc}", file=sys.stderr)

    def stop(self) -> None:
        self._stop.set()
        self._control.shutdown()
        self._control.server_close()
        self._thread.join(timeout=5)
        self._control_thread.join(timeout=5)


def _scheduler_control(ticker: SweepTicker) -> ThreadingHTTPServer:
    """The ticker's control endpoints, on 127.0.0.1 (an ephemeral port)."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            if self.path == "/_scheduler/pause":
                ticker.paused.set()
            elif self.path == "/_scheduler/resume":
                ticker.paused.clear()
            else:
                return self._answer(404, {"error": "not_found"})
            return self._answer(200, {"paused": ticker.paused.is_set(), "ticks": ticker.ticks})

        def do_GET(self) -> None:
            if self.path != "/_scheduler":
                return self._answer(404, {"error": "not_found"})
            return self._answer(200, {"paused": ticker.paused.is_set(), "ticks": ticker.ticks})

        def _answer(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    return ThreadingHTTPServer(("127.0.0.1", 0), Handler)


def fetch_health(url: str, headers: Mapping[str, str]) -> dict[str, Any]:
    """GET /health of the local stack (run-local prints it; the stack tests read it)."""
    request = urllib.request.Request(f"{url}/health", headers=dict(headers))
    with urllib.request.urlopen(request, timeout=30) as response:
        return dict(json.loads(response.read()))


def run_foreground(env: Mapping[str, str] | None = None, argv: list[str] | None = None) -> int:
    """`scripts/run-local.sh [--no-auth]`: start the stack, print how to use it, sweep until Ctrl-C."""
    import signal

    env = dict(os.environ if env is None else env)
    argv = sys.argv[1:] if argv is None else argv
    if set(argv) - {"--no-auth"}:
        print("usage: scripts/run-local.sh [--no-auth]", file=sys.stderr)
        return 2
    real_gmail = bool(env.get("SAFESEND_GMAIL_CREDENTIALS_FILE") or env.get("SAFESEND_GMAIL_CREDENTIALS_JSON"))
    config = StackConfig(
        port=int(env.get("SAFESEND_PORT", "8080")),
        use_simulator=not real_gmail,
        auth="--no-auth" not in argv,
        function_processes=int(env.get("SAFESEND_FUNCTION_PROCESSES", "2")),  # instances share the budget
    )
    if real_gmail:  # real mailboxes have real index lag: production timings
        config.service_env = {}
    interval_s = float(env.get("SAFESEND_SWEEP_INTERVAL_S", "10"))
    config.service_env = {**config.service_env, "SAFESEND_SWEEP_INTERVAL_S": f"{interval_s:g}"}  # /health's "late"
    stack = LocalStack(config)
    # Ctrl-C, `kill`, a closed terminal: each stops the stack. SIGINT is set explicitly because a
    # shell starts background jobs with it ignored, and Python then never raises KeyboardInterrupt.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for stop_signal in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(stop_signal, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        stack.start()
    except BaseException as exc:  # noqa: BLE001 - print and exit non-zero
        print(f"could not start the local stack: {exc}\nlogs: {stack.log_dir}", file=sys.stderr)
        return 1
    ticker: SweepTicker | None = None
    try:  # from here on, a stop signal at any point (even mid-banner) stops what was started
        ticker = SweepTicker(stack.url, interval_s, stack.internal_headers()).start()
        print(local_banner(stack, real_gmail, ticker.interval_s), flush=True)
        print(f"  scheduler POST {ticker.control_url}/_scheduler/pause  (and /_scheduler/resume)", flush=True)
        try:
            print(f"  health    {json.dumps(fetch_health(stack.url, stack.internal_headers()))}", flush=True)
        except OSError as exc:
            print(f"  health    not answered: {exc}", file=sys.stderr)
        while stack.functions and stack.functions.is_running():
            time.sleep(1)
        print("the functions server exited; see its log", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        if ticker is not None:
            ticker.stop()
        stack.stop()


def local_banner(stack: LocalStack, real_gmail: bool, sweep_interval_s: float) -> str:
    """What run-local.sh prints: the URLs, the credentials of this run, and a curl that works."""
    gmail = (
        "real Gmail (credentials from the environment)"
        if real_gmail
        else (
            f"Gmail simulator {stack.sim.url if stack.sim else '?'} "
            f"behind fault relay {stack.relay.url if stack.relay else '?'}"
        )
    )
    auth = (
        f"""  API key   {stack.api_key}
            (n8n: a Bearer Auth credential with this token; a new key every run)
  HMAC      X-Safesend-Signature secret {stack.hmac_secret}
  callbacks signed with {stack.callback_secret}; http://127.0.0.1 and localhost allowed"""
        if stack.config.auth
        else "  auth      OFF (--no-auth): local experiments only"
    )
    bearer = f" -H 'Authorization: Bearer {stack.api_key}'" if stack.config.auth else ""
    reviewers = (
        f"  notify    review items are pushed to /notify; fake Google Chat {stack.chat.url}, "
        f"fake Slack {stack.slack.url}\n"
        if stack.chat and stack.slack
        else ""
    )
    return f"""safesend is running locally
  send      POST {stack.url}/send
  status    GET  {stack.url}/status?job_id=...  (or ?dedup_key=...)
  reconcile POST {stack.url}/reconcile   (called by the Cloud Tasks emulator)
  sweep     POST {stack.url}/sweep       (called every {sweep_interval_s:g}s here)
  health    GET  {stack.url}/health      (last sweep, overdue jobs, oldest review item)
  gmail     {gmail}
{auth}
  review    GET  {stack.url}/review   (the reviewers' console; development identity {stack.review_identity})
{reviewers}  effects   {stack.log_dir / "effects.jsonl"}
  logs      {stack.log_dir}
Try:
  curl -s -XPOST {stack.url}/send -H 'Content-Type: application/json'{bearer} -d '{{"customer_id":"c1","event_type":"order_paid","order_id":"42","channel":"transactional","to":"ann@example.com","subject":"Receipt","text":"Thanks!"}}'
Ctrl-C stops everything."""  # noqa: E501 - the curl line is meant to be copied whole


if __name__ == "__main__":
    sys.exit(run_foreground())
