# The URLs are the functions' deterministic run.app URLs: the addresses to call
# and the audiences ID tokens must carry (also listed in SAFESEND_AUTH_AUDIENCES).

output "send_url" {
  description = "URL of send (POST a job; ID-token audience for n8n)."
  value       = local.function_urls.send
}

output "status_url" {
  description = "URL of status (GET ?job_id=...; ID-token audience for n8n)."
  value       = local.function_urls.status
}

output "reconcile_url" {
  description = "URL of reconcile (Cloud Tasks target; internal only)."
  value       = local.function_urls.reconcile
}

output "sweep_url" {
  description = "URL of sweep (Cloud Scheduler target; internal only)."
  value       = local.function_urls.sweep
}

output "notify_url" {
  description = "URL of notify (push endpoint and OIDC audience of the notify push subscription; internal only); null without reviewers_enabled."
  value       = local.reviewers_enabled ? local.function_urls.notify : null
}

output "review_url" {
  description = "URL of the review console's service (behind IAP); reviewers open <review_url>/review. null without reviewers_enabled."
  value       = local.reviewers_enabled ? local.function_urls.review : null
}

output "review_service" {
  description = "Cloud Run service of the review console, on which IAP must be switched on (gcloud beta run services update <it> --region=R --iap); null without reviewers_enabled."
  value       = one(google_cloudfunctions2_function.review[*].service_config[0].service)
}

output "review_iap_audience" {
  description = "The audience IAP signs for the console (SAFESEND_REVIEW_IAP_AUDIENCE); null without reviewers_enabled."
  value       = local.reviewers_enabled ? local.function_env.review["SAFESEND_REVIEW_IAP_AUDIENCE"] : null
}

output "function_uris" {
  description = "The URIs Cloud Functions reports for each deployed function (service_config.uri); they reach the same services."
  value = merge({
    send      = google_cloudfunctions2_function.send.service_config[0].uri
    reconcile = google_cloudfunctions2_function.reconcile.service_config[0].uri
    sweep     = google_cloudfunctions2_function.sweep.service_config[0].uri
    status    = google_cloudfunctions2_function.status.service_config[0].uri
    }, local.reviewers_enabled ? {
    notify = google_cloudfunctions2_function.notify[0].service_config[0].uri
    review = google_cloudfunctions2_function.review[0].service_config[0].uri
  } : {})
}

output "review_topic" {
  description = "Review topic (projects/P/topics/T)."
  value       = google_pubsub_topic.review.id
}

output "review_subscription" {
  description = "Reviewers' pull subscription."
  value       = google_pubsub_subscription.review_inbox.id
}

output "review_dead_letter_topic" {
  description = "Dead-letter topic of the reviewers' subscription."
  value       = google_pubsub_topic.review_dead_letter.id
}

output "notify_push_subscription" {
  description = "Push subscription feeding notify (OIDC, dead-letter to the review dead-letter topic); null without reviewers_enabled."
  value       = one(google_pubsub_subscription.notify_push[*].id)
}

output "notify_push_service_account_email" {
  description = "OIDC identity of the notify push subscription (the only invoker of notify); null without reviewers_enabled."
  value       = one(google_service_account.notify_push[*].email)
}

output "review_dead_letter_subscription" {
  description = "Subscription that keeps dead-lettered review items."
  value       = google_pubsub_subscription.review_dead_letter.id
}

output "tasks_queue" {
  description = "Reconcile Cloud Tasks queue (projects/P/locations/L/queues/Q)."
  value       = google_cloud_tasks_queue.reconcile.id
}

output "function_service_accounts" {
  description = "Runtime service account of each function."
  value = merge({
    send      = google_service_account.send.email
    reconcile = google_service_account.reconcile.email
    sweep     = google_service_account.sweep.email
    status    = google_service_account.status.email
    }, local.reviewers_enabled ? {
    notify = google_service_account.notify[0].email
    review = google_service_account.review[0].email
  } : {})
}

output "tasks_invoker_service_account_email" {
  description = "Service account whose OIDC token Cloud Tasks sends to reconcile."
  value       = google_service_account.tasks_invoker.email
}

output "scheduler_invoker_service_account_email" {
  description = "Service account whose OIDC token Cloud Scheduler sends to sweep."
  value       = google_service_account.scheduler_invoker.email
}

output "n8n_invoker_service_account_email" {
  description = "Service account n8n uses to call send/status (null when create_n8n_invoker_service_account = false)."
  value       = local.n8n_invoker_email
}

output "gmail_credentials_secret" {
  description = "Secret that must hold the Gmail OAuth refresh token (authorized-user JSON); null with keyless delegation (gmail_delegated_user set)."
  value       = one(google_secret_manager_secret.gmail_credentials[*].id)
}

