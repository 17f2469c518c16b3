# Every grant of the runtime identities, spelled out one by one so that
# tests/infra/test_policy.py can check each function's exact set.
#
# roles/datastore.user is granted on the project: Firestore has no IAM on
# collections or documents and no narrower predefined role for reading and
# writing documents (IAM conditions cannot narrow it to a collection either).
# It covers every database of the project, so keep safesend in a project of
# its own (or with databases you trust these functions with). With
# job_store = "postgres" the functions never call Firestore: no datastore.user;
# their Cloud SQL roles (cloudsql.instanceUser, cloudsql.client) are in cloudsql.tf.

# --------------------------------------------------------------------- send
# Claims/updates jobs, sends via Gmail, enqueues reconcile tasks (acting as the
# tasks invoker for their OIDC token), publishes review items; authenticates
# n8n by ID token or by the webhook HMAC.

resource "google_project_iam_member" "send_datastore_user" {
  count = local.postgres ? 0 : 1

  project = var.project_id
  role    = "roles/datastore.user"
  member  = "serviceAccount:${google_service_account.send.email}"
}

resource "google_cloud_tasks_queue_iam_member" "send_enqueuer" {
  project  = var.project_id
  location = google_cloud_tasks_queue.reconcile.location
  name     = google_cloud_tasks_queue.reconcile.name
  role     = "roles/cloudtasks.enqueuer"
  member   = "serviceAccount:${google_service_account.send.email}"
}

resource "google_service_account_iam_member" "send_acts_as_tasks_invoker" {
  service_account_id = google_service_account.tasks_invoker.name
  role               = "roles/iam.serviceAccountUser"
  member             = "serviceAccount:${google_service_account.send.email}"
}

resource "google_pubsub_topic_iam_member" "send_review_publisher" {
  project = var.project_id
  topic   = google_pubsub_topic.review.name
  role    = "roles/pubsub.publisher"
  member  = "serviceAccount:${google_service_account.send.email}"
}

resource "google_secret_manager_secret_iam_member" "send_gmail_credentials" {
  count = local.gmail_keyless ? 0 : 1

  project   = var.project_id
  secret_id = google_secret_manager_secret.gmail_credentials[0].secret_id
  role      = "roles/secretmanager.secretAccessor"
  member    = "serviceAccount:${google_service_account.send.email}"
}

# Keyless domain-wide delegation: send signs the delegation JWT as itself
# (IAM Credentials signJwt needs iam.serviceAccounts.signJwt, which
# roles/iam.serviceAccountTokenCreator holds), on its own account only.
resource "google_service_account_iam_member" "send_signs_own_jwt" {
  count = local.gmail_signs_jwt ? 1 : 0

  service_account_id = google_service_account.send.name
  role               = "roles/iam.serviceAccountTokenCreator"
  member             = "serviceAccount:${google_service_account.send.email}"
}

# Callbacks to n8n are signed with this secret (callback_allowed_hosts set).
resource "google_secret_manager_secret_iam_member" "send_callback_hmac" {
  count = local.callbacks_enabled ? 1 : 0

  project   = var.project_id
  secret_id = google_secret_manager_secret.callback_hmac[0].secret_id
  role      = "roles/secretmanager.secretAccessor"
  member    = "serviceAccount:${google_service_account.send.email}"
}

resource "google_secret_manager_secret_iam_member" "send_webhook_hmac" {
  project   = var.project_id
  secret_id = google_secret_manager_secret.webhook_hmac.secret_id
  role      = "roles/secretmanager.secretAccessor"
  member    = "serviceAccount:${google_service_account.send.email}"
}

# The callers' API keys (public_callers only).
resource "google_secret_manager_secret_iam_member" "send_api_keys" {
  count = var.public_callers ? 1 : 0

  project   = var.project_id
  secret_id = google_secret_manager_secret.api_keys[0].secret_id
  role      = "roles/secretmanager.secretAccessor"
  member    = "serviceAccount:${google_service_account.send.email}"
}

# ---------------------------------------------------------------- reconcile
# Settles jobs: searches the mailbox, may resend (channel policy "retry"),
# enqueues its own follow-up checks, publishes review items.

