locals {
  # Cloud Run's deterministic URL of each function's service,
  # https://<service>-<project number>.<region>.run.app, known before the
  # functions exist. Every caller targets these and every audience is one of
  # them: a function cannot reference its own service_config.uri, and send
  # (which needs reconcile's URL) referencing reconcile while reconcile lists
  # send's URL among its audiences would be a cycle. Cloud Run accepts ID
  # tokens whose audience is any of the service's run.app URLs. The URL exists
  # while "<service>-<project number>" fits a 63-character DNS label; with
  # name_prefix <= 12 characters it is at most 35.
  function_urls = {
    for name in ["send", "reconcile", "sweep", "status"] :
    name => "https://${var.name_prefix}-${name}-${data.google_project.this.number}.${var.region}.run.app"
  }

  tasks_queue_path  = google_cloud_tasks_queue.reconcile.id # projects/P/locations/L/queues/Q
  review_topic_path = google_pubsub_topic.review.id         # projects/P/topics/T

  # Environment of every function (functions/safesend/config.py).
  # SAFESEND_AUTH_DISABLED and SAFESEND_ENABLE_FAULT_INJECTION are never set
  # here (tests/infra/test_policy.py).
  common_env = merge(
    {
      GOOGLE_CLOUD_PROJECT       = var.project_id
      SAFESEND_JOBS_COLLECTION   = var.jobs_collection
      SAFESEND_MESSAGE_ID_DOMAIN = var.message_id_domain
      SAFESEND_DEFAULT_FROM      = var.default_from
      SAFESEND_GMAIL_USER        = var.gmail_user
      SAFESEND_INDEX_LAG_S       = tostring(var.index_lag_seconds)
      SAFESEND_UNKNOWN_WINDOW_S  = tostring(var.unknown_window_seconds)
      SAFESEND_LOG_LEVEL         = var.log_level
      # Who may call: n8n's service accounts (send/status, ID token), the
      # tasks and scheduler invokers (reconcile/sweep), and the audiences an
      # ID token may carry: the four function URLs.
      SAFESEND_AUTH_CALLER_SERVICE_ACCOUNTS = join(",", local.caller_emails)
      SAFESEND_AUTH_INTERNAL_INVOKERS       = join(",", local.internal_invoker_emails)
      SAFESEND_AUTH_AUDIENCES               = join(",", [for name in ["send", "reconcile", "sweep", "status"] : local.function_urls[name]])
      # Every function is behind Cloud Run IAM (no allUsers), which verifies the ID token and
      # forwards it with the signature stripped; the app then checks its claims.
      SAFESEND_AUTH_TRUST_CLOUD_RUN_IAM = "true"
    },
    # Only when delegation is wanted, so "unset" never arrives as "".
    { for k, v in { SAFESEND_GMAIL_DELEGATED_USER = var.gmail_delegated_user } : k => v if v != "" },
  )

  # send, reconcile and sweep also enqueue reconcile tasks and publish review
  # items. status does neither and gets no queue or topic.
  worker_env = merge(local.common_env, {
    SAFESEND_TASKS_QUEUE           = local.tasks_queue_path
    SAFESEND_RECONCILE_URL         = local.function_urls.reconcile
    SAFESEND_TASKS_SERVICE_ACCOUNT = google_service_account.tasks_invoker.email
    SAFESEND_REVIEW_TOPIC          = local.review_topic_path
  })

  build_service_account = google_service_account.build.id
  docker_repository     = google_artifact_registry_repository.functions.id
  source_bucket         = google_storage_bucket.functions_source.name
  source_object         = google_storage_bucket_object.functions_source.name
}

# -----------------------------------------------------------------------------
# send: POST, called by n8n (ID token of a caller service account, or HMAC).
# Ingress ALLOW_ALL because n8n may run outside Google Cloud; access is still
# enforced by IAM (run.invoker) and again by the app.
# -----------------------------------------------------------------------------
resource "google_cloudfunctions2_function" "send" {
  #checkov:skip=CKV_GCP_124:n8n may run outside Google Cloud, so send must be reachable from the internet; only IAM (run.invoker for the caller service accounts) and the app (ID token or HMAC) let requests in. reconcile and sweep are internal-only.

  project     = var.project_id
  name        = "${var.name_prefix}-send"
  location    = var.region
  description = "safesend: idempotent Gmail send (called by n8n)."

  build_config {
    runtime           = var.runtime
    entry_point       = "send"
    service_account   = local.build_service_account
    docker_repository = local.docker_repository

    source {
      storage_source {
        bucket = local.source_bucket
        object = local.source_object
      }
    }

    automatic_update_policy {}
  }

  service_config {
    min_instance_count               = var.send_min_instances
    max_instance_count               = var.send_max_instances
    max_instance_request_concurrency = 1
    available_memory                 = var.function_memory
    timeout_seconds                  = 60 # > SAFESEND_REQUEST_BUDGET_S (40 s) + one Gmail timeout margin
    service_account_email            = google_service_account.send.email
    ingress_settings                 = "ALLOW_ALL"
    all_traffic_on_latest_revision   = true
    environment_variables            = local.worker_env

    secret_environment_variables {
      key        = "SAFESEND_GMAIL_CREDENTIALS_JSON"
      project_id = var.project_id
      secret     = google_secret_manager_secret.gmail_credentials.secret_id
      version    = var.gmail_credentials_version
    }

    secret_environment_variables {
      key        = "SAFESEND_AUTH_HMAC_SECRET"
      project_id = var.project_id
      secret     = google_secret_manager_secret.webhook_hmac.secret_id
      version    = var.webhook_hmac_version
    }
  }

  depends_on = [time_sleep.iam_propagation]
}

