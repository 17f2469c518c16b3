# send/sweep enqueue one task per job that needs reconciliation; Cloud Tasks
# calls the reconcile function with an OIDC token of the tasks-invoker SA.
# Note: a deleted queue name cannot be reused for about 7 days.
resource "google_cloud_tasks_queue" "reconcile" {
  project  = var.project_id
  name     = "${var.name_prefix}-reconcile"
  location = var.region

  # Modest limits: every reconcile call queries the Gmail API, whose per-user
  # quota is the real bottleneck.
  rate_limits {
    max_dispatches_per_second = var.tasks_max_dispatches_per_second
    max_concurrent_dispatches = var.tasks_max_concurrent_dispatches
  }

  # Follow-up checks are new tasks, not retries. A retry happens when reconcile
  # answers 503 because Firestore, Gmail or Pub/Sub is unavailable: back off
  # 10s, 20s, 40s, 80s, 160s, then every 300s, for up to 20 attempts (~75 min).
  # After that the sweeper still finds the job through next_check_at.
  retry_config {
    max_attempts  = 20
    min_backoff   = "10s"
    max_backoff   = "300s"
    max_doublings = 4
  }

  depends_on = [google_project_service.enabled]
}