resource "google_project_iam_member" "reconcile_datastore_user" {
  count = local.postgres ? 0 : 1

  project = var.project_id
  role    = "roles/datastore.user"
  member  = "serviceAccount:${google_service_account.reconcile.email}"
}

resource "google_cloud_tasks_queue_iam_member" "reconcile_enqueuer" {
  project  = var.project_id
  location = google_cloud_tasks_queue.reconcile.location
  name     = google_cloud_tasks_queue.reconcile.name
  role     = "roles/cloudtasks.enqueuer"
  member   = "serviceAccount:${google_service_account.reconcile.email}"
}

resource "google_service_account_iam_member" "reconcile_acts_as_tasks_invoker" {
  service_account_id = google_service_account.tasks_invoker.name
  role               = "roles/iam.serviceAccountUser"
  member             = "serviceAccount:${google_service_account.reconcile.email}"
}

resource "google_pubsub_topic_iam_member" "reconcile_review_publisher" {
  project = var.project_id
  topic   = google_pubsub_topic.review.name
  role    = "roles/pubsub.publisher"
  member  = "serviceAccount:${google_service_account.reconcile.email}"
}

resource "google_secret_manager_secret_iam_member" "reconcile_gmail_credentials" {
  count = local.gmail_keyless ? 0 : 1

  project   = var.project_id
  secret_id = google_secret_manager_secret.gmail_credentials[0].secret_id
  role      = "roles/secretmanager.secretAccessor"
  member    = "serviceAccount:${google_service_account.reconcile.email}"
}

# Keyless domain-wide delegation: reconcile signs the delegation JWT as itself
# (IAM Credentials signJwt needs iam.serviceAccounts.signJwt, which
# roles/iam.serviceAccountTokenCreator holds), on its own account only.
resource "google_service_account_iam_member" "reconcile_signs_own_jwt" {
  count = local.gmail_signs_jwt ? 1 : 0

  service_account_id = google_service_account.reconcile.name
  role               = "roles/iam.serviceAccountTokenCreator"
  member             = "serviceAccount:${google_service_account.reconcile.email}"
}

# Callbacks to n8n are signed with this secret (callback_allowed_hosts set).
resource "google_secret_manager_secret_iam_member" "reconcile_callback_hmac" {
  count = local.callbacks_enabled ? 1 : 0

  project   = var.project_id
  secret_id = google_secret_manager_secret.callback_hmac[0].secret_id
  role      = "roles/secretmanager.secretAccessor"
  member    = "serviceAccount:${google_service_account.reconcile.email}"
}

# -------------------------------------------------------------------- sweep
# Finds stale/overdue/due jobs: resends due retries, re-enqueues lost checks,
# republishes unpublished review items.

resource "google_project_iam_member" "sweep_datastore_user" {
  count = local.postgres ? 0 : 1

  project = var.project_id
  role    = "roles/datastore.user"
  member  = "serviceAccount:${google_service_account.sweep.email}"
}

resource "google_cloud_tasks_queue_iam_member" "sweep_enqueuer" {
  project  = var.project_id
  location = google_cloud_tasks_queue.reconcile.location
  name     = google_cloud_tasks_queue.reconcile.name
  role     = "roles/cloudtasks.enqueuer"
  member   = "serviceAccount:${google_service_account.sweep.email}"
}

resource "google_service_account_iam_member" "sweep_acts_as_tasks_invoker" {
  service_account_id = google_service_account.tasks_invoker.name
  role               = "roles/iam.serviceAccountUser"
  member             = "serviceAccount:${google_service_account.sweep.email}"
}

resource "google_pubsub_topic_iam_member" "sweep_review_publisher" {
  project = var.project_id
  topic   = google_pubsub_topic.review.name
  role    = "roles/pubsub.publisher"
  member  = "serviceAccount:${google_service_account.sweep.email}"
}

resource "google_secret_manager_secret_iam_member" "sweep_gmail_credentials" {
  count = local.gmail_keyless ? 0 : 1

  project   = var.project_id
  secret_id = google_secret_manager_secret.gmail_credentials[0].secret_id
  role      = "roles/secretmanager.secretAccessor"
  member    = "serviceAccount:${google_service_account.sweep.email}"
}

