# Cloud Tasks queue through which send, sweep and reconcile itself schedule
# reconcile calls (task name "<job>-a<attempt>-c<check>", OIDC token of the
# tasks-invoker service account, audience = reconcile's run.app URL).
# A deleted queue name cannot be reused for about 7 days.
resource "google_cloud_tasks_queue" "reconcile" {
  project  = var.project_id
  name     = "${var.name_prefix}-reconcile"
  location = var.region

  # Rate limits derived from the Gmail API quota (developers.google.com/gmail/api/reference/quota):
  # 15,000 quota units per user per minute (= 250/s, a moving average) and
  # 1,200,000 per project per minute. messages.send costs 100 units,
  # messages.list and messages.get 5 each. All functions share one mailbox,
  # so the per-user limit is the one that binds.
  #   - Worst reconcile call: list (5) + a policy resend (100) + get of the
  #     stored Message-ID (5) = 110 units. At 1 dispatch/s that is <= 110 units/s,
  #     44% of the mailbox budget, leaving >= 140 units/s (more than one send
  #     per second) for live sends from n8n. The usual call is a list only:
  #     5 units/s.
  #   - 4 concurrent dispatches bound the burst when a sweep enqueues a batch
  #     (4 x 110 = 440 units, absorbed by the moving average) and stay below
  #     reconcile's max instances (checked below), so Cloud Tasks never sees
  #     429s from Cloud Run.
  #   - Gmail's daily sending cap (2,000 messages per Workspace user, 500 for
  #     consumer accounts) is far below what 1 dispatch/s allows; it is not a
  #     rate and Cloud Tasks cannot enforce it.
  rate_limits {
    max_dispatches_per_second = var.tasks_max_dispatches_per_second
    max_concurrent_dispatches = var.tasks_max_concurrent_dispatches
  }

  # Follow-up checks are new tasks, not retries. A retry happens only when
  # reconcile answers non-2xx (Firestore, Gmail or Pub/Sub unavailable, or
  # Gmail's 429): back off 10 s, 20 s, 40 s, 80 s, 160 s, then every 300 s,
  # for at most 20 attempts (~75 min). After that the sweeper still finds the
  # job through next_check_at, so nothing is lost.
  retry_config {
    max_attempts  = 20
    min_backoff   = "10s"
    max_backoff   = "300s"
    max_doublings = 4
  }

  lifecycle {
    precondition {
      condition     = var.reconcile_max_instances >= var.tasks_max_concurrent_dispatches
      error_message = "reconcile_max_instances must be >= tasks_max_concurrent_dispatches (each instance serves one request at a time)."
    }
    # Pools name mailboxes (mailboxes.tf); checked on this queue because it always exists.
    precondition {
      condition = alltrue([
        for pool in concat(var.mailbox_pools.default == null ? [] : [var.mailbox_pools.default], values(var.mailbox_pools.channels), values(var.mailbox_pools.from)) :
        alltrue([for id in pool : contains(keys(var.mailboxes), id)])
      ])
      error_message = "Every mailbox id in mailbox_pools must be a key of mailboxes (pools need mailboxes)."
    }
  }

  depends_on = [google_project_service.enabled]
}
