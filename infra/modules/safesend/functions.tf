locals {
  # Cloud Run's deterministic URL of each function's service,
  # https://<service>-<project number>.<region>.run.app, known before the
  # functions exist. Every caller targets these and every audience is one of
  # them: a function cannot reference its own service_config.uri, and send
  # (which needs reconcile's URL) referencing reconcile while reconcile lists
  # send's URL among its audiences would be a cycle. Cloud Run accepts ID
  # tokens whose audience is any of the service's run.app URLs. The URL exists
  # while "<service>-<project number>" fits a 63-character DNS label; with
  # name_prefix <= 12 characters it is at most 35. env_spec.json builds the
  # same URLs for the environment (checked by tests/infra).
  function_urls = {
    for name in ["send", "reconcile", "sweep", "status", "notify", "review"] :
    name => "https://${var.name_prefix}-${name}-${data.google_project.this.number}.${var.region}.run.app"
  }

  # ------------------------------------------------------------------------
  # Runtime configuration: env_spec.json, the one description both deploy
  # paths render (cloudbuild-gcloud.yaml through infra/env_spec.py, which
  # mirrors the expressions below; tests/infra/test_env_parity.py renders both
  # and compares every variable and secret of every function).
  # ------------------------------------------------------------------------
  env_spec = jsondecode(file("${path.module}/env_spec.json"))

  # The inputs of the spec, as strings: here from variables, in the gcloud
  # pipeline from Cloud Build substitutions.
  env_facts = {
    project_id                = var.project_id
    project_number            = data.google_project.this.number
    region                    = var.region
    name_prefix               = var.name_prefix
    jobs_collection           = var.jobs_collection
    message_id_domain         = var.message_id_domain
    default_from              = var.default_from
    log_level                 = var.log_level
    gmail_user                = var.gmail_user
    gmail_delegated_user      = var.gmail_delegated_user
    index_lag_s               = tostring(var.index_lag_seconds)
    unknown_window_s          = tostring(var.unknown_window_seconds)
    verify_horizon_s          = tostring(var.verify_horizon_seconds)
    retry_horizon_s           = tostring(var.retry_horizon_seconds)
    sweep_interval_s          = tostring(local.sweep_interval_seconds) # from sweep_schedule (monitoring.tf)
    n8n_invoker               = tostring(var.create_n8n_invoker_service_account)
    extra_callers             = join(",", var.extra_caller_service_accounts)
    public_callers            = tostring(var.public_callers)
    callback_allowed_hosts    = join(",", var.callback_allowed_hosts)
    api_deciders              = join(",", var.api_deciders)
    gmail_credentials_version = var.gmail_credentials_version
    webhook_hmac_version      = var.webhook_hmac_version
    api_keys_version          = var.api_keys_version
    callback_hmac_version     = var.callback_hmac_version

    reviewers                    = tostring(var.reviewers_enabled)
    notify_chat_webhook          = tostring(var.notify_chat_webhook)
    notify_slack_webhook         = tostring(var.notify_slack_webhook)
    notify_email_to              = var.notify_email_to
    notify_email_channel         = var.notify_email_channel
    review_allowed_emails        = join(",", var.review_allowed_emails)
    review_allowed_domains       = join(",", var.review_allowed_domains)
    review_notify_timeout_s      = tostring(var.review_notify_timeout_seconds)
    notify_chat_webhook_version  = var.notify_chat_webhook_version
    notify_slack_webhook_version = var.notify_slack_webhook_version
    review_csrf_version          = var.review_csrf_version

    job_store                  = var.job_store
    postgres_host              = local.postgres ? google_sql_database_instance.jobs[0].private_ip_address : ""
    postgres_pool_max          = tostring(var.postgres_pool_max)
    postgres_server_ca_version = var.postgres_server_ca_version

    mailboxes_json = local.mailboxes_json
  }

  # "{name}" placeholders: regexall() yields literal text (lit) or a name (ref).
  env_named = merge(local.env_facts, {
    for name, template in local.env_spec.templates : name => join("", [
      for part in regexall(local.env_spec.placeholder_pattern, template) :
      part.ref == null ? part.lit : local.env_facts[part.ref]
    ])
  })

  env_values = merge(local.env_named, {
    for name, choice in local.env_spec.switches : name => join("", [
      for part in regexall(local.env_spec.placeholder_pattern, local.env_named[choice.when] == choice.equals ? choice.then : choice.otherwise) :
      part.ref == null ? part.lit : local.env_named[part.ref]
    ])
  })

  env_rendered = {
    for fn in local.env_spec.functions : fn => {
      for name, per_function in local.env_spec.env : name => join("", [
        for part in regexall(local.env_spec.placeholder_pattern, per_function[fn]) :
        part.ref == null ? part.lit : local.env_values[part.ref]
      ]) if contains(keys(per_function), fn)
    }
  }

  # Lists lose empty items; omit_empty names are left out when "" (never set to "").
  function_env = {
    for fn, rendered in local.env_rendered : fn => {
      for name, value in {
        for name, raw in rendered : name => contains(local.env_spec.lists, name) ? join(",", compact(split(",", raw))) : raw
      } : name => value if !(contains(local.env_spec.omit_empty, name) && value == "")
    }
  }

  # Secret environment variables per function: {name => {secret_id, version}}.
  function_secrets = {
    for fn in local.env_spec.functions : fn => {
      for name, mount in local.env_spec.secrets : name => {
        secret_id = local.secret_ids[mount.secret]
        version   = local.env_values[mount.version]
      } if contains(mount.functions, fn) && local.env_values[mount.enabled_by] == "true"
    }
  }

  # Secret files per function: {path => {mount_path, file, secret_id, version}}; the path is the
  # mount directory (one secret each) and the file name.
  function_secret_files = {
    for fn in local.env_spec.functions : fn => {
      for path, mount in local.env_spec.secret_files : path => {
        mount_path = regex("^(.*)/([^/]+)$", path)[0]
        file       = regex("^(.*)/([^/]+)$", path)[1]
        secret_id  = local.secret_ids[mount.secret]
        version    = local.env_values[mount.version]
      } if contains(mount.functions, fn) && local.env_values[mount.enabled_by] == "true"
    }
  }

  # Direct VPC egress per function: [] or [{network, subnetwork, egress}] (env_spec.json's
  # direct_vpc says when; the network and subnet are network.tf's, whose names the spec renders
  # for the gcloud path: tests/infra checks they are the same).
  function_direct_vpc = {
    for fn in local.env_spec.functions : fn => [
      for vpc in [local.env_spec.direct_vpc] : {
        network    = google_compute_network.jobs[0].name
        subnetwork = google_compute_subnetwork.functions[0].name
        egress     = vpc.egress
      } if contains(vpc.functions, fn) && local.env_values[vpc.enabled_by] == "true"
    ]
  }

  build_service_account = google_service_account.build.id
  docker_repository     = google_artifact_registry_repository.functions.id
  source_bucket         = google_storage_bucket.functions_source.name
  source_object         = google_storage_bucket_object.functions_source.name
}