# Keyless domain-wide delegation: sweep signs the delegation JWT as itself
# (IAM Credentials signJwt needs iam.serviceAccounts.signJwt, which
# roles/iam.serviceAccountTokenCreator holds), on its own account only.
resource "google_service_account_iam_member" "sweep_signs_own_jwt" {
  count = local.gmail_signs_jwt ? 1 : 0

  service_account_id = google_service_account.sweep.name
  role               = "roles/iam.serviceAccountTokenCreator"
  member             = "serviceAccount:${google_service_account.sweep.email}"
}

# Callbacks to n8n are signed with this secret (callback_allowed_hosts set).
resource "google_secret_manager_secret_iam_member" "sweep_callback_hmac" {
  count = local.callbacks_enabled ? 1 : 0

  project   = var.project_id
  secret_id = google_secret_manager_secret.callback_hmac[0].secret_id
  role      = "roles/secretmanager.secretAccessor"
  member    = "serviceAccount:${google_service_account.sweep.email}"
}

# ------------------------------------------------------------------- status
# Reads jobs; authenticates n8n by ID token or by the webhook HMAC.

resource "google_project_iam_member" "status_datastore_user" {
  count = local.postgres ? 0 : 1

  project = var.project_id
  role    = "roles/datastore.user"
  member  = "serviceAccount:${google_service_account.status.email}"
}

resource "google_secret_manager_secret_iam_member" "status_webhook_hmac" {
  project   = var.project_id
  secret_id = google_secret_manager_secret.webhook_hmac.secret_id
  role      = "roles/secretmanager.secretAccessor"
  member    = "serviceAccount:${google_service_account.status.email}"
}

# The callers' API keys (public_callers only).
resource "google_secret_manager_secret_iam_member" "status_api_keys" {
  count = var.public_callers ? 1 : 0

  project   = var.project_id
  secret_id = google_secret_manager_secret.api_keys[0].secret_id
  role      = "roles/secretmanager.secretAccessor"
  member    = "serviceAccount:${google_service_account.status.email}"
}

# ------------------------------------------------------------------- notify
# Takes up each review item (Pub/Sub push), queues and posts the reviewers' notices,
# and emails the reviewers through the send path (Gmail, tasks, review topic).
# Only with reviewers_enabled (count), like the function itself.

resource "google_project_iam_member" "notify_datastore_user" {
  count = local.reviewers_enabled && !local.postgres ? 1 : 0

  project = var.project_id
  role    = "roles/datastore.user"
  member  = "serviceAccount:${google_service_account.notify[0].email}"
}

resource "google_cloud_tasks_queue_iam_member" "notify_enqueuer" {
  count = local.reviewers_enabled ? 1 : 0

  project  = var.project_id
  location = google_cloud_tasks_queue.reconcile.location
  name     = google_cloud_tasks_queue.reconcile.name
  role     = "roles/cloudtasks.enqueuer"
  member   = "serviceAccount:${google_service_account.notify[0].email}"
}

resource "google_service_account_iam_member" "notify_acts_as_tasks_invoker" {
  count = local.reviewers_enabled ? 1 : 0

  service_account_id = google_service_account.tasks_invoker.name
  role               = "roles/iam.serviceAccountUser"
  member             = "serviceAccount:${google_service_account.notify[0].email}"
}

resource "google_pubsub_topic_iam_member" "notify_review_publisher" {
  count = local.reviewers_enabled ? 1 : 0

  project = var.project_id
  topic   = google_pubsub_topic.review.name
  role    = "roles/pubsub.publisher"
  member  = "serviceAccount:${google_service_account.notify[0].email}"
}

resource "google_secret_manager_secret_iam_member" "notify_gmail_credentials" {
  count = local.reviewers_enabled && !local.gmail_keyless ? 1 : 0

  project   = var.project_id
  secret_id = google_secret_manager_secret.gmail_credentials[0].secret_id
  role      = "roles/secretmanager.secretAccessor"
  member    = "serviceAccount:${google_service_account.notify[0].email}"
}

# Keyless domain-wide delegation: notify signs the delegation JWT as itself, on
# its own account only (as send, reconcile and sweep).
resource "google_service_account_iam_member" "notify_signs_own_jwt" {
  count = local.reviewers_enabled && local.gmail_signs_jwt ? 1 : 0

  service_account_id = google_service_account.notify[0].name
  role               = "roles/iam.serviceAccountTokenCreator"
  member             = "serviceAccount:${google_service_account.notify[0].email}"
}

