"""Settings from the environment, read once per instance. Bad values fail at start-up, not mid-send.

Each setting is declared once, below: its field, environment name, default, parser and meaning.
`Settings.from_env` reads them from those declarations, and the README's settings table is
generated from them (`python -m safesend.config`; a test keeps the README in step).
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from email.utils import parseaddr
from pathlib import Path
from typing import Any

from .core.api_keys import ApiKeyRing
from .core.errors import ConfigurationError
from .core.graph_hosts import refuse_non_microsoft_endpoints
from .core.keys import is_valid_hostname
from .core.lifecycle import Timing
from .core.mailboxes import MailboxDirectory
from .core.notify import ReviewerTargets
from .logs import LOG_LEVEL_ENV, LOG_LEVELS, log_level_from

DEFAULT_CHANNELS_FILE = Path(__file__).resolve().parent.parent / "channels.toml"
FALLBACK_DOMAIN = "safesend.localhost"
# One Firestore document holds the job (1 MiB limit) with its events; the MIME built from it then
# stays far below Gmail's 35 MB message limit.
MAX_STORABLE_BODY_BYTES = 700_000
PROJECT_ALIASES = ("GCLOUD_PROJECT", "SAFESEND_PROJECT")
# Set by Cloud Run for every service, Cloud Functions included (both generations run on it).
# FUNCTION_TARGET is no sign of a deployment: functions-framework sets it on a laptop too.
CLOUD_MARKERS = ("K_SERVICE", "K_REVISION", "K_CONFIGURATION")
# Local-only switches read outside the declarations below: the emulator hosts that make the client
# libraries talk plain HTTP, with a fake token, to whatever address they name.
LOCAL_ONLY_ENVIRONMENT = ("FIRESTORE_EMULATOR_HOST", "PUBSUB_EMULATOR_HOST")

Parser = Callable[[str, str], Any]  # (environment name, raw text) -> value; raises ConfigurationError


def _text(name: str, raw: str) -> str:
    return raw


def _seconds(name: str, raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise ConfigurationError(f"{name} must be a number, got {raw!r}") from None
    if not math.isfinite(value) or value < 0:
        raise ConfigurationError(f"{name} must be a finite number >= 0, got {raw!r}")
    return value


def _count(name: str, raw: str) -> int:
    value = _seconds(name, raw)
    if not value.is_integer():  # "1.9" is a typo, not 1
        raise ConfigurationError(f"{name} must be a whole number, got {raw!r}")
    return int(value)


def _positive_seconds(name: str, raw: str) -> float:
    """A timeout or interval: 0 would make every call fail at once (a socket timeout of 0) or
    every sweep look late, far from the setting that caused it."""
    value = _seconds(name, raw)
    if value <= 0:
        raise ConfigurationError(f"{name} must be > 0, got {raw!r}")
    return value


def _positive_count(name: str, raw: str) -> int:
    value = _count(name, raw)
    if value < 1:
        raise ConfigurationError(f"{name} must be >= 1, got {raw!r}")
    return value


def _flag(name: str, raw: str) -> bool:
    word = raw.strip().lower()
    if word in ("1", "true", "yes", "on"):
        return True
    if word in ("0", "false", "no", "off"):
        return False
    raise ConfigurationError(f"{name} must be true or false, got {raw!r}")


def _names(name: str, raw: str) -> frozenset[str]:
    return frozenset(item.strip() for item in raw.split(",") if item.strip())


def _lower_names(name: str, raw: str) -> frozenset[str]:
    return frozenset(item.lower() for item in _names(name, raw))


def _log_level(name: str, raw: str) -> str:
    if log_level_from(raw) is None:
        raise ConfigurationError(f"{name} must be one of {', '.join(LOG_LEVELS)}, got {raw!r}")
    return raw.strip().upper()


def _store_kind(name: str, raw: str) -> str:
    kind = raw.strip().lower()
    if kind not in ("firestore", "postgres"):
        raise ConfigurationError(f"{name} must be firestore or postgres, got {raw!r}")
    return kind


def setting(
    env: str,
    default: Any,
    parse: Parser,
    doc: str,
    *,
    shown: str | None = None,
    secret: bool = False,
    local_only: bool = False,
) -> Any:
    """One setting: its environment name, default, parser and meaning, in one place.
    `shown` is the default as the table prints it; `secret`: from Secret Manager when deployed;
    `local_only`: never in a deployed configuration (the infra policy tests forbid it)."""
    return field(
        default=default,
        metadata={"env": env, "parse": parse, "doc": doc, "shown": shown, "secret": secret, "local_only": local_only},
    )


@dataclass(frozen=True)
class Settings:
    project: str = setting(
        "GOOGLE_CLOUD_PROJECT",
        "",
        _text,
        "project of Firestore, Tasks, Pub/Sub (also read from GCLOUD_PROJECT, SAFESEND_PROJECT)",
        shown="required",
    )
    jobs_collection: str = setting("SAFESEND_JOBS_COLLECTION", "ai_jobs", _text, "Firestore collection of the jobs")
    message_id_domain: str = setting(
        "SAFESEND_MESSAGE_ID_DOMAIN",
        "",
        _text,
        "right-hand side of every Message-ID; checked with a probe message at start-up",
        shown="domain of SAFESEND_DEFAULT_FROM",
    )
    default_from: str | None = setting("SAFESEND_DEFAULT_FROM", None, _text, "sender when a request has no `from`")
    channels_file: str = setting(
        "SAFESEND_CHANNELS_FILE",
        str(DEFAULT_CHANNELS_FILE),
        _text,
        "channel policies (TOML)",
        shown="functions/channels.toml",
    )
    channels_json: str | None = setting(
        "SAFESEND_CHANNELS_JSON", None, _text, "channel policies merged over the file (JSON)"
    )
    mailboxes_file: str | None = setting(
        "SAFESEND_MAILBOXES_FILE",
        None,
        _text,
        "sender mailboxes, their limits and pools (TOML, see safesend/core/mailboxes.py); unset: one mailbox, as today",
    )
    mailboxes_json: str | None = setting(
        "SAFESEND_MAILBOXES_JSON", None, _text, "the same document as JSON (instead of the file)"
    )
    # The job store (runtime.build_store)
    store: str = setting("SAFESEND_STORE", "firestore", _store_kind, "job store: `firestore` or `postgres`")
    postgres_dsn: str | None = setting(
        "SAFESEND_POSTGRES_DSN",
        None,
        _text,
        "libpq DSN or URI of the PostgreSQL job store, never with a password (IAM login, a local socket, or trust "
        "on a local stack); its `options` may set `-c search_path=<schema>`",
    )
    postgres_iam_auth: bool = setting(
        "SAFESEND_POSTGRES_IAM_AUTH",
        False,
        _flag,
        "Cloud SQL IAM database authentication: each new connection logs in with an "
        "access token of the runtime service account as its password",
    )
    postgres_pool_max: int = setting(
        "SAFESEND_POSTGRES_POOL_MAX", 4, _positive_count, "PostgreSQL connections per instance"
    )
    postgres_timeout_s: float = setting(
        "SAFESEND_POSTGRES_TIMEOUT_S",
        10.0,
        _positive_seconds,
        "bound on a PostgreSQL connect, statement and wait for a pooled connection",
    )
    postgres_migrate: bool = setting(
        "SAFESEND_POSTGRES_MIGRATE",
        True,
        _flag,
        "apply pending schema migrations on first use (off: only check, and refuse to run on an old schema)",
    )
    # Gmail
    gmail_user: str = setting("SAFESEND_GMAIL_USER", "me", _text, "Gmail API userId")
    gmail_api_endpoint: str | None = setting(
        "SAFESEND_GMAIL_API_ENDPOINT", None, _text, "Gmail API base URL; unset: real Gmail (local: the simulator)"
    )
    gmail_credentials_json: str | None = setting(
        "SAFESEND_GMAIL_CREDENTIALS_JSON",
        None,
        _text,
        "authorized-user token JSON for one mailbox (a service-account key file: local runs only)",
        secret=True,
    )
    gmail_credentials_file: str | None = setting(
        "SAFESEND_GMAIL_CREDENTIALS_FILE", None, _text, "the same, from a file (local runs)"
    )
    gmail_delegated_user: str | None = setting(
        "SAFESEND_GMAIL_DELEGATED_USER",
        None,
        _text,
        "mailbox for keyless domain-wide delegation, signed by the runtime account; refused with a user token",
    )
    send_timeout_s: float = setting(
        "SAFESEND_SEND_TIMEOUT_S",
        20.0,
        _positive_seconds,
        "wall-clock deadline of one send attempt, token refresh included",
    )
    read_timeout_s: float = setting(
        "SAFESEND_READ_TIMEOUT_S", 15.0, _positive_seconds, "wall-clock deadline of one Gmail read"
    )
    verify_message_id_every: int = setting(
        "SAFESEND_VERIFY_MESSAGE_ID_EVERY",
        100,
        _count,
        "read back the stored Message-ID: first send per instance, then 1 in N (0: never)",
    )
    # Timing: defaults are lifecycle.Timing's, declared there once
    lease_s: float = setting(
        "SAFESEND_LEASE_S", Timing.lease_s, _seconds, "an attempt's lease; must exceed twice the send deadline"
    )
    index_lag_s: float = setting(
        "SAFESEND_INDEX_LAG_S", Timing.index_lag_s, _seconds, "first search after an ambiguous attempt"
    )
    recheck_s: float = setting(
        "SAFESEND_RECHECK_S", Timing.recheck_s, _seconds, "searches again this often while in doubt"
    )
    unknown_window_s: float = setting(
        "SAFESEND_UNKNOWN_WINDOW_S",
        Timing.unknown_window_s,
        _seconds,
        "how long 'not found' stays inconclusive; must be >= the index lag (globally and per channel)",
    )
    verify_horizon_s: float = setting(
        "SAFESEND_VERIFY_HORIZON_S",
        Timing.verify_horizon_s,
        _seconds,
        "last search of a sent job that may have two copies; must be >= every window",
    )
    retry_horizon_s: float = setting(
        "SAFESEND_RETRY_HORIZON_S",
        Timing.retry_horizon_s,
        _seconds,
        "how long refusals (429, rate limits) are retried after the first one",
    )
    history_check_s: float = setting(
        "SAFESEND_HISTORY_CHECK_S",
        Timing.history_check_s,
        _seconds,
        "first look in the mailbox's change log after an ambiguous attempt (0: off)",
    )
    publish_lease_s: float = setting(
        "SAFESEND_PUBLISH_LEASE_S", Timing.publish_lease_s, _seconds, "one sweeper's hold on publishing a review item"
    )
    request_budget_s: float = setting(
        "SAFESEND_REQUEST_BUDGET_S", 40.0, _seconds, "time for quick retries inside one request"
    )
    # Cloud Tasks, Pub/Sub, the sweeper
    tasks_queue: str | None = setting("SAFESEND_TASKS_QUEUE", None, _text, "Cloud Tasks queue of the reconcile calls")
    mailbox_queue_prefix: str | None = setting(
        "SAFESEND_MAILBOX_QUEUE_PREFIX",
        None,
        _text,
        "projects/P/locations/R/queues/<prefix>-mbx-: each mailbox's paced queue of its queued jobs' turns",
    )
    reconcile_url: str | None = setting("SAFESEND_RECONCILE_URL", None, _text, "URL the tasks call")
    tasks_service_account: str | None = setting(
        "SAFESEND_TASKS_SERVICE_ACCOUNT", None, _text, "OIDC identity of the tasks"
    )
    tasks_emulator_host: str | None = setting(
        "SAFESEND_TASKS_EMULATOR_HOST", None, _text, "the Cloud Tasks emulator (local stacks)", local_only=True
    )
    tasks_api_key: str | None = setting(
        "SAFESEND_TASKS_API_KEY",
        None,
        _text,
        "internal API key the tasks carry (local stacks: the emulator has no OIDC)",
        local_only=True,
    )
    review_topic: str | None = setting("SAFESEND_REVIEW_TOPIC", None, _text, "Pub/Sub topic of the review items")
    # Both positive: a sweep that reads 0 jobs a page, or has no time for one, still reports
    # sweep_completed, so the dead man's switch stays quiet while no due job is ever swept.
    sweep_batch: int = setting("SAFESEND_SWEEP_BATCH", 50, _positive_count, "jobs per sweeper query")
    sweep_budget_s: float = setting("SAFESEND_SWEEP_BUDGET_S", 90.0, _positive_seconds, "time budget of one sweep")
    sweep_interval_s: float = setting(
        "SAFESEND_SWEEP_INTERVAL_S",
        300.0,
        _positive_seconds,
        "time between scheduled sweeps (/health: late after 3); deployed: the interval of sweep_schedule",
    )
    # Who may call (auth.py)
    auth_api_keys: str | None = setting(
        "SAFESEND_AUTH_API_KEYS",
        None,
        _text,
        "`key_id:sha256` entries of the API keys for send/status (`python -m safesend.core.api_keys new <id>`)",
        secret=True,
    )
    auth_hmac_secret: str | None = setting(
        "SAFESEND_AUTH_HMAC_SECRET", None, _text, "HMAC secret for send/status signatures (>= 32 bytes)", secret=True
    )
    auth_caller_emails: frozenset[str] = setting(
        "SAFESEND_AUTH_CALLER_SERVICE_ACCOUNTS",
        frozenset(),
        _lower_names,
        "service accounts allowed to call send/status with an ID token",
        shown="none",
    )
    auth_internal_emails: frozenset[str] = setting(
        "SAFESEND_AUTH_INTERNAL_INVOKERS",
        frozenset(),
        _lower_names,
        "service accounts allowed on reconcile/sweep/notify",
        shown="none",
    )
    auth_audiences: frozenset[str] = setting(
        "SAFESEND_AUTH_AUDIENCES",
        frozenset(),
        _names,
        "accepted ID-token audiences (the function URLs)",
        shown="SAFESEND_RECONCILE_URL",
    )
    auth_window_s: float = setting("SAFESEND_AUTH_WINDOW_S", 300.0, _seconds, "HMAC timestamp window")
    auth_certs_url: str | None = setting(
        "SAFESEND_AUTH_GOOGLE_CERTS_URL",
        None,
        _text,
        "Google's ID-token certificates (tests serve their own)",
        shown="Google's",
    )
    auth_trust_cloud_run_iam: bool = setting(
        "SAFESEND_AUTH_TRUST_CLOUD_RUN_IAM",
        False,
        _flag,
        "accept ID tokens Cloud Run IAM verified and stripped (behind IAM only)",
    )
    public_invoker: bool = setting(
        "SAFESEND_PUBLIC_INVOKER", False, _flag, "this function is invocable by allUsers: the app is the only gate"
    )
    api_deciders: frozenset[str] = setting(
        "SAFESEND_API_DECIDERS",
        frozenset(),
        _lower_names,
        "callers that may decide review items by API (POST /decide on send): `key:<key id>`, `hmac`, "
        "a caller service account; unset: off",
        shown="none",
    )
    auth_internal_api_keys: str | None = setting(
        "SAFESEND_AUTH_INTERNAL_API_KEYS",
        None,
        _text,
        "API keys for the internal endpoints (local stacks)",
        local_only=True,
    )
    auth_disabled: bool = setting(
        "SAFESEND_AUTH_DISABLED", False, _flag, "no authentication (local stacks only)", local_only=True
    )
    # Callbacks to the caller's workflow (callbacks.py)
    callback_allowed_hosts: frozenset[str] = setting(
        "SAFESEND_CALLBACK_ALLOWED_HOSTS",
        frozenset(),
        _lower_names,
        "hosts callback_url may target (`*.suffix` allowed); none: no callbacks",
        shown="none",
    )
    callback_hmac_secret: str | None = setting(
        "SAFESEND_CALLBACK_HMAC_SECRET", None, _text, "signs every callback (>= 32 bytes)", secret=True
    )
    callback_horizon_s: float = setting(
        "SAFESEND_CALLBACK_HORIZON_S", 3600.0, _seconds, "how long an unanswered callback is retried"
    )
    callback_allow_http: bool = setting(
        "SAFESEND_CALLBACK_ALLOW_HTTP",
        False,
        _flag,
        "plain http and loopback callback targets (local stacks)",
        local_only=True,
    )
    # Reviewers (notify.py, console.py)
    notify_chat_webhook_url: str | None = setting(
        "SAFESEND_NOTIFY_CHAT_WEBHOOK_URL", None, _text, "Google Chat incoming webhook for review items", secret=True
    )
    notify_slack_webhook_url: str | None = setting(
        "SAFESEND_NOTIFY_SLACK_WEBHOOK_URL", None, _text, "Slack incoming webhook for review items", secret=True
    )
    notify_email_to: str | None = setting(
        "SAFESEND_NOTIFY_EMAIL_TO", None, _text, "reviewers' address (mailed through safesend's own send path)"
    )
    notify_email_channel: str = setting(
        "SAFESEND_NOTIFY_EMAIL_CHANNEL", "review-notifications", _text, "channel of those emails (on_unknown = retry)"
    )
    review_notify_timeout_s: float = setting(
        "SAFESEND_REVIEW_NOTIFY_TIMEOUT_S",
        0.0,
        _seconds,
        "where notify runs: an item it never took up is published again after this (0: off)",
    )
    review_console_url: str | None = setting(
        "SAFESEND_REVIEW_CONSOLE_URL", None, _text, "the console's https base URL (links in chat; its CSRF origin)"
    )
    # The review console's sign-in (reviewer_auth.ReviewerSettings parses and checks these)
    review_iap_audience: str | None = setting(
        "SAFESEND_REVIEW_IAP_AUDIENCE",
        None,
        _text,
        "IAP audience(s) of the console, Cloud Run form `/projects/NUMBER/locations/REGION/services/NAME`",
    )
    review_allowed_emails: str | None = setting(
        "SAFESEND_REVIEW_ALLOWED_EMAILS", None, _text, "reviewers allowed after IAP (comma-separated)"
    )
    review_allowed_domains: str | None = setting(
        "SAFESEND_REVIEW_ALLOWED_DOMAINS", None, _text, "Workspace domains allowed after IAP (the signed `hd` claim)"
    )
    review_csrf_secret: str | None = setting(
        "SAFESEND_REVIEW_CSRF_SECRET", None, _text, "signs the console's CSRF tokens (>= 32 bytes)", secret=True
    )
    review_iap_keys_url: str | None = setting(
        "SAFESEND_REVIEW_IAP_KEYS_URL", None, _text, "IAP's signing keys (tests serve their own)", shown="Google's"
    )
    review_dev_identity: str | None = setting(
        "SAFESEND_REVIEW_DEV_IDENTITY",
        None,
        _text,
        "the console's development identity, e.g. dev@localhost",
        local_only=True,
    )
    # Input bounds
    max_request_bytes: int = setting(
        "SAFESEND_MAX_REQUEST_BYTES", 1_048_576, _count, "request body limit", shown="1 MiB"
    )
    max_body_bytes: int = setting("SAFESEND_MAX_BODY_BYTES", 400_000, _count, "text + html limit", shown="400 kB")
    # Logs
    log_level: str = setting(
        LOG_LEVEL_ENV,
        "INFO",
        _log_level,
        "least severity logged (the alerts' signal lines are written at any level); logs are JSON lines "
        "with `severity`, `message` and the request's trace, never bodies or secrets",
    )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Every declared setting from `env` (default: the process environment), then the rules
        that tie several together. Raises ConfigurationError naming the setting at fault."""
        env = os.environ if env is None else env
        refuse_local_only_on_cloud(env)
        values: dict[str, Any] = {}
        for spec in fields(cls):
            raw = env.get(spec.metadata["env"]) or ""
            if spec.name == "project":
                raw = raw or next((env[a] for a in PROJECT_ALIASES if env.get(a)), "")
            if raw:
                values[spec.name] = spec.metadata["parse"](spec.metadata["env"], raw)
        settings = cls(**values)
        settings._check()
        if on_google_cloud(env):  # a Graph mailbox's simulator endpoints are local-only switches too
            directory = MailboxDirectory.load(settings)
            refuse_non_microsoft_endpoints((m.id, m.graph) for m in directory)
        return settings

    def _check(self) -> None:
        if not self.project:
            raise ConfigurationError("GOOGLE_CLOUD_PROJECT is not set")
        if not is_valid_hostname(self.message_id_domain):
            raise ConfigurationError(f"SAFESEND_MESSAGE_ID_DOMAIN {self.message_id_domain!r} is not a valid host name")
        if self.store == "postgres" and not self.postgres_dsn:
            raise ConfigurationError("SAFESEND_STORE=postgres needs SAFESEND_POSTGRES_DSN")
        if self.tasks_queue and not self.reconcile_url:
            raise ConfigurationError("SAFESEND_TASKS_QUEUE is set but SAFESEND_RECONCILE_URL is not")
        if self.max_body_bytes > MAX_STORABLE_BODY_BYTES:
            raise ConfigurationError(
                f"SAFESEND_MAX_BODY_BYTES may not exceed {MAX_STORABLE_BODY_BYTES}: the "
                "payload lives in one Firestore document (1 MiB, events included)"
            )
        problems = self.timing.problems([], self.send_timeout_s)  # per channel: runtime.preflight
        if problems:
            raise ConfigurationError(
                "timing settings break a guarantee: "
                + "; ".join(problems)
                + " (SAFESEND_LEASE_S, SAFESEND_SEND_TIMEOUT_S, SAFESEND_INDEX_LAG_S, "
                "SAFESEND_UNKNOWN_WINDOW_S, SAFESEND_VERIFY_HORIZON_S)"
            )

    def __post_init__(self) -> None:
        """Defaults derived from other settings (frozen: set once, here)."""
        if not self.message_id_domain:
            object.__setattr__(self, "message_id_domain", _domain_of(self.default_from) or FALLBACK_DOMAIN)
        if not self.auth_audiences and self.reconcile_url:
            object.__setattr__(self, "auth_audiences", frozenset({self.reconcile_url}))

    @property
    def timing(self) -> Timing:
        return Timing(
            lease_s=self.lease_s,
            index_lag_s=self.index_lag_s,
            unknown_window_s=self.unknown_window_s,
            recheck_s=self.recheck_s,
            publish_lease_s=self.publish_lease_s,
            verify_horizon_s=self.verify_horizon_s,
            retry_horizon_s=self.retry_horizon_s,
            history_check_s=self.history_check_s,
        )

    def check_auth(self) -> None:
        """Fail closed: a deployment must say how somebody authenticates. Each function checks its
        own role per request (a caller endpoint with no caller credentials configured refuses all)."""
        caller_keys, internal_keys = self.api_key_rings()  # validates the entries
        if self.public_invoker and (self.auth_disabled or self.auth_trust_cloud_run_iam):
            raise ConfigurationError(
                "SAFESEND_PUBLIC_INVOKER: a publicly invocable function must check every "
                "credential itself; SAFESEND_AUTH_DISABLED and SAFESEND_AUTH_TRUST_CLOUD_RUN_IAM "
                "(which accepts unsigned ID tokens) must be off"
            )
        if self.public_invoker and not (caller_keys or self.auth_hmac_secret):
            raise ConfigurationError(
                "SAFESEND_PUBLIC_INVOKER needs SAFESEND_AUTH_API_KEYS or "
                "SAFESEND_AUTH_HMAC_SECRET: nothing else gates a public function"
            )
        if self.auth_disabled:
            return
        if not (
            self.auth_hmac_secret
            or self.auth_caller_emails
            or self.auth_internal_emails
            or caller_keys
            or internal_keys
        ):
            raise ConfigurationError(
                "no authentication configured: set SAFESEND_AUTH_API_KEYS, "
                "SAFESEND_AUTH_HMAC_SECRET and/or SAFESEND_AUTH_CALLER_SERVICE_ACCOUNTS "
                "(send, status) and SAFESEND_AUTH_INTERNAL_INVOKERS (reconcile, sweep), "
                "or SAFESEND_AUTH_DISABLED=1 on a local stack"
            )
        if (self.auth_caller_emails or self.auth_internal_emails) and not self.auth_audiences:
            raise ConfigurationError("SAFESEND_AUTH_AUDIENCES is not set: ID tokens cannot be checked")
        if self.auth_hmac_secret is not None and len(self.auth_hmac_secret.encode()) < 32:
            raise ConfigurationError("SAFESEND_AUTH_HMAC_SECRET must be at least 32 bytes")

    def api_key_rings(self) -> tuple[ApiKeyRing, ApiKeyRing]:
        """(caller keys, internal keys); raises ConfigurationError on a malformed entry."""
        return (
            ApiKeyRing.parse(self.auth_api_keys, "SAFESEND_AUTH_API_KEYS"),
            ApiKeyRing.parse(self.auth_internal_api_keys, "SAFESEND_AUTH_INTERNAL_API_KEYS"),
        )

    def reviewer_targets(self) -> ReviewerTargets:
        configured = {
            name
            for name, value in (
                ("chat", self.notify_chat_webhook_url),
                ("slack", self.notify_slack_webhook_url),
                ("email", self.notify_email_to),
            )
            if value
        }
        return ReviewerTargets(
            frozenset(configured),
            self.notify_email_to,
            self.notify_email_channel,
            self.review_console_url,
            self.review_notify_timeout_s,
        )

    def check_callbacks(self) -> None:
        """Callbacks are signed, so accepting a callback_url needs the secret they are signed with."""
        if self.callback_allowed_hosts and not self.callback_hmac_secret:
            raise ConfigurationError(
                "SAFESEND_CALLBACK_ALLOWED_HOSTS is set but SAFESEND_CALLBACK_HMAC_SECRET "
                "is not: callbacks are always signed"
            )
        if self.callback_hmac_secret is not None and len(self.callback_hmac_secret.encode()) < 32:
            raise ConfigurationError("SAFESEND_CALLBACK_HMAC_SECRET must be at least 32 bytes")