# -----------------------------------------------------------------------------
# send: POST, called by n8n (ID token of a caller service account, HMAC, or,
# with public_callers, an API key). Ingress ALLOW_ALL because n8n may run
# outside Google Cloud; access is enforced by IAM (run.invoker) and by the app,
# or by the app alone when public_callers opens the function to allUsers.
# -----------------------------------------------------------------------------
resource "google_cloudfunctions2_function" "send" {
  #checkov:skip=CKV_GCP_124:n8n may run outside Google Cloud, so send must be reachable from the internet; only IAM (run.invoker for the caller service accounts) and the app (ID token, HMAC or API key) let requests in. reconcile and sweep are internal-only.

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
    max_instance_request_concurrency = local.env_spec.deploy.send.concurrency # bench 8: bench/README.md
    available_cpu                    = local.env_spec.deploy.send.cpu
    available_memory                 = local.env_spec.deploy.send.memory
    timeout_seconds                  = 60 # > SAFESEND_REQUEST_BUDGET_S (40 s) + one Gmail timeout margin
    service_account_email            = google_service_account.send.email
    ingress_settings                 = "ALLOW_ALL"
    all_traffic_on_latest_revision   = true
    environment_variables            = local.function_env.send

    dynamic "secret_environment_variables" {
      for_each = local.function_secrets.send
      content {
        key        = secret_environment_variables.key
        project_id = var.project_id
        secret     = secret_environment_variables.value.secret_id
        version    = secret_environment_variables.value.version
      }
    }

    dynamic "secret_volumes" {
      for_each = local.function_secret_files.send
      content {
        mount_path = secret_volumes.value.mount_path
        project_id = var.project_id
        secret     = secret_volumes.value.secret_id
        versions {
          path    = secret_volumes.value.file
          version = secret_volumes.value.version
        }
      }
    }

    direct_vpc_egress = one(local.function_direct_vpc.send[*].egress)

    dynamic "direct_vpc_network_interface" {
      for_each = local.function_direct_vpc.send
      content {
        network    = direct_vpc_network_interface.value.network
        subnetwork = direct_vpc_network_interface.value.subnetwork
      }
    }
  }

  lifecycle {
    # Somebody must be able to call send: caller service accounts behind IAM,
    # or the app's own credentials when the function is public.
    precondition {
      condition     = length(local.caller_emails) > 0 || var.public_callers
      error_message = "Set create_n8n_invoker_service_account = true, list extra_caller_service_accounts, or set public_callers = true: nobody could call send."
    }
    # allUsers may invoke a public function, so a stripped (unsigned) ID token
    # must never be trusted there, and the app must have API keys to check.
    precondition {
      condition     = !var.public_callers || (local.function_env.send["SAFESEND_AUTH_TRUST_CLOUD_RUN_IAM"] == "false" && local.function_env.send["SAFESEND_PUBLIC_INVOKER"] == "true" && contains(keys(local.function_secrets.send), "SAFESEND_AUTH_API_KEYS"))
      error_message = "public_callers: send must run with SAFESEND_PUBLIC_INVOKER=true, SAFESEND_AUTH_TRUST_CLOUD_RUN_IAM=false and the API keys secret (see env_spec.json)."
    }
    # job_store = postgres: no function's DSN carries a password (IAM login: an access token is
    # the password, supplied per connection by the app), and each logs in with IAM database
    # authentication over TLS that verifies the server.
    precondition {
      condition = alltrue([
        for fn, env in local.function_env : !can(regex("(?i)password|://[^/]*:[^/]*@", lookup(env, "SAFESEND_POSTGRES_DSN", ""))) && (lookup(env, "SAFESEND_STORE", "firestore") != "postgres" || (lookup(env, "SAFESEND_POSTGRES_IAM_AUTH", "") == "true" && can(regex("(^| )sslmode=verify-(ca|full)( |$)", lookup(env, "SAFESEND_POSTGRES_DSN", "")))))
      ])
      error_message = "job_store = postgres: every SAFESEND_POSTGRES_DSN must be without a password and with sslmode=verify-ca (or verify-full), and SAFESEND_POSTGRES_IAM_AUTH=true (env_spec.json)."
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
    max_instance_request_concurrency = local.env_spec.deploy.reconcile.concurrency # bench 8: bench/README.md
    available_cpu                    = local.env_spec.deploy.reconcile.cpu
    available_memory                 = local.env_spec.deploy.reconcile.memory
    timeout_seconds                  = 60
    service_account_email            = google_service_account.reconcile.email
    ingress_settings                 = "ALLOW_INTERNAL_ONLY"
    all_traffic_on_latest_revision   = true
    environment_variables            = local.function_env.reconcile

    dynamic "secret_environment_variables" {
      for_each = local.function_secrets.reconcile
      content {
        key        = secret_environment_variables.key
        project_id = var.project_id
        secret     = secret_environment_variables.value.secret_id
        version    = secret_environment_variables.value.version
      }
    }

    dynamic "secret_volumes" {
      for_each = local.function_secret_files.reconcile
      content {
        mount_path = secret_volumes.value.mount_path
        project_id = var.project_id
        secret     = secret_volumes.value.secret_id
        versions {
          path    = secret_volumes.value.file
          version = secret_volumes.value.version
        }
      }
    }

    direct_vpc_egress = one(local.function_direct_vpc.reconcile[*].egress)

    dynamic "direct_vpc_network_interface" {
      for_each = local.function_direct_vpc.reconcile
      content {
        network    = direct_vpc_network_interface.value.network
        subnetwork = direct_vpc_network_interface.value.subnetwork
      }
    }
  }

  depends_on = [time_sleep.iam_propagation]
}