resource "google_secret_manager_secret_iam_member" "notify_callback_hmac" {
  count = local.reviewers_enabled && local.callbacks_enabled ? 1 : 0

  project   = var.project_id
  secret_id = google_secret_manager_secret.callback_hmac[0].secret_id
  role      = "roles/secretmanager.secretAccessor"
  member    = "serviceAccount:${google_service_account.notify[0].email}"
}

# The webhook URLs (one secret per target). The outbox posts to the reviewers' chats from whichever
# function handles the job next: notify (the first post), a reconcile task or a sweep (retries of a
# post that failed), review (the answer in the thread after a decision). Each of those reads them.
locals {
  webhook_readers = local.reviewers_enabled ? {
    reconcile = google_service_account.reconcile.email
    sweep     = google_service_account.sweep.email
    notify    = google_service_account.notify[0].email
    review    = google_service_account.review[0].email
  } : {}
}

resource "google_secret_manager_secret_iam_member" "notify_chat_webhook" {
  for_each = var.notify_chat_webhook ? local.webhook_readers : {}

  project   = var.project_id
  secret_id = google_secret_manager_secret.notify_chat_webhook[0].secret_id
  role      = "roles/secretmanager.secretAccessor"
  member    = "serviceAccount:${each.value}"
}

resource "google_secret_manager_secret_iam_member" "notify_slack_webhook" {
  for_each = var.notify_slack_webhook ? local.webhook_readers : {}

  project   = var.project_id
  secret_id = google_secret_manager_secret.notify_slack_webhook[0].secret_id
  role      = "roles/secretmanager.secretAccessor"
  member    = "serviceAccount:${each.value}"
}

# ------------------------------------------------------------------- review
# The console: reads the open items (Firestore), records decisions; a resend goes
# through the send path (mailbox search, Gmail, tasks), a new review entry is published.
# Only with reviewers_enabled (count), like the function itself.

resource "google_project_iam_member" "review_datastore_user" {
  count = local.reviewers_enabled && !local.postgres ? 1 : 0

  project = var.project_id
  role    = "roles/datastore.user"
  member  = "serviceAccount:${google_service_account.review[0].email}"
}

resource "google_cloud_tasks_queue_iam_member" "review_enqueuer" {
  count = local.reviewers_enabled ? 1 : 0

  project  = var.project_id
  location = google_cloud_tasks_queue.reconcile.location
  name     = google_cloud_tasks_queue.reconcile.name
  role     = "roles/cloudtasks.enqueuer"
  member   = "serviceAccount:${google_service_account.review[0].email}"
}

resource "google_service_account_iam_member" "review_acts_as_tasks_invoker" {
  count = local.reviewers_enabled ? 1 : 0

  service_account_id = google_service_account.tasks_invoker.name
  role               = "roles/iam.serviceAccountUser"
  member             = "serviceAccount:${google_service_account.review[0].email}"
}

resource "google_pubsub_topic_iam_member" "review_review_publisher" {
  count = local.reviewers_enabled ? 1 : 0

  project = var.project_id
  topic   = google_pubsub_topic.review.name
  role    = "roles/pubsub.publisher"
  member  = "serviceAccount:${google_service_account.review[0].email}"
}

resource "google_secret_manager_secret_iam_member" "review_gmail_credentials" {
  count = local.reviewers_enabled && !local.gmail_keyless ? 1 : 0

  project   = var.project_id
  secret_id = google_secret_manager_secret.gmail_credentials[0].secret_id
  role      = "roles/secretmanager.secretAccessor"
  member    = "serviceAccount:${google_service_account.review[0].email}"
}

# Keyless domain-wide delegation: review signs the delegation JWT as itself, on
# its own account only (as send, reconcile and sweep).
resource "google_service_account_iam_member" "review_signs_own_jwt" {
  count = local.reviewers_enabled && local.gmail_signs_jwt ? 1 : 0

  service_account_id = google_service_account.review[0].name
  role               = "roles/iam.serviceAccountTokenCreator"
  member             = "serviceAccount:${google_service_account.review[0].email}"
}

