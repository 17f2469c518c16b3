"""Wiring: settings -> adapters -> service, built lazily once per function instance."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from .auth import AuthPolicy, Authenticator
from .config import Settings
from .logs import log
from .policy import ChannelPolicies
from .service import SafeSendService

_lock = threading.Lock()
_runtime: "Runtime | None" = None


@dataclass
class Runtime:
    settings: Settings
    policies: ChannelPolicies
    service: SafeSendService
    authenticator: Authenticator


def build_authenticator(settings: Settings) -> Authenticator:
    from .adapters.google_id_token import GOOGLE_CERTS_URL, GoogleIdTokenVerifier

    settings.check_auth()
    if settings.auth_disabled:
        log(logging.WARNING, "AUTHENTICATION IS DISABLED (SAFESEND_AUTH_DISABLED): local use only")
    policy = AuthPolicy(
        hmac_secret=settings.auth_hmac_secret.encode() if settings.auth_hmac_secret else None,
        caller_emails=settings.auth_caller_emails, internal_emails=settings.auth_internal_emails,
        window_s=settings.auth_window_s, disabled=settings.auth_disabled)
    verifier = GoogleIdTokenVerifier(settings.auth_audiences, settings.auth_certs_url or GOOGLE_CERTS_URL,
                                     trust_cloud_run_iam=settings.auth_trust_cloud_run_iam)
    return Authenticator(policy, verifier, time.time)


def build_runtime(settings: Settings) -> Runtime:
    """Create the adapters (their Google clients stay lazy until first use)."""
    from .adapters.cloud_tasks import CloudTasksScheduler
    from .adapters.firestore_store import FirestoreJobStore
    from .adapters.gmail_auth import load_gmail_credentials
    from .adapters.gmail_mailer import GmailMailer
    from .adapters.pubsub_review import PubSubReviewPublisher

    policies = ChannelPolicies.load(settings.channels_file, settings.channels_json)
    credentials = None
    if not settings.gmail_api_endpoint or settings.gmail_credentials_json or settings.gmail_credentials_file:
        credentials = load_gmail_credentials(settings.gmail_credentials_json, settings.gmail_credentials_file,
                                             settings.gmail_delegated_user)
    mailer = GmailMailer(user=settings.gmail_user, credentials=credentials,
                         api_endpoint=settings.gmail_api_endpoint, send_timeout_s=settings.send_timeout_s,
                         read_timeout_s=settings.read_timeout_s)
    scheduler = None
    if settings.tasks_queue and settings.reconcile_url:
        scheduler = CloudTasksScheduler(settings.tasks_queue, settings.reconcile_url,
                                        settings.tasks_service_account, settings.tasks_emulator_host)
    publisher = None
    if settings.review_topic:
        topic = settings.review_topic
        if "/" not in topic:
            topic = f"projects/{settings.project}/topics/{topic}"
        publisher = PubSubReviewPublisher(topic)
    service = SafeSendService(
        FirestoreJobStore(settings.project, settings.jobs_collection), mailer, scheduler, publisher, policies,
        message_id_domain=settings.message_id_domain, timing=settings.timing,
        request_budget_s=settings.request_budget_s, send_timeout_s=settings.send_timeout_s,
        verify_message_id_every=settings.verify_message_id_every)
    return Runtime(settings, policies, service, build_authenticator(settings))


def get_runtime() -> Runtime:
    global _runtime
    if _runtime is None:
        with _lock:
            if _runtime is None:
                _runtime = build_runtime(Settings.from_env())
    return _runtime