# -----------------------------------------------------------------------------
# sweep: POST {}, called only by Cloud Scheduler (OIDC token of the scheduler
# invoker); internal-only ingress as reconcile. Runs the queries that need the
# composite indexes, so it is deployed only once they exist (the provider waits
# for each index build).
# -----------------------------------------------------------------------------
resource "google_cloudfunctions2_function" "sweep" {
  project     = var.project_id
  name        = "${var.name_prefix}-sweep"
  location    = var.region
  description = "safesend: finds stale, overdue and due jobs (called by Cloud Scheduler)."

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
    max_instance_request_concurrency = local.env_spec.deploy.sweep.concurrency # bench 8: bench/README.md
    available_cpu                    = local.env_spec.deploy.sweep.cpu
    available_memory                 = local.env_spec.deploy.sweep.memory
    timeout_seconds                  = 120 # > SAFESEND_SWEEP_BUDGET_S (90 s)
    service_account_email            = google_service_account.sweep.email
    ingress_settings                 = "ALLOW_INTERNAL_ONLY"
    all_traffic_on_latest_revision   = true
    environment_variables            = local.function_env.sweep

    dynamic "secret_environment_variables" {
      for_each = local.function_secrets.sweep
      content {
        key        = secret_environment_variables.key
        project_id = var.project_id
        secret     = secret_environment_variables.value.secret_id
        version    = secret_environment_variables.value.version
      }
    }

    dynamic "secret_volumes" {
      for_each = local.function_secret_files.sweep
      content {
        mount_path = secret_volumes.value.mount_path
        project_id = var.project_id
        secret     = secret_volumes.value.secret_id
        versions {
          path    = secret_volumes.value.file
          version = secret_volumes.value.version
        }
      }
    }

    direct_vpc_egress = one(local.function_direct_vpc.sweep[*].egress)

    dynamic "direct_vpc_network_interface" {
      for_each = local.function_direct_vpc.sweep
      content {
        network    = direct_vpc_network_interface.value.network
        subnetwork = direct_vpc_network_interface.value.subnetwork
      }
    }
  }

  depends_on = [time_sleep.iam_propagation, google_firestore_index.jobs]
}