resource "google_secret_manager_secret_iam_member" "review_callback_hmac" {
  count = local.reviewers_enabled && local.callbacks_enabled ? 1 : 0

  project   = var.project_id
  secret_id = google_secret_manager_secret.callback_hmac[0].secret_id
  role      = "roles/secretmanager.secretAccessor"
  member    = "serviceAccount:${google_service_account.review[0].email}"
}

# The key the console signs its decision forms with.
resource "google_secret_manager_secret_iam_member" "review_csrf" {
  count = local.reviewers_enabled ? 1 : 0

  project   = var.project_id
  secret_id = google_secret_manager_secret.review_csrf[0].secret_id
  role      = "roles/secretmanager.secretAccessor"
  member    = "serviceAccount:${google_service_account.review[0].email}"
}

# ---------------------------------------------------------------- job store
# job_store = "postgres": every function that touches the store reads the instance's server CA
# (mounted as a file, sslmode=verify-ca; secrets.tf). Its Cloud SQL roles are in cloudsql.tf.
resource "google_secret_manager_secret_iam_member" "cloudsql_server_ca" {
  for_each = local.postgres_accounts

  project   = var.project_id
  secret_id = google_secret_manager_secret.cloudsql_server_ca[0].secret_id
  role      = "roles/secretmanager.secretAccessor"
  member    = "serviceAccount:${each.value}"
}

# ------------------------------------------------------------- invocation
# Requests to gen2 functions are authorised by Cloud Run: roles/run.invoker on
# the service behind each function. reconcile and sweep are never public; send
# and status only with public_callers (below).

# Cloud Tasks -> reconcile, Cloud Scheduler -> sweep (and nothing else).
resource "google_cloud_run_v2_service_iam_member" "reconcile_tasks_invoker" {
  project  = var.project_id
  location = var.region
  name     = google_cloudfunctions2_function.reconcile.service_config[0].service
  role     = "roles/run.invoker"
  member   = "serviceAccount:${google_service_account.tasks_invoker.email}"
}

resource "google_cloud_run_v2_service_iam_member" "sweep_scheduler_invoker" {
  project  = var.project_id
  location = var.region
  name     = google_cloudfunctions2_function.sweep.service_config[0].service
  role     = "roles/run.invoker"
  member   = "serviceAccount:${google_service_account.scheduler_invoker.email}"
}

# n8n (and any extra caller service accounts) -> send and status only.
resource "google_cloud_run_v2_service_iam_member" "send_callers" {
  for_each = local.caller_members

  project  = var.project_id
  location = var.region
  name     = google_cloudfunctions2_function.send.service_config[0].service
  role     = "roles/run.invoker"
  member   = each.value
}

resource "google_cloud_run_v2_service_iam_member" "status_callers" {
  for_each = local.caller_members

  project  = var.project_id
  location = var.region
  name     = google_cloudfunctions2_function.status.service_config[0].service
  role     = "roles/run.invoker"
  member   = each.value
}

# Pub/Sub push -> notify: the push subscription's OIDC identity, nothing else.
resource "google_cloud_run_v2_service_iam_member" "notify_push_invoker" {
  count = local.reviewers_enabled ? 1 : 0

  project  = var.project_id
  location = var.region
  name     = google_cloudfunctions2_function.notify[0].service_config[0].service
  role     = "roles/run.invoker"
  member   = "serviceAccount:${google_service_account.notify_push[0].email}"
}

# IAP -> review: with IAP enabled directly on the console's Cloud Run service,
# IAP checks the person first (roles/iap.httpsResourceAccessor, iap.tf), then
# calls the service with its own service agent's identity, which Cloud Run's
# IAM check must admit (cloud.google.com/run/docs/securing/identity-aware-proxy-cloud-run).
# No one else may invoke it: never allUsers.
resource "google_cloud_run_v2_service_iam_member" "review_iap_invoker" {
  count = local.reviewers_enabled ? 1 : 0

  project  = var.project_id
  location = var.region
  name     = google_cloudfunctions2_function.review[0].service_config[0].service
  role     = "roles/run.invoker"
  member   = local.iap_service_agent
}