output "gmail_delegation_client_ids" {
  description = "Keyless domain-wide delegation: the OAuth client IDs (service account unique IDs) of send, reconcile and sweep (and notify, review with reviewers_enabled), each to authorise once in the Admin console for the Gmail scopes; the same IDs serve every delegated mailbox (gmail_delegated_user or mailboxes with delegated_user); empty without delegation."
  value = local.gmail_signs_jwt ? merge({
    send      = google_service_account.send.unique_id
    reconcile = google_service_account.reconcile.unique_id
    sweep     = google_service_account.sweep.unique_id
    }, local.reviewers_enabled ? {
    notify = google_service_account.notify[0].unique_id
    review = google_service_account.review[0].unique_id
  } : {}) : {}
}

output "graph_federation_subjects" {
  description = "Federated Graph mailboxes (kind = graph, federated = true): the subject of each federated identity credential to add to the mailboxes' Entra app registration (issuer https://accounts.google.com, audience api://AzureADTokenExchange), one per function that sends: its service account's unique ID (the sub of its Google ID token); empty without a federated Graph mailbox."
  value = local.graph_federated ? merge({
    send      = google_service_account.send.unique_id
    reconcile = google_service_account.reconcile.unique_id
    sweep     = google_service_account.sweep.unique_id
    }, local.reviewers_enabled ? {
    notify = google_service_account.notify[0].unique_id
    review = google_service_account.review[0].unique_id
  } : {}) : {}
}

output "api_keys_secret" {
  description = "Secret that must hold the callers' API key entries (key_id:sha256hex, comma-separated); null unless public_callers."
  value       = one(google_secret_manager_secret.api_keys[*].id)
}

output "callback_hmac_secret" {
  description = "Secret that must hold the callback signing key (>= 32 bytes); null unless callback_allowed_hosts is set."
  value       = one(google_secret_manager_secret.callback_hmac[*].id)
}

output "notify_chat_webhook_secret" {
  description = "Secret that must hold the Google Chat incoming-webhook URL; null unless reviewers_enabled and notify_chat_webhook."
  value       = one(google_secret_manager_secret.notify_chat_webhook[*].id)
}

output "notify_slack_webhook_secret" {
  description = "Secret that must hold the Slack incoming-webhook URL; null unless reviewers_enabled and notify_slack_webhook."
  value       = one(google_secret_manager_secret.notify_slack_webhook[*].id)
}

output "review_csrf_secret" {
  description = "Secret that must hold the console's CSRF signing key (>= 32 bytes); null without reviewers_enabled."
  value       = one(google_secret_manager_secret.review_csrf[*].id)
}

output "iap_service_agent" {
  description = "The project's IAP service agent (created explicitly; it invokes the review console); null without reviewers_enabled."
  value       = one(google_project_service_identity.iap[*].email)
}

output "pubsub_service_agent" {
  description = "The project's Pub/Sub service agent (created explicitly; it dead-letters review items)."
  value       = google_project_service_identity.pubsub.email
}

output "webhook_hmac_secret" {
  description = "Secret that must hold the webhook HMAC key (>= 32 bytes)."
  value       = google_secret_manager_secret.webhook_hmac.id
}

output "functions_source_object" {
  description = "gs:// path of the deployed source zip (named by its SHA-256)."
  value       = "gs://${google_storage_bucket.functions_source.name}/${google_storage_bucket_object.functions_source.name}"
}

# ------------------------------------------------------------------ job store (job_store = "postgres")

output "postgres_instance" {
  description = "The Cloud SQL instance of the PostgreSQL job store; null with Firestore."
  value       = one(google_sql_database_instance.jobs[*].name)
}

output "postgres_connection_name" {
  description = "Its connection name (project:region:instance), for the Cloud SQL Auth Proxy / gcloud sql connect; null with Firestore."
  value       = one(google_sql_database_instance.jobs[*].connection_name)
}

output "postgres_private_ip" {
  description = "The private IP the functions connect to (in every SAFESEND_POSTGRES_DSN); null with Firestore."
  value       = one(google_sql_database_instance.jobs[*].private_ip_address)
}

output "postgres_users" {
  description = "Each function's IAM database user (its runtime account without .gserviceaccount.com); empty with Firestore."
  value       = local.postgres_users
}

output "postgres_setup_sql" {
  description = "The one manual step with job_store = postgres: run as \"postgres\" in database safesend once (and again after adding functions; idempotent). Creates the owner role and schema the store migrates into, and lets every function's user act as that role. null with Firestore."
  value       = local.postgres ? local.postgres_setup_sql : null
}