# -----------------------------------------------------------------------------
# status: GET, same callers as send. Reads Firestore only.
# -----------------------------------------------------------------------------
resource "google_cloudfunctions2_function" "status" {
  #checkov:skip=CKV_GCP_124:Same callers as send (n8n, possibly outside Google Cloud); protected by IAM run.invoker and the app authentication (or, with public_callers, by the app alone), not by network location.

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
    max_instance_request_concurrency = local.env_spec.deploy.status.concurrency # bench 8: bench/README.md
    available_cpu                    = local.env_spec.deploy.status.cpu
    available_memory                 = local.env_spec.deploy.status.memory
    timeout_seconds                  = 30
    service_account_email            = google_service_account.status.email
    ingress_settings                 = "ALLOW_ALL"
    all_traffic_on_latest_revision   = true
    environment_variables            = local.function_env.status

    dynamic "secret_environment_variables" {
      for_each = local.function_secrets.status
      content {
        key        = secret_environment_variables.key
        project_id = var.project_id
        secret     = secret_environment_variables.value.secret_id
        version    = secret_environment_variables.value.version
      }
    }

    dynamic "secret_volumes" {
      for_each = local.function_secret_files.status
      content {
        mount_path = secret_volumes.value.mount_path
        project_id = var.project_id
        secret     = secret_volumes.value.secret_id
        versions {
          path    = secret_volumes.value.file
          version = secret_volumes.value.version
        }
      }
    }

    direct_vpc_egress = one(local.function_direct_vpc.status[*].egress)

    dynamic "direct_vpc_network_interface" {
      for_each = local.function_direct_vpc.status
      content {
        network    = direct_vpc_network_interface.value.network
        subnetwork = direct_vpc_network_interface.value.subnetwork
      }
    }
  }

  lifecycle {
    precondition {
      condition     = !var.public_callers || (local.function_env.status["SAFESEND_AUTH_TRUST_CLOUD_RUN_IAM"] == "false" && local.function_env.status["SAFESEND_PUBLIC_INVOKER"] == "true" && contains(keys(local.function_secrets.status), "SAFESEND_AUTH_API_KEYS"))
      error_message = "public_callers: status must run with SAFESEND_PUBLIC_INVOKER=true, SAFESEND_AUTH_TRUST_CLOUD_RUN_IAM=false and the API keys secret (see env_spec.json)."
    }
  }

  depends_on = [time_sleep.iam_propagation]
}