# public_callers: n8n outside Google Cloud calls send and status without a
# Google identity; the app's API keys / HMAC are the only gate, so the app runs
# there with SAFESEND_PUBLIC_INVOKER=true and SAFESEND_AUTH_TRUST_CLOUD_RUN_IAM
# off (env_spec.json; a precondition in functions.tf and tests/infra enforce
# the combination). Refused by the org policy iam.allowedPolicyMemberDomains
# (domain restricted sharing): see infra/README.md for the alternatives.
resource "google_cloud_run_v2_service_iam_member" "send_public" {
  count = var.public_callers ? 1 : 0

  project  = var.project_id
  location = var.region
  name     = google_cloudfunctions2_function.send.service_config[0].service
  role     = "roles/run.invoker"
  member   = "allUsers"
}

resource "google_cloud_run_v2_service_iam_member" "status_public" {
  count = var.public_callers ? 1 : 0

  project  = var.project_id
  location = var.region
  name     = google_cloudfunctions2_function.status.service_config[0].service
  role     = "roles/run.invoker"
  member   = "allUsers"
}

# Lets the n8n invoker mint ID tokens for itself through the IAM Credentials
# API (generateIdToken) when n8n holds only an OAuth access token for it (see
# infra/README.md). Granted on that account itself, not on the project.
resource "google_service_account_iam_member" "n8n_self_id_token" {
  count = var.create_n8n_invoker_service_account ? 1 : 0

  service_account_id = google_service_account.n8n_invoker[0].name
  role               = "roles/iam.serviceAccountOpenIdTokenCreator"
  member             = "serviceAccount:${google_service_account.n8n_invoker[0].email}"
}

# IAM is eventually consistent: a function deployed right after these grants
# can fail on the build account, on secret access, (keyless delegation) on
# its first signJwt or (postgres) on its first database login. Wait once, on
# creation; the database users and the server CA's version exist by then too.
resource "time_sleep" "iam_propagation" {
  create_duration = "60s"

  depends_on = [
    google_project_iam_member.build_log_writer,
    google_project_iam_member.build_source_access,
    google_storage_bucket_iam_member.build_reads_source,
    google_artifact_registry_repository_iam_member.build_writer,
    google_secret_manager_secret_iam_member.send_gmail_credentials,
    google_secret_manager_secret_iam_member.send_webhook_hmac,
    google_secret_manager_secret_iam_member.reconcile_gmail_credentials,
    google_secret_manager_secret_iam_member.sweep_gmail_credentials,
    google_secret_manager_secret_iam_member.status_webhook_hmac,
    google_secret_manager_secret_iam_member.send_api_keys,
    google_secret_manager_secret_iam_member.status_api_keys,
    google_secret_manager_secret_iam_member.send_callback_hmac,
    google_secret_manager_secret_iam_member.reconcile_callback_hmac,
    google_secret_manager_secret_iam_member.sweep_callback_hmac,
    google_service_account_iam_member.send_signs_own_jwt,
    google_service_account_iam_member.reconcile_signs_own_jwt,
    google_service_account_iam_member.sweep_signs_own_jwt,
    google_project_iam_member.send_datastore_user,
    google_project_iam_member.reconcile_datastore_user,
    google_project_iam_member.sweep_datastore_user,
    google_project_iam_member.status_datastore_user,
    google_project_iam_member.notify_datastore_user,
    google_project_iam_member.review_datastore_user,
    google_secret_manager_secret_iam_member.notify_gmail_credentials,
    google_secret_manager_secret_iam_member.review_gmail_credentials,
    google_secret_manager_secret_iam_member.notify_callback_hmac,
    google_secret_manager_secret_iam_member.review_callback_hmac,
    google_secret_manager_secret_iam_member.notify_chat_webhook,
    google_secret_manager_secret_iam_member.notify_slack_webhook,
    google_secret_manager_secret_iam_member.review_csrf,
    google_service_account_iam_member.notify_signs_own_jwt,
    google_service_account_iam_member.review_signs_own_jwt,
    google_project_iam_member.cloudsql_instance_user,
    google_project_iam_member.cloudsql_client,
    google_secret_manager_secret_iam_member.cloudsql_server_ca,
    google_secret_manager_secret_version.cloudsql_server_ca,
    google_sql_user.functions,
    google_sql_database.safesend,
  ]
}
