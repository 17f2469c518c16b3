"""CheckScheduler on Cloud Tasks: an HTTP task to the reconcile function, delayed for index lag.

Task names derive from the job id and the step, so enqueueing the same check
twice is answered ALREADY_EXISTS by Cloud Tasks and treated as done. Delivery
is at least once either way: reconcile is idempotent.

google.cloud.tasks_v2 is imported on first use (~200 ms): a function instance that never
schedules a check (status, a happy-path send) does not pay for it at cold start.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from ..core.errors import SchedulerError

DISPATCH_DEADLINE_S = 180  # reconcile may resend: send timeout plus the mailbox calls


class CloudTasksScheduler:
    def __init__(
        self,
        queue_path: str,
        reconcile_url: str,
        service_account_email: str | None = None,
        emulator_host: str | None = None,
        client: Any = None,
        timeout_s: float = 10.0,
        api_key: str | None = None,
        mailbox_queue_prefix: str | None = None,
    ):
        self.queue_path = queue_path
        # projects/P/locations/R/queues/<prefix>-mbx-: a queued job's turn goes on its mailbox's own
        # queue, whose rate_limits pace the dispatches for every instance (issue 24).
        self.mailbox_queue_prefix = mailbox_queue_prefix
        self._api_key = api_key  # local stacks only: the emulator cannot mint OIDC tokens
        self.reconcile_url = reconcile_url
        self.service_account_email = service_account_email
        self._emulator_host = emulator_host
        self._client = client
        self._timeout_s = timeout_s

    @property
    def client(self) -> Any:
        if self._client is None:
            if self._emulator_host:
                self._client = emulator_tasks_client(self._emulator_host)
            else:
                from google.cloud import tasks_v2

                self._client = tasks_v2.CloudTasksClient()
        return self._client

    def queue_for(self, mailbox: str | None) -> str:
        """The mailbox's paced queue for a queued job's turn; the reconcile queue for everything else
        (and for every job when no mailbox queues are configured)."""
        if mailbox and self.mailbox_queue_prefix:
            return f"{self.mailbox_queue_prefix}{mailbox}"
        return self.queue_path

    def task_name(self, job_id: str, step: str, mailbox: str | None = None) -> str:
        return f"{self.queue_for(mailbox)}/tasks/{job_id}-{step}"

    def build_task(self, job_id: str, step: str, at: datetime, mailbox: str | None = None) -> dict[str, Any]:
        """The task as sent: an OIDC token for the reconcile function's IAM check when an SA is set."""
        from google.cloud import tasks_v2
        from google.protobuf import timestamp_pb2

        schedule_time = timestamp_pb2.Timestamp()
        schedule_time.FromDatetime(at)
        http_request: dict[str, Any] = {
            "http_method": tasks_v2.HttpMethod.POST,
            "url": self.reconcile_url,
            "headers": {
                "Content-Type": "application/json",
                **({"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}),
            },
            "body": json.dumps({"job_id": job_id, "step": step}).encode("utf-8"),
        }
        if self.service_account_email:
            http_request["oidc_token"] = {
                "service_account_email": self.service_account_email,
                "audience": self.reconcile_url,
            }
        return {
            "name": self.task_name(job_id, step, mailbox),
            "http_request": http_request,
            "schedule_time": schedule_time,
            "dispatch_deadline": {"seconds": DISPATCH_DEADLINE_S},
        }

    def schedule_check(self, job_id: str, step: str, at: datetime, mailbox: str | None = None) -> None:
        from google.api_core import exceptions as gexc  # with grpc, ~40 ms: a status instance never schedules

        try:
            self.client.create_task(
                parent=self.queue_for(mailbox),
                task=self.build_task(job_id, step, at, mailbox),
                timeout=self._timeout_s,
            )
        except gexc.AlreadyExists:
            return  # the same check was already enqueued: exactly what we wanted
        except gexc.GoogleAPICallError as exc:
            raise SchedulerError(f"cloud tasks: {exc}") from exc
        except Exception as exc:  # transport errors (grpc, auth) end up here
            raise SchedulerError(f"cloud tasks: {exc!r}") from exc


def emulator_tasks_client(host: str) -> Any:
    """A CloudTasksClient over an insecure channel to a local emulator, never through an HTTP
    proxy. Cloud Tasks has no emulator environment variable, so the transport is built by hand; a
    given channel also makes the client skip credential discovery."""
    import grpc
    from google.cloud import tasks_v2
    from google.cloud.tasks_v2.services.cloud_tasks.transports import CloudTasksGrpcTransport

    channel = grpc.insecure_channel(host, options=[("grpc.enable_http_proxy", 0)])
    return tasks_v2.CloudTasksClient(transport=CloudTasksGrpcTransport(channel=channel))