# -----------------------------------------------------------------------------
# notify (reviewers_enabled): POST, called only by the Pub/Sub push
# subscription (pubsub.tf) with an OIDC token of <prefix>-notify-push for this
# URL. Internal-only ingress: Cloud Run counts Pub/Sub push from the same
# project on the run.app URL as internal (see reconcile). Posts each review
# item to the configured reviewer targets (the webhook secrets are mounted here
# and nowhere else) and emails the reviewers through the send path.
# -----------------------------------------------------------------------------
resource "google_cloudfunctions2_function" "notify" {
  count = local.reviewers_enabled ? 1 : 0

  project     = var.project_id
  name        = "${var.name_prefix}-notify"
  location    = var.region
  description = "safesend: tells the reviewers of a review item (Pub/Sub push)."

  build_config {
    runtime           = var.runtime
    entry_point       = "notify"
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
    max_instance_count               = var.notify_max_instances
    max_instance_request_concurrency = local.env_spec.deploy.notify.concurrency # bench 8: bench/README.md
    available_cpu                    = local.env_spec.deploy.notify.cpu
    available_memory                 = local.env_spec.deploy.notify.memory
    timeout_seconds                  = 120 # an email through the send path (40 s budget) + two webhook posts (10 s each); < the push ack deadline (180 s)
    service_account_email            = google_service_account.notify[0].email
    ingress_settings                 = "ALLOW_INTERNAL_ONLY"
    all_traffic_on_latest_revision   = true
    environment_variables            = local.function_env.notify

    dynamic "secret_environment_variables" {
      for_each = local.function_secrets.notify
      content {
        key        = secret_environment_variables.key
        project_id = var.project_id
        secret     = secret_environment_variables.value.secret_id
        version    = secret_environment_variables.value.version
      }
    }

    dynamic "secret_volumes" {
      for_each = local.function_secret_files.notify
      content {
        mount_path = secret_volumes.value.mount_path
        project_id = var.project_id
        secret     = secret_volumes.value.secret_id
        versions {
          path    = secret_volumes.value.file
          version = secret_volumes.value.version
        }
      }
    }

    direct_vpc_egress = one(local.function_direct_vpc.notify[*].egress)

    dynamic "direct_vpc_network_interface" {
      for_each = local.function_direct_vpc.notify
      content {
        network    = direct_vpc_network_interface.value.network
        subnetwork = direct_vpc_network_interface.value.subnetwork
      }
    }
  }

  lifecycle {
    # The push identity is the only internal caller notify accepts, for its own URL.
    precondition {
      condition     = local.function_env.notify["SAFESEND_AUTH_INTERNAL_INVOKERS"] == google_service_account.notify_push[0].email && local.function_env.notify["SAFESEND_AUTH_AUDIENCES"] == local.function_urls.notify
      error_message = "notify must accept exactly the push subscription's identity, with its own URL as audience (env_spec.json)."
    }
  }

  depends_on = [time_sleep.iam_propagation]
}

