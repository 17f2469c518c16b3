"""Wiring: settings -> adapters -> service, built lazily once per function instance.

A function's first request pays only for what it uses (bench 7, cold start): the Gmail adapter
(googleapiclient, httplib2, the credential lookup) is built on the first Gmail call (LazyMailer),
the Cloud Tasks and Pub/Sub clients on the first task or publish, the reviewer sign-in settings
only where the console runs. What a bad setting must stop is still checked when functions/main.py
is imported (check_configuration); that check needs no network and no Google client.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..config import Settings
from ..core.auth import Authenticator, AuthPolicy
from ..core.callbacks import CallbackPolicy
from ..core.errors import ConfigurationError, MailboxUnavailableError
from ..core.mailboxes import Mailbox, MailboxDirectory
from ..core.mime import probe_mime
from ..core.model import Accepted, Bucket, Failure, HistoryPage, MailboxHit
from ..core.policy import ChannelPolicies
from ..core.ports import JobStore, MailboxLedger, Mailer, NoticePoster
from ..logs import log
from ..usecases.senders import SenderMailboxes

if TYPE_CHECKING:
    from ..usecases.service import SafeSendService

_lock = threading.Lock()
_runtime: Runtime | None = None


@dataclass
class Runtime:
    settings: Settings
    policies: ChannelPolicies
    service: SafeSendService
    authenticator: Authenticator
    callbacks: CallbackPolicy = CallbackPolicy()


def build_authenticator(settings: Settings) -> Authenticator:
    from ..adapters.google_id_token import GOOGLE_CERTS_URL, GoogleIdTokenVerifier

    settings.check_auth()
    if settings.auth_disabled:
        log(logging.WARNING, "AUTHENTICATION IS DISABLED (SAFESEND_AUTH_DISABLED): local use only")
    caller_keys, internal_keys = settings.api_key_rings()
    policy = AuthPolicy(
        hmac_secret=settings.auth_hmac_secret.encode() if settings.auth_hmac_secret else None,
        caller_emails=settings.auth_caller_emails,
        internal_emails=settings.auth_internal_emails,
        window_s=settings.auth_window_s,
        disabled=settings.auth_disabled,
        caller_keys=caller_keys,
        internal_keys=internal_keys,
    )
    verifier = GoogleIdTokenVerifier(
        settings.auth_audiences,
        settings.auth_certs_url or GOOGLE_CERTS_URL,
        trust_cloud_run_iam=settings.auth_trust_cloud_run_iam,
    )
    return Authenticator(policy, verifier, time.time)


def preflight(settings: Settings) -> ChannelPolicies:
    """Every check that needs no network, run when the module is imported so a bad setting stops
    the deployment (the new revision never becomes ready) instead of failing each send: channel
    policies, timing per channel, sender mailboxes and their pools, a probe message built with the
    Message-ID domain and default sender, and the authentication settings. Raises
    ConfigurationError naming what is wrong."""
    policies = ChannelPolicies.load(settings.channels_file, settings.channels_json)
    problems = settings.timing.problems([policies.get(name) for name in policies.names()], settings.send_timeout_s)
    if problems:
        raise ConfigurationError("timing settings break a guarantee: " + "; ".join(problems))
    try:
        probe_mime(settings.message_id_domain, settings.default_from)
    except ValueError as exc:
        raise ConfigurationError(
            f"a message cannot be built with SAFESEND_MESSAGE_ID_DOMAIN="
            f"{settings.message_id_domain!r} and SAFESEND_DEFAULT_FROM: {exc}"
        ) from None
    mailboxes = MailboxDirectory.load(settings)
    mailboxes.check_channels(policies.names())
    mailboxes.check_default_sender(settings.default_from, policies.names())
    settings.check_auth()
    settings.check_callbacks()
    _check_reviewer_email(settings, policies)
    return policies


def _check_reviewer_email(settings: Settings, policies: ChannelPolicies) -> None:
    """Notification emails are safesend jobs on their own channel: it must exist and retry."""
    if not settings.notify_email_to:
        return
    try:
        policy = policies.get(settings.notify_email_channel)
    except ValueError:
        raise ConfigurationError(
            f"SAFESEND_NOTIFY_EMAIL_TO is set but the channel "
            f"{settings.notify_email_channel!r} (SAFESEND_NOTIFY_EMAIL_CHANNEL) is not "
            "configured"
        ) from None
    if policy.on_unknown.value != "retry":
        raise ConfigurationError(f'channel {policy.name}: reviewer emails need on_unknown = "retry"')


def build_store(settings: Settings) -> JobStore:
    """The job store SAFESEND_STORE names: Firestore unless it says postgres. Clients stay lazy (the
    PostgreSQL pool connects in the background; its schema is migrated or checked on first use)."""
    if settings.store == "postgres":
        from ..adapters.postgres_store import build_store as build_postgres_store

        return build_postgres_store(settings)
    from ..adapters.firestore_store import FirestoreJobStore

    return FirestoreJobStore(settings.project, settings.jobs_collection)


class LazyMailer:
    """The Gmail adapter, imported and built (its credentials included) on its first call: a status
    request, a replay or a sweep with nothing to check never pays for googleapiclient, httplib2 or
    the credential lookup. A build that fails is tried again on the next call; until it succeeds a
    send answers like a credential refresh that failed (not accepted, retryable: the build runs
    before any request, so nothing reached Gmail) and a read raises MailboxUnavailableError."""

    def __init__(self, build: Callable[[], Mailer]):
        self._build = build
        self._mailer: Mailer | None = None
        self._lock = threading.Lock()

    def _get(self) -> Mailer:
        with self._lock:  # one build per instance, whichever thread (request, checkpoint refresh) comes first
            if self._mailer is None:
                self._mailer = self._build()
            return self._mailer

    def warm(self) -> None:
        """Build now, off the request path (safesend/bootstrap/warmup.py), the adapter's own client
        included when it has a warm() (the Gmail discovery client); raises what the build raised."""
        warm_adapter = getattr(self._get(), "warm", None)
        if callable(warm_adapter):
            warm_adapter()

    def _for_read(self) -> Mailer:
        try:
            return self._get()
        except Exception as exc:  # any build failure: the read cannot happen now
            raise MailboxUnavailableError(f"gmail is not available: {_described(exc)}") from exc

    def send(self, raw: bytes) -> Accepted | Failure:
        try:
            mailer = self._get()
        except Exception as exc:  # noqa: BLE001 - raised before any request was written: nothing was sent
            log(logging.CRITICAL, "gmail could not be set up; nothing was sent", error=_described(exc))
            return Failure(Bucket.NOT_ACCEPTED, True, "auth_refresh", _described(exc))
        return mailer.send(raw)

    def find_by_message_id(self, message_id: str) -> Sequence[MailboxHit]:
        return self._for_read().find_by_message_id(message_id)

    def stored_message_id(self, gmail_id: str) -> str | None:
        return self._for_read().stored_message_id(gmail_id)

    def current_history_id(self) -> str:
        return self._for_read().current_history_id()

    def added_since(self, start_history_id: str, max_pages: int = 5) -> HistoryPage:
        return self._for_read().added_since(start_history_id, max_pages)

    def message_ids_of(self, gmail_ids: Sequence[str]) -> dict[str, str]:
        return self._for_read().message_ids_of(gmail_ids)


def _described(exc: Exception) -> str:
    """The type and text of a setup error (configuration and google-auth texts name settings, never secrets)."""
    return f"{type(exc).__name__}: {exc}"[:300]


def build_ledger(settings: Settings, store: JobStore) -> MailboxLedger:
    """The shared mailbox budget, in the store SAFESEND_STORE names (every instance sees the same):
    a Firestore document per mailbox, or a PostgreSQL row per mailbox on the job store's pool."""
    if settings.store == "postgres":
        from ..adapters.postgres_ledger import PostgresMailboxLedger

        pool = getattr(store, "pool", None)
        if pool is None:
            raise ConfigurationError("SAFESEND_STORE=postgres: the mailbox ledger needs the job store's pool")
        return PostgresMailboxLedger(pool, migrate=settings.postgres_migrate)
    from ..adapters.firestore_ledger import FirestoreMailboxLedger

    return FirestoreMailboxLedger(settings.project)


