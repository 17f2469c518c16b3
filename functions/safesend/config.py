"""Settings from the environment, read once per instance. Bad values fail at start-up, not mid-send."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from email.utils import parseaddr
from pathlib import Path
from typing import Mapping

from .errors import ConfigurationError
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
    # Input bounds
    max_request_bytes: int = 1_048_576
    max_body_bytes: int = 400_000
    # Test-only fault injection (never set in infra/)
    enable_fault_injection: bool = False

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
            max_request_bytes=int(_float(env, "SAFESEND_MAX_REQUEST_BYTES", 1_048_576)),
            max_body_bytes=int(_float(env, "SAFESEND_MAX_BODY_BYTES", 400_000)),
            enable_fault_injection=_bool(env, "SAFESEND_ENABLE_FAULT_INJECTION", False),
        )

    def check_auth(self) -> None:
        """Fail closed: a deployment must say how somebody authenticates. Each function checks its
        own role per request (a caller endpoint with no caller credentials configured refuses all)."""
        if self.auth_disabled:
            return
        if not (self.auth_hmac_secret or self.auth_caller_emails or self.auth_internal_emails):
            raise ConfigurationError("no authentication configured: set SAFESEND_AUTH_HMAC_SECRET and/or "
                                     "SAFESEND_AUTH_CALLER_SERVICE_ACCOUNTS (send, status) and "
                                     "SAFESEND_AUTH_INTERNAL_INVOKERS (reconcile, sweep), "
                                     "or SAFESEND_AUTH_DISABLED=1 on a local stack")
        if (self.auth_caller_emails or self.auth_internal_emails) and not self.auth_audiences:
            raise ConfigurationError("SAFESEND_AUTH_AUDIENCES is not set: ID tokens cannot be checked")
        if self.auth_hmac_secret is not None and len(self.auth_hmac_secret.encode()) < 32:
            raise ConfigurationError("SAFESEND_AUTH_HMAC_SECRET must be at least 32 bytes")


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
