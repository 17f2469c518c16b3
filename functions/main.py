"""Cloud Functions entry points. Thin on purpose: everything lives in the `safesend` package.

Deployed as HTTP functions from this directory (see infra/):
  send       POST, called by n8n with a job; POST <send URL>/decide: a caller's decision on a job in
             review (off unless SAFESEND_API_DECIDERS; it needs what send has: the store and Gmail)
  reconcile  POST, called by Cloud Tasks to settle an ambiguous or delayed job
  sweep      POST, called by Cloud Scheduler to find stale or lost jobs
  status     GET,  job state and events by job_id or dedup key; GET .../mailboxes: the sender mailboxes' budgets
  notify     POST, Pub/Sub push of a review item: tell the reviewers (chat, email)
  review     GET/POST, the reviewers' console behind Identity-Aware Proxy: evidence and decisions
"""

import functools
from typing import TYPE_CHECKING

import functions_framework
from flask import Request

from safesend.bootstrap.runtime import LazyMailer, check_configuration, get_runtime
from safesend.bootstrap.warmup import function_target, warm_after_fork
from safesend.entrypoints.http_api import HttpApi, Response

if TYPE_CHECKING:
    from safesend.entrypoints.console import Response as PageResponse
    from safesend.entrypoints.console import ReviewConsole

check_configuration()  # a bad setting stops the deployment here, not the mail later
_api = HttpApi(get_runtime)


def _warm_send() -> None:
    """The send function's start-up: its runtime and Gmail client, built in the serving worker."""
    mailer = get_runtime().service.mailer
    if isinstance(mailer, LazyMailer):
        mailer.warm()


warm_after_fork(function_target(), _warm_send)  # send only; gunicorn's worker is a fork of this process


@functools.lru_cache(maxsize=1)
def _console() -> "ReviewConsole":
    """Built on the review function's first request: the other functions never import it."""
    from safesend.entrypoints.console import ReviewConsole
    from safesend.entrypoints.reviewer_auth import get_reviewer_auth

    return ReviewConsole(lambda: get_runtime().service, get_reviewer_auth)


@functions_framework.http
def send(request: Request) -> Response:
    if request.path.rstrip("/").endswith("/decide"):
        return _api.decide(request)
    return _api.send(request)


@functions_framework.http
def reconcile(request: Request) -> Response:
    return _api.reconcile(request)


@functions_framework.http
def sweep(request: Request) -> Response:
    return _api.sweep(request)


@functions_framework.http
def status(request: Request) -> Response:
    return _api.status(request)


@functions_framework.http
def notify(request: Request) -> Response:
    return _api.notify(request)


@functions_framework.http
def review(request: Request) -> "PageResponse":
    return _console().handle(request)