# -----------------------------------------------------------------------------
# review (reviewers_enabled): the reviewers' console, GET pages and POST
# decisions, behind Identity-Aware Proxy enabled directly on its Cloud Run
# service (iap.tf). Ingress ALLOW_ALL: people reach it from their browsers on
# the run.app URL, where IAP signs them in; only the IAP service agent may
# invoke the service (iam.tf), and the app verifies IAP's signed assertion
# (audience SAFESEND_REVIEW_IAP_AUDIENCE) and its own allowlist. A separate
# service from notify: IAP on a service breaks Pub/Sub push to it (Cloud Run's
# IAP documentation, "Known limitations"). Its list query uses the composite
# index (state, updated_at), so it is deployed after the indexes.
# -----------------------------------------------------------------------------
resource "google_cloudfunctions2_function" "review" {
  #checkov:skip=CKV_GCP_124:People open the console from their browsers, so it must be reachable from the internet; Identity-Aware Proxy on the Cloud Run service signs them in and checks roles/iap.httpsResourceAccessor, only the IAP service agent holds run.invoker, and the app verifies the IAP assertion and its own allowlist.

  count = local.reviewers_enabled ? 1 : 0

  project     = var.project_id
  name        = "${var.name_prefix}-review"
  location    = var.region
  description = "safesend: the reviewers' console (behind Identity-Aware Proxy)."

  build_config {
    runtime           = var.runtime
    entry_point       = "review"
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
    max_instance_count               = var.review_max_instances
    max_instance_request_concurrency = local.env_spec.deploy.review.concurrency # bench 8: bench/README.md
    available_cpu                    = local.env_spec.deploy.review.cpu
    available_memory                 = local.env_spec.deploy.review.memory
    timeout_seconds                  = 120 # a resend decision: mailbox search + the send path's 40 s budget
    service_account_email            = google_service_account.review[0].email
    ingress_settings                 = "ALLOW_ALL"
    all_traffic_on_latest_revision   = true
    environment_variables            = local.function_env.review

    dynamic "secret_environment_variables" {
      for_each = local.function_secrets.review
      content {
        key        = secret_environment_variables.key
        project_id = var.project_id
        secret     = secret_environment_variables.value.secret_id
        version    = secret_environment_variables.value.version
      }
    }

    dynamic "secret_volumes" {
      for_each = local.function_secret_files.review
      content {
        mount_path = secret_volumes.value.mount_path
        project_id = var.project_id
        secret     = secret_volumes.value.secret_id
        versions {
          path    = secret_volumes.value.file
          version = secret_volumes.value.version
        }
      }
    }

    direct_vpc_egress = one(local.function_direct_vpc.review[*].egress)

    dynamic "direct_vpc_network_interface" {
      for_each = local.function_direct_vpc.review
      content {
        network    = direct_vpc_network_interface.value.network
        subnetwork = direct_vpc_network_interface.value.subnetwork
      }
    }
  }

  lifecycle {
    # The app refuses to start without an allowlist; say so at plan time.
    precondition {
      condition     = length(var.review_allowed_emails) + length(var.review_allowed_domains) > 0
      error_message = "reviewers_enabled: set review_allowed_emails and/or review_allowed_domains (the console's own allowlist behind IAP)."
    }
    # Somebody must get through IAP.
    precondition {
      condition     = length(var.review_iap_members) > 0
      error_message = "reviewers_enabled: list the reviewers (a Google group, users or a domain) in review_iap_members."
    }
    # Signed-in reviewers only: IAP's audience in the Cloud Run form, an https
    # console origin, the CSRF key from Secret Manager.
    precondition {
      condition = (
        can(regex("^/projects/[0-9]+/locations/[a-z0-9-]+/services/[A-Za-z0-9_-]+$", local.function_env.review["SAFESEND_REVIEW_IAP_AUDIENCE"]))
        && can(regex("^https://", local.function_env.review["SAFESEND_REVIEW_CONSOLE_URL"]))
        && contains(keys(local.function_secrets.review), "SAFESEND_REVIEW_CSRF_SECRET")
        && !contains(keys(local.function_env.review), "SAFESEND_REVIEW_CSRF_SECRET")
      )
      error_message = "review must run with an IAP audience /projects/NUMBER/locations/REGION/services/NAME, an https console URL and the CSRF secret from Secret Manager, never as a plain value (env_spec.json; tests/infra also refuse a development identity)."
    }
  }

  depends_on = [time_sleep.iam_propagation, google_firestore_index.jobs]
}