def build_mailbox_mailer(settings: Settings, mailbox: Mailbox) -> Mailer:
    """A configured mailbox's Gmail client, built on its first call (LazyMailer), once per instance:
    keyless delegation as its delegated user, or its own OAuth token read from Secret Manager; none
    against a local simulator (SAFESEND_GMAIL_API_ENDPOINT without credentials), as for the default."""

    if mailbox.kind == "graph":  # a Microsoft 365 mailbox: adapters/graph_build.py
        from ..adapters.graph_build import build_graph_mailer

        return LazyMailer(lambda: build_graph_mailer(settings, mailbox))

    def build() -> Mailer:
        from ..adapters.gmail_auth import load_gmail_credentials
        from ..adapters.gmail_mailer import GmailMailer

        credentials = None
        if not settings.gmail_api_endpoint:
            if mailbox.token_secret:
                from ..adapters.secret_manager import read_secret

                token = read_secret(settings.project, mailbox.token_secret)
                credentials = load_gmail_credentials(token, None, None)
            else:
                credentials = load_gmail_credentials(None, None, mailbox.delegated_user)
        return GmailMailer(
            user=mailbox.user_id,
            credentials=credentials,
            api_endpoint=settings.gmail_api_endpoint,
            send_timeout_s=settings.send_timeout_s,
            read_timeout_s=settings.read_timeout_s,
        )

    return LazyMailer(build)