def _domain_of(address: str | None) -> str | None:
    if not address:
        return None
    addr = parseaddr(address)[1]
    return addr.rsplit("@", 1)[1].lower() if "@" in addr else None


def settings_table() -> str:
    """The README's configuration table, made from the declarations above."""
    rows = ["| variable | default | meaning |", "|---|---|---|"]
    for spec in fields(Settings):
        meta = spec.metadata
        shown = meta["shown"] if meta["shown"] is not None else _shown(spec.default)
        notes = (" Secret Manager in the deployment." if meta["secret"] else "") + (
            " Local stacks only: refused at start-up on Cloud Run." if meta["local_only"] else ""
        )
        rows.append(f"| `{meta['env']}` | {shown} | {meta['doc']}.{notes} |")
    return "\n".join(rows) + "\n"


def _shown(default: Any) -> str:
    if default is None or default == frozenset():
        return "none"
    if isinstance(default, bool):
        return "on" if default else "off"
    if isinstance(default, float) and default.is_integer():
        return f"{int(default)}"
    return f"`{default}`" if isinstance(default, str) else f"{default}"


def local_only_settings() -> frozenset[str]:
    """What a deployed configuration must never carry (the infra policy tests read this)."""
    return frozenset(spec.metadata["env"] for spec in fields(Settings) if spec.metadata["local_only"])


def on_google_cloud(env: Mapping[str, str]) -> bool:
    """Running as a Cloud Run service or a Cloud Function (CLOUD_MARKERS present)."""
    return any(env.get(name) for name in CLOUD_MARKERS)


def refuse_local_only_on_cloud(env: Mapping[str, str]) -> None:
    """Start-up gate: a local-only switch set on a deployed function (one stray --update-env-vars)
    would turn authentication off or open callbacks to plain http and private addresses.
    Refused there whatever its value: an "off" has no business in a deployment either."""
    if not on_google_cloud(env):
        return
    found = sorted(name for name in (*local_only_settings(), *LOCAL_ONLY_ENVIRONMENT) if env.get(name))
    if found:
        marker = next(name for name in CLOUD_MARKERS if env.get(name))
        raise ConfigurationError(
            f"{', '.join(found)}: local stacks only, refused on Cloud Run / Cloud Functions ({marker} is set)"
        )


def env_name(field_name: str) -> str:
    """The environment variable of a declared setting (one declaration, read by name elsewhere)."""
    name: str = next(spec.metadata["env"] for spec in fields(Settings) if spec.name == field_name)
    return name


if __name__ == "__main__":
    sys.stdout.write(settings_table())
