"""Settings from the environment, read once per instance. Bad values fail at start-up, not mid-send."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from email.utils import parseaddr
from pathlib import Path
from typing import Mapping

from .api_keys import ApiKeyRing
from .errors import ConfigurationError
from .notify import ReviewerTargets
from .keys import is_valid_hostname
from .lifecycle import Timing

DEFAULT_CHANNELS_FILE = Path(__file__).resolve().parent.parent / "channels.toml"
FALLBACK_DOMAIN = "safesend.localhost"
# One Firestore document holds the job (1 MiB limit) with its events; the MIME built from it then
# stays far below Gmail's 35 MB message limit.
MAX_STORABLE_BODY_BYTES = 700_000


@dataclass(frozen=True)
class Settings:
    project: str
    jobs_collection: str = "ai_jobs"
    message_id_domain: str = FALLBACK_DOMAIN
    default_from: str | None = None
    channels_file: str | None = str(DEFAULT_CHANNELS_FILE)
    channels_json: str | None = None
    # Gmail
    gmail_user: str = "me"
    gmail_api_endpoint: str | None = None  # the local simulator; None means real Gmail
    gmail_credentials_json: str | None = None
    gmail_credentials_file: str | None = None
    gmail_delegated_user: str | None = None
    send_timeout_s: float = 20.0  # wall-clock deadline of one send attempt, token refresh included
    read_timeout_s: float = 15.0
    verify_message_id_every: int = 100  # read back the stored Message-ID: 1st send, then 1 in N (0: never)
    # Timing
    timing: Timing = field(default_factory=Timing)
    request_budget_s: float = 40.0
    # Cloud Tasks
    tasks_queue: str | None = None
    tasks_emulator_host: str | None = None
    reconcile_url: str | None = None
    tasks_service_account: str | None = None
    tasks_api_key: str | None = None  # local stacks: the emulator sends no OIDC token, tasks carry this key
    # Pub/Sub
    review_topic: str | None = None
    # Sweeper
    sweep_batch: int = 50
    sweep_budget_s: float = 90.0
    # Who may call (see auth.py)
    auth_disabled: bool = False  # local stacks only; never set in infra/
    auth_hmac_secret: str | None = None
    auth_caller_emails: frozenset[str] = frozenset()
    auth_internal_emails: frozenset[str] = frozenset()
    auth_audiences: frozenset[str] = frozenset()
    auth_window_s: float = 300.0
    auth_certs_url: str | None = None
    auth_trust_cloud_run_iam: bool = False  # set by infra/: functions are behind IAM, never public
    auth_api_keys: str | None = None  # key_id:sha256 entries (api_keys.py), for send and status
    auth_internal_api_keys: str | None = None  # the same for reconcile/sweep: local stacks only
    public_invoker: bool = False  # this function is invocable by allUsers: the app is the only gate
    # Callbacks to the caller's workflow (callbacks.py)
    callback_hmac_secret: str | None = None
    callback_allowed_hosts: frozenset[str] = frozenset()
    callback_allow_http: bool = False  # plain http and loopback targets: local stacks only
    callback_horizon_s: float = 3600.0
    # Reviewers (notify.py): where review items are posted, and the console's address for links
    notify_chat_webhook_url: str | None = None  # secret: the URL is the credential
    notify_slack_webhook_url: str | None = None  # secret
    notify_email_to: str | None = None
    notify_email_channel: str = "review-notifications"
    review_console_url: str | None = None
    review_notify_timeout_s: float = 0.0  # > 0 where notify is deployed: unnotified items are republished
    # Input bounds
    max_request_bytes: int = 1_048_576
    max_body_bytes: int = 400_000

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "Settings":
        env = os.environ if env is None else env
        get = lambda name, default=None: (env.get(name) or default)  # noqa: E731
        project = get("GOOGLE_CLOUD_PROJECT") or get("GCLOUD_PROJECT") or get("SAFESEND_PROJECT")
        if not project:
            raise ConfigurationError("GOOGLE_CLOUD_PROJECT is not set")
        default_from = get("SAFESEND_DEFAULT_FROM")
        domain = get("SAFESEND_MESSAGE_ID_DOMAIN") or _domain_of(default_from) or FALLBACK_DOMAIN
        if not is_valid_hostname(domain):
            raise ConfigurationError(f"SAFESEND_MESSAGE_ID_DOMAIN {domain!r} is not a valid host name")
        queue = get("SAFESEND_TASKS_QUEUE")
        if queue and not get("SAFESEND_RECONCILE_URL"):
            raise ConfigurationError("SAFESEND_TASKS_QUEUE is set but SAFESEND_RECONCILE_URL is not")
        timing = Timing(
            lease_s=_float(env, "SAFESEND_LEASE_S", 120.0),
            index_lag_s=_float(env, "SAFESEND_INDEX_LAG_S", 90.0),
            unknown_window_s=_float(env, "SAFESEND_UNKNOWN_WINDOW_S", 300.0),
            recheck_s=_float(env, "SAFESEND_RECHECK_S", 60.0),
            publish_lease_s=_float(env, "SAFESEND_PUBLISH_LEASE_S", 60.0),
            verify_horizon_s=_float(env, "SAFESEND_VERIFY_HORIZON_S", 1800.0),
            retry_horizon_s=_float(env, "SAFESEND_RETRY_HORIZON_S", 3600.0),
            history_check_s=_float(env, "SAFESEND_HISTORY_CHECK_S", 5.0),
        )
        send_timeout = _float(env, "SAFESEND_SEND_TIMEOUT_S", 20.0)
        if _float(env, "SAFESEND_MAX_BODY_BYTES", 400_000) > MAX_STORABLE_BODY_BYTES:
            raise ConfigurationError(f"SAFESEND_MAX_BODY_BYTES may not exceed {MAX_STORABLE_BODY_BYTES}: the "
                                     "payload lives in one Firestore document (1 MiB, events included)")
        problems = timing.problems([], send_timeout)  # per channel: runtime.preflight, with the policies
        if problems:
            raise ConfigurationError("timing settings break a guarantee: " + "; ".join(problems)
                                     + " (SAFESEND_LEASE_S, SAFESEND_SEND_TIMEOUT_S, SAFESEND_INDEX_LAG_S, "
                                     "SAFESEND_UNKNOWN_WINDOW_S, SAFESEND_VERIFY_HORIZON_S)")
        return cls(
            project=project,
            jobs_collection=get("SAFESEND_JOBS_COLLECTION", "ai_jobs"),
            message_id_domain=domain,
            default_from=default_from,
            channels_file=get("SAFESEND_CHANNELS_FILE", str(DEFAULT_CHANNELS_FILE)),
            channels_json=get("SAFESEND_CHANNELS_JSON"),
            gmail_user=get("SAFESEND_GMAIL_USER", "me"),
            gmail_api_endpoint=get("SAFESEND_GMAIL_API_ENDPOINT"),
            gmail_credentials_json=get("SAFESEND_GMAIL_CREDENTIALS_JSON"),
            gmail_credentials_file=get("SAFESEND_GMAIL_CREDENTIALS_FILE"),
            gmail_delegated_user=get("SAFESEND_GMAIL_DELEGATED_USER"),
            send_timeout_s=send_timeout,
            read_timeout_s=_float(env, "SAFESEND_READ_TIMEOUT_S", 15.0),
            verify_message_id_every=int(_float(env, "SAFESEND_VERIFY_MESSAGE_ID_EVERY", 100)),
            timing=timing,
            request_budget_s=_float(env, "SAFESEND_REQUEST_BUDGET_S", 40.0),
            tasks_queue=queue,
            tasks_emulator_host=get("SAFESEND_TASKS_EMULATOR_HOST"),
            reconcile_url=get("SAFESEND_RECONCILE_URL"),
            tasks_service_account=get("SAFESEND_TASKS_SERVICE_ACCOUNT"),
            tasks_api_key=get("SAFESEND_TASKS_API_KEY"),
            review_topic=get("SAFESEND_REVIEW_TOPIC"),
            sweep_batch=int(_float(env, "SAFESEND_SWEEP_BATCH", 50)),
            sweep_budget_s=_float(env, "SAFESEND_SWEEP_BUDGET_S", 90.0),
            auth_disabled=_bool(env, "SAFESEND_AUTH_DISABLED", False),
            auth_hmac_secret=get("SAFESEND_AUTH_HMAC_SECRET"),
            auth_caller_emails=_emails(get("SAFESEND_AUTH_CALLER_SERVICE_ACCOUNTS")),
            auth_internal_emails=_emails(get("SAFESEND_AUTH_INTERNAL_INVOKERS")),
            auth_audiences=_list(get("SAFESEND_AUTH_AUDIENCES")) or _list(get("SAFESEND_RECONCILE_URL")),
            auth_window_s=_float(env, "SAFESEND_AUTH_WINDOW_S", 300.0),
            auth_certs_url=get("SAFESEND_AUTH_GOOGLE_CERTS_URL"),
            auth_trust_cloud_run_iam=_bool(env, "SAFESEND_AUTH_TRUST_CLOUD_RUN_IAM", False),
            auth_api_keys=get("SAFESEND_AUTH_API_KEYS"),
            auth_internal_api_keys=get("SAFESEND_AUTH_INTERNAL_API_KEYS"),
            public_invoker=_bool(env, "SAFESEND_PUBLIC_INVOKER", False),
            callback_hmac_secret=get("SAFESEND_CALLBACK_HMAC_SECRET"),
            callback_allowed_hosts=frozenset(h.lower() for h in _list(get("SAFESEND_CALLBACK_ALLOWED_HOSTS"))),
            callback_allow_http=_bool(env, "SAFESEND_CALLBACK_ALLOW_HTTP", False),
            callback_horizon_s=_float(env, "SAFESEND_CALLBACK_HORIZON_S", 3600.0),
            notify_chat_webhook_url=get("SAFESEND_NOTIFY_CHAT_WEBHOOK_URL"),
            notify_slack_webhook_url=get("SAFESEND_NOTIFY_SLACK_WEBHOOK_URL"),
            notify_email_to=get("SAFESEND_NOTIFY_EMAIL_TO"),
            notify_email_channel=get("SAFESEND_NOTIFY_EMAIL_CHANNEL", "review-notifications"),
            review_console_url=get("SAFESEND_REVIEW_CONSOLE_URL"),
            review_notify_timeout_s=_float(env, "SAFESEND_REVIEW_NOTIFY_TIMEOUT_S", 0.0),
            max_request_bytes=int(_float(env, "SAFESEND_MAX_REQUEST_BYTES", 1_048_576)),
            max_body_bytes=int(_float(env, "SAFESEND_MAX_BODY_BYTES", 400_000)),
        )

    def check_auth(self) -> None:
        """Fail closed: a deployment must say how somebody authenticates. Each function checks its
        own role per request (a caller endpoint with no caller credentials configured refuses all)."""
        caller_keys, internal_keys = self.api_key_rings()  # validates the entries
        if self.public_invoker and (self.auth_disabled or self.auth_trust_cloud_run_iam):
            raise ConfigurationError("SAFESEND_PUBLIC_INVOKER: a publicly invocable function must check every "
                                     "credential itself; SAFESEND_AUTH_DISABLED and SAFESEND_AUTH_TRUST_CLOUD_RUN_IAM "
                                     "(which accepts unsigned ID tokens) must be off")
        if self.public_invoker and not (caller_keys or self.auth_hmac_secret):
            raise ConfigurationError("SAFESEND_PUBLIC_INVOKER needs SAFESEND_AUTH_API_KEYS or "
                                     "SAFESEND_AUTH_HMAC_SECRET: nothing else gates a public function")
        if self.auth_disabled:
            return
        if not (self.auth_hmac_secret or self.auth_caller_emails or self.auth_internal_emails or caller_keys
                or internal_keys):
            raise ConfigurationError("no authentication configured: set SAFESEND_AUTH_API_KEYS, "
                                     "SAFESEND_AUTH_HMAC_SECRET and/or SAFESEND_AUTH_CALLER_SERVICE_ACCOUNTS "
                                     "(send, status) and SAFESEND_AUTH_INTERNAL_INVOKERS (reconcile, sweep), "
                                     "or SAFESEND_AUTH_DISABLED=1 on a local stack")
        if (self.auth_caller_emails or self.auth_internal_emails) and not self.auth_audiences:
            raise ConfigurationError("SAFESEND_AUTH_AUDIENCES is not set: ID tokens cannot be checked")
        if self.auth_hmac_secret is not None and len(self.auth_hmac_secret.encode()) < 32:
            raise ConfigurationError("SAFESEND_AUTH_HMAC_SECRET must be at least 32 bytes")

    def api_key_rings(self) -> tuple[ApiKeyRing, ApiKeyRing]:
        """(caller keys, internal keys); raises ConfigurationError on a malformed entry."""
        return (ApiKeyRing.parse(self.auth_api_keys, "SAFESEND_AUTH_API_KEYS"),
                ApiKeyRing.parse(self.auth_internal_api_keys, "SAFESEND_AUTH_INTERNAL_API_KEYS"))

    def reviewer_targets(self) -> "ReviewerTargets":
        configured = {name for name, value in (("chat", self.notify_chat_webhook_url),
                                               ("slack", self.notify_slack_webhook_url),
                                               ("email", self.notify_email_to)) if value}
        return ReviewerTargets(frozenset(configured), self.notify_email_to, self.notify_email_channel,
                               self.review_console_url, self.review_notify_timeout_s)

    def check_callbacks(self) -> None:
        """Callbacks are signed, so accepting a callback_url needs the secret they are signed with."""
        if self.callback_allowed_hosts and not self.callback_hmac_secret:
            raise ConfigurationError("SAFESEND_CALLBACK_ALLOWED_HOSTS is set but SAFESEND_CALLBACK_HMAC_SECRET "
                                     "is not: callbacks are always signed")
        if self.callback_hmac_secret is not None and len(self.callback_hmac_secret.encode()) < 32:
            raise ConfigurationError("SAFESEND_CALLBACK_HMAC_SECRET must be at least 32 bytes")


def _list(raw: str | None) -> frozenset[str]:
    return frozenset(item.strip() for item in (raw or "").split(",") if item.strip())


def _emails(raw: str | None) -> frozenset[str]:
    return frozenset(item.lower() for item in _list(raw))


def _domain_of(address: str | None) -> str | None:
    if not address:
        return None
    addr = parseaddr(address)[1]
    return addr.rsplit("@", 1)[1].lower() if "@" in addr else None


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw in (None, ""):
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigurationError(f"{name} must be a number, got {raw!r}") from None
    if not math.isfinite(value) or value < 0:
        raise ConfigurationError(f"{name} must be a finite number >= 0, got {raw!r}")
    return value


def _bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = (env.get(name) or "").strip().lower()
    if not raw:
        return default
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise ConfigurationError(f"{name} must be true or false, got {raw!r}")