def build_senders(settings: Settings, store: JobStore, default_mailer: Callable[[], Mailer]) -> SenderMailboxes:
    """The configured mailboxes with their shared ledger and lazy clients. Unconfigured: today's one
    mailbox, unpaced; its ledger only learns Gmail's daily-limit refusals (so its jobs wait)."""
    directory = MailboxDirectory.load(settings)
    return SenderMailboxes(
        directory,
        build_ledger(settings, store),
        default_mailer,
        lambda mailbox: build_mailbox_mailer(settings, mailbox),
    )


def build_mailer(settings: Settings) -> Mailer:
    """The Gmail adapter the settings name (GmailMailer.from_settings: credentials, endpoint, timeouts)."""
    from ..adapters.gmail_mailer import GmailMailer

    return GmailMailer.from_settings(settings)


def build_runtime(settings: Settings) -> Runtime:
    """Create the adapters: Gmail on its first call, the Google clients on their first use."""
    from ..adapters.callback_http import HttpNotifier
    from ..adapters.chat_webhooks import RoutingNotifier, chat_webhook, slack_webhook
    from ..adapters.cloud_tasks import CloudTasksScheduler
    from ..adapters.pubsub_review import PubSubReviewPublisher
    from ..usecases.service import SafeSendService

    policies = preflight(settings)
    mailer = LazyMailer(lambda: build_mailer(settings))
    scheduler = None
    if settings.tasks_queue and settings.reconcile_url:
        scheduler = CloudTasksScheduler(
            settings.tasks_queue,
            settings.reconcile_url,
            settings.tasks_service_account,
            settings.tasks_emulator_host,
            api_key=settings.tasks_api_key,
            mailbox_queue_prefix=settings.mailbox_queue_prefix,
        )
    publisher = None
    if settings.review_topic:
        topic = settings.review_topic
        if "/" not in topic:
            topic = f"projects/{settings.project}/topics/{topic}"
        publisher = PubSubReviewPublisher(topic)
    callbacks = CallbackPolicy(settings.callback_allowed_hosts, settings.callback_allow_http)
    routes: dict[str, NoticePoster] = {}
    if callbacks.enabled and settings.callback_hmac_secret:
        routes["callback"] = HttpNotifier(callbacks, settings.callback_hmac_secret.encode())
    if settings.notify_chat_webhook_url:
        routes["chat"] = chat_webhook(settings.notify_chat_webhook_url)
    if settings.notify_slack_webhook_url:
        routes["slack"] = slack_webhook(settings.notify_slack_webhook_url)
    notifier = RoutingNotifier(routes) if routes else None
    store = build_store(settings)
    holder: list[SafeSendService] = []  # the service's own mailer, read at call time (crash points wrap it)
    senders = build_senders(settings, store, lambda: holder[0].mailer)
    service = SafeSendService(
        store, mailer, scheduler, publisher, policies, settings, notifier=notifier, senders=senders
    )
    holder.append(service)
    return Runtime(settings, policies, service, build_authenticator(settings), callbacks)


REVIEW_TARGETS = ("review", "router")  # the console's entry point, and the local stack's router


def check_configuration(env: Mapping[str, str] | None = None) -> None:
    """The import-time gate of functions/main.py: log the reason, then refuse to start. The review
    function (GOOGLE_FUNCTION_TARGET / FUNCTION_TARGET) also checks its reviewer sign-in settings."""
    env = os.environ if env is None else env
    target = env.get("GOOGLE_FUNCTION_TARGET") or env.get("FUNCTION_TARGET") or ""
    try:
        preflight(Settings.from_env(env))
        if (
            target in REVIEW_TARGETS
            or env.get("SAFESEND_REVIEW_IAP_AUDIENCE")
            or env.get("SAFESEND_REVIEW_DEV_IDENTITY")
        ):
            from ..entrypoints.reviewer_auth import ReviewerSettings  # only where the console runs

            ReviewerSettings.from_env(env)
    except ConfigurationError as exc:
        log(logging.CRITICAL, "refusing to start: configuration error", error=str(exc))
        raise


def get_runtime() -> Runtime:
    global _runtime  # noqa: PLW0603 - one runtime per instance, built on first use
    if _runtime is None:
        with _lock:
            if _runtime is None:
                _runtime = build_runtime(Settings.from_env())
    return _runtime