# -----------------------------------------------------------------------------
# reconcile: POST, called only by Cloud Tasks (OIDC token of the tasks
# invoker). Internal-only ingress: Cloud Run treats requests from Cloud Tasks
# and Cloud Scheduler in the same project (or VPC Service Controls perimeter)
# as internal when they use the default run.app URL, not a custom domain
# (https://cloud.google.com/run/docs/securing/ingress#settings, "Internal":
# "The following Google Cloud products, if they're in the same project or VPC
# Service Controls perimeter as your Cloud Run service and if they're using
# the default run.app URL ...: Cloud Scheduler, Cloud Tasks, ..."). The task
# target is the run.app URL above; the internet gets a 404.
# -----------------------------------------------------------------------------
resource "google_cloudfunctions2_function" "reconcile" {
  project     = var.project_id
  name        = "${var.name_prefix}-reconcile"
  location    = var.region
  description = "safesend: settles the outcome of a send (called by Cloud Tasks)."

  build_config {
    runtime           = var.runtime
    entry_point       = "reconcile"
    service_account   = local.build_service_account
    docker_repository = local.docker_repository

    source {
      storage_source {
        bucket = local.source_bucket
        object = local.source_object
      }
    }

    automatic_update_policy {}
  }

  service_config {
    min_instance_count               = 0
    max_instance_count               = var.reconcile_max_instances
    max_instance_request_concurrency = 1
    available_memory                 = var.function_memory
    timeout_seconds                  = 60
    service_account_email            = google_service_account.reconcile.email
    ingress_settings                 = "ALLOW_INTERNAL_ONLY"
    all_traffic_on_latest_revision   = true
    environment_variables            = local.worker_env

    secret_environment_variables {
      key        = "SAFESEND_GMAIL_CREDENTIALS_JSON"
      project_id = var.project_id
      secret     = google_secret_manager_secret.gmail_credentials.secret_id
      version    = var.gmail_credentials_version
    }
  }

  lifecycle {
    # The app refuses to start without a way to authenticate send/status
    # callers; reconcile and sweep do not get the HMAC secret, so they need at
    # least one caller service account.
    precondition {
      condition     = length(local.caller_emails) > 0
      error_message = "Set create_n8n_invoker_service_account = true or list extra_caller_service_accounts: every function must know its callers."
    }
  }

  depends_on = [time_sleep.iam_propagation]
}

# -----------------------------------------------------------------------------
# sweep: POST, called only by Cloud Scheduler (OIDC token of the scheduler
# invoker). Internal-only ingress, as reconcile (same documentation). At most
# one instance: overlapping sweeps would only duplicate work.
# -----------------------------------------------------------------------------
resource "google_cloudfunctions2_function" "sweep" {
  project     = var.project_id
  name        = "${var.name_prefix}-sweep"
  location    = var.region
  description = "safesend: periodic sweep of due jobs (called by Cloud Scheduler)."

  build_config {
    runtime           = var.runtime
    entry_point       = "sweep"
    service_account   = local.build_service_account
    docker_repository = local.docker_repository

    source {
      storage_source {
        bucket = local.source_bucket
        object = local.source_object
      }
    }

    automatic_update_policy {}
  }

  service_config {
    min_instance_count               = 0
    max_instance_count               = 1
    max_instance_request_concurrency = 1
    available_memory                 = var.function_memory
    timeout_seconds                  = 120 # > SAFESEND_SWEEP_BUDGET_S (90 s)
    service_account_email            = google_service_account.sweep.email
    ingress_settings                 = "ALLOW_INTERNAL_ONLY"
    all_traffic_on_latest_revision   = true
    environment_variables            = local.worker_env

    secret_environment_variables {
      key        = "SAFESEND_GMAIL_CREDENTIALS_JSON"
      project_id = var.project_id
      secret     = google_secret_manager_secret.gmail_credentials.secret_id
      version    = var.gmail_credentials_version
    }
  }

  lifecycle {
    precondition {
      condition     = length(local.caller_emails) > 0
      error_message = "Set create_n8n_invoker_service_account = true or list extra_caller_service_accounts: every function must know its callers."
    }
  }

  depends_on = [time_sleep.iam_propagation]
}

# -----------------------------------------------------------------------------
# status: GET, same callers as send. Reads Firestore only.
# -----------------------------------------------------------------------------
resource "google_cloudfunctions2_function" "status" {
  #checkov:skip=CKV_GCP_124:Same callers as send (n8n, possibly outside Google Cloud); protected by IAM run.invoker and the app authentication, not by network location.

  project     = var.project_id
  name        = "${var.name_prefix}-status"
  location    = var.region
  description = "safesend: job status lookup (called by n8n)."

  build_config {
    runtime           = var.runtime
    entry_point       = "status"
    service_account   = local.build_service_account
    docker_repository = local.docker_repository

    source {
      storage_source {
        bucket = local.source_bucket
        object = local.source_object
      }
    }

    automatic_update_policy {}
  }

  service_config {
    min_instance_count               = 0
    max_instance_count               = var.status_max_instances
    max_instance_request_concurrency = 1
    available_memory                 = var.function_memory
    timeout_seconds                  = 30
    service_account_email            = google_service_account.status.email
    ingress_settings                 = "ALLOW_ALL"
    all_traffic_on_latest_revision   = true
    environment_variables            = local.common_env

    secret_environment_variables {
      key        = "SAFESEND_AUTH_HMAC_SECRET"
      project_id = var.project_id
      secret     = google_secret_manager_secret.webhook_hmac.secret_id
      version    = var.webhook_hmac_version
    }
  }

  depends_on = [time_sleep.iam_propagation]
}
