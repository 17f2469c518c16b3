# Project number, for reconcile's deterministic URL below.
data "google_project" "this" {
  project_id = var.project_id
}

locals {
  tasks_queue_path  = "projects/${var.project_id}/locations/${google_cloud_tasks_queue.reconcile.location}/queues/${google_cloud_tasks_queue.reconcile.name}"
  review_topic_path = "projects/${var.project_id}/topics/${google_pubsub_topic.review.name}"

  # Environment shared by all four functions.
  base_env = merge(
    {
      GOOGLE_CLOUD_PROJECT           = var.project_id
      SAFESEND_JOBS_COLLECTION       = var.jobs_collection
      SAFESEND_MESSAGE_ID_DOMAIN     = var.message_id_domain
      SAFESEND_DEFAULT_FROM          = var.default_from
      SAFESEND_GMAIL_USER            = var.gmail_user
      SAFESEND_TASKS_QUEUE           = local.tasks_queue_path
      SAFESEND_TASKS_SERVICE_ACCOUNT = google_service_account.tasks_invoker.email
      SAFESEND_REVIEW_TOPIC          = local.review_topic_path
      SAFESEND_INDEX_LAG_S           = tostring(var.index_lag_seconds)
      SAFESEND_UNKNOWN_WINDOW_S      = tostring(var.unknown_window_seconds)
      SAFESEND_LOG_LEVEL             = var.log_level
    },
    # Only set when delegation is wanted, so "unset" never arrives as "".
    { for k, v in { SAFESEND_GMAIL_DELEGATED_USER = var.gmail_delegated_user } : k => v if v != "" },
  )

  # Every function enqueues reconcile tasks (send after a send, sweep for due
  # jobs, reconcile for its own follow-up checks), so every function needs the
  # reconcile URL: it is the task target and the OIDC audience. The app refuses
  # to start with SAFESEND_TASKS_QUEUE but no SAFESEND_RECONCILE_URL.
  #
  # send, sweep and status take it from the deployed reconcile function.
  caller_env = merge(local.base_env, {
    SAFESEND_RECONCILE_URL = google_cloudfunctions2_function.reconcile.service_config[0].uri
  })

  # reconcile cannot reference its own attributes (a dependency cycle), so it
  # gets Cloud Run's deterministic URL for the same service,
  # https://<service>-<project number>.<region>.run.app, which is known before
  # the function exists. Both are run.app URLs of the same service: Cloud Run
  # accepts ID tokens issued for either, and internal-only ingress treats them
  # alike.
  reconcile_env = merge(local.base_env, {
    SAFESEND_RECONCILE_URL = "https://${var.name_prefix}-reconcile-${data.google_project.this.number}.${var.region}.run.app"
  })

  # Shared build settings.
  runtime               = "python312"
  build_service_account = google_service_account.build.id
}

# -----------------------------------------------------------------------------
# reconcile - called only by Cloud Tasks (OIDC token of the tasks invoker).
# -----------------------------------------------------------------------------
resource "google_cloudfunctions2_function" "reconcile" {
  project     = var.project_id
  name        = "${var.name_prefix}-reconcile"
  location    = var.region
  description = "safesend: settles the outcome of a send (called by Cloud Tasks)."

  build_config {
    runtime         = local.runtime
    entry_point     = "reconcile"
    service_account = local.build_service_account

    source {
      storage_source {
        bucket = google_storage_bucket.functions_source.name
        object = google_storage_bucket_object.functions_source.name
      }
    }
  }

  service_config {
    min_instance_count             = 0
    max_instance_count             = var.reconcile_max_instances
    available_memory               = "512Mi"
    timeout_seconds                = 60
    service_account_email          = google_service_account.runtime.email
    ingress_settings               = var.background_ingress_settings
    all_traffic_on_latest_revision = true
    environment_variables          = local.reconcile_env

    secret_environment_variables {
      key        = "SAFESEND_GMAIL_CREDENTIALS_JSON"
      project_id = var.project_id
      secret     = google_secret_manager_secret.gmail_credentials.secret_id
      version    = var.gmail_credentials_version
    }
  }

  depends_on = [google_project_service.enabled, time_sleep.iam_propagation]
}

# -----------------------------------------------------------------------------
# send - called by n8n with an ID token of an invoker service account.
# -----------------------------------------------------------------------------
resource "google_cloudfunctions2_function" "send" {
  project     = var.project_id
  name        = "${var.name_prefix}-send"
  location    = var.region
  description = "safesend: idempotent Gmail send (called by n8n)."

  build_config {
    runtime         = local.runtime
    entry_point     = "send"
    service_account = local.build_service_account

    source {
      storage_source {
        bucket = google_storage_bucket.functions_source.name
        object = google_storage_bucket_object.functions_source.name
      }
    }
  }

  service_config {
    min_instance_count    = var.send_min_instances
    max_instance_count    = var.send_max_instances
    available_memory      = "512Mi"
    timeout_seconds       = 60
    service_account_email = google_service_account.runtime.email
    # n8n calls from outside Google Cloud; access is enforced by IAM
    # (run.invoker), not by network location.
    ingress_settings               = "ALLOW_ALL"
    all_traffic_on_latest_revision = true
    environment_variables          = local.caller_env

    secret_environment_variables {
      key        = "SAFESEND_GMAIL_CREDENTIALS_JSON"
      project_id = var.project_id
      secret     = google_secret_manager_secret.gmail_credentials.secret_id
      version    = var.gmail_credentials_version
    }
  }

  depends_on = [google_project_service.enabled, time_sleep.iam_propagation]
}

# -----------------------------------------------------------------------------
# sweep - called only by Cloud Scheduler; re-enqueues jobs whose next check is
# due. max 1 instance: overlapping sweeps would only duplicate work.
# -----------------------------------------------------------------------------
resource "google_cloudfunctions2_function" "sweep" {
  project     = var.project_id
  name        = "${var.name_prefix}-sweep"
  location    = var.region
  description = "safesend: periodic sweep of due jobs (called by Cloud Scheduler)."

  build_config {
    runtime         = local.runtime
    entry_point     = "sweep"
    service_account = local.build_service_account

    source {
      storage_source {
        bucket = google_storage_bucket.functions_source.name
        object = google_storage_bucket_object.functions_source.name
      }
    }
  }

  service_config {
    min_instance_count             = 0
    max_instance_count             = 1
    available_memory               = "512Mi"
    timeout_seconds                = 120
    service_account_email          = google_service_account.runtime.email
    ingress_settings               = var.background_ingress_settings
    all_traffic_on_latest_revision = true
    environment_variables          = local.caller_env

    secret_environment_variables {
      key        = "SAFESEND_GMAIL_CREDENTIALS_JSON"
      project_id = var.project_id
      secret     = google_secret_manager_secret.gmail_credentials.secret_id
      version    = var.gmail_credentials_version
    }
  }

  depends_on = [google_project_service.enabled, time_sleep.iam_propagation]
}

# -----------------------------------------------------------------------------
# status - GET, same callers as send.
# -----------------------------------------------------------------------------
resource "google_cloudfunctions2_function" "status" {
  project     = var.project_id
  name        = "${var.name_prefix}-status"
  location    = var.region
  description = "safesend: job status lookup (called by n8n)."

  build_config {
    runtime         = local.runtime
    entry_point     = "status"
    service_account = local.build_service_account

    source {
      storage_source {
        bucket = google_storage_bucket.functions_source.name
        object = google_storage_bucket_object.functions_source.name
      }
    }
  }

  service_config {
    min_instance_count             = 0
    max_instance_count             = var.status_max_instances
    available_memory               = "512Mi"
    timeout_seconds                = 60
    service_account_email          = google_service_account.runtime.email
    ingress_settings               = "ALLOW_ALL"
    all_traffic_on_latest_revision = true
    environment_variables          = local.caller_env

    secret_environment_variables {
      key        = "SAFESEND_GMAIL_CREDENTIALS_JSON"
      project_id = var.project_id
      secret     = google_secret_manager_secret.gmail_credentials.secret_id
      version    = var.gmail_credentials_version
    }
  }

  depends_on = [google_project_service.enabled, time_sleep.iam_propagation]
}
