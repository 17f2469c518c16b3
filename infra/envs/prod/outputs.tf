output "send_url" {
  description = "URL of send: n8n POSTs jobs here; also the ID-token audience."
  value       = module.safesend.send_url
}

output "status_url" {
  description = "URL of status: GET ?job_id=...; also the ID-token audience."
  value       = module.safesend.status_url
}

output "reconcile_url" {
  description = "URL of reconcile (Cloud Tasks target, internal only)."
  value       = module.safesend.reconcile_url
}

output "sweep_url" {
  description = "URL of sweep (Cloud Scheduler target, internal only)."
  value       = module.safesend.sweep_url
}

output "review_topic" {
  description = "Review topic."
  value       = module.safesend.review_topic
}

output "review_subscription" {
  description = "Reviewers' pull subscription."
  value       = module.safesend.review_subscription
}

output "review_dead_letter_topic" {
  description = "Dead-letter topic of the reviewers' subscription."
  value       = module.safesend.review_dead_letter_topic
}

output "review_dead_letter_subscription" {
  description = "Subscription holding dead-lettered review items."
  value       = module.safesend.review_dead_letter_subscription
}

output "tasks_queue" {
  description = "Reconcile Cloud Tasks queue."
  value       = module.safesend.tasks_queue
}

output "n8n_invoker_service_account_email" {
  description = "Service account n8n uses for ID tokens (null if not created)."
  value       = module.safesend.n8n_invoker_service_account_email
}

output "function_service_accounts" {
  description = "Runtime service account of each function."
  value       = module.safesend.function_service_accounts
}

output "gmail_credentials_secret" {
  description = "Secret to put the Gmail OAuth refresh token JSON in (null with keyless delegation)."
  value       = module.safesend.gmail_credentials_secret
}

output "gmail_delegation_client_ids" {
  description = "Client IDs to authorise for domain-wide delegation in the Admin console (keyless delegation only)."
  value       = module.safesend.gmail_delegation_client_ids
}

output "api_keys_secret" {
  description = "Secret to put the API key entries in (public_callers only)."
  value       = module.safesend.api_keys_secret
}

output "callback_hmac_secret" {
  description = "Secret to put the callback signing key in (callbacks only)."
  value       = module.safesend.callback_hmac_secret
}

output "webhook_hmac_secret" {
  description = "Secret to put the webhook HMAC key in."
  value       = module.safesend.webhook_hmac_secret
}

output "functions_source_object" {
  description = "Deployed source zip."
  value       = module.safesend.functions_source_object
}

output "notify_url" {
  description = "URL of notify (push endpoint of the notify push subscription, internal only); null without reviewers_enabled."
  value       = module.safesend.notify_url
}

output "review_url" {
  description = "The review console's service URL (behind IAP): reviewers open <review_url>/review; null without reviewers_enabled."
  value       = module.safesend.review_url
}

output "review_service" {
  description = "Cloud Run service of the console: switch IAP on with gcloud beta run services update <it> --region=R --iap (infra/README.md)."
  value       = module.safesend.review_service
}

output "review_iap_audience" {
  description = "Audience IAP signs for the console (SAFESEND_REVIEW_IAP_AUDIENCE)."
  value       = module.safesend.review_iap_audience
}

output "notify_push_subscription" {
  description = "Push subscription feeding notify."
  value       = module.safesend.notify_push_subscription
}

output "notify_chat_webhook_secret" {
  description = "Secret to hold the Google Chat incoming-webhook URL (null unless enabled)."
  value       = module.safesend.notify_chat_webhook_secret
}

output "notify_slack_webhook_secret" {
  description = "Secret to hold the Slack incoming-webhook URL (null unless enabled)."
  value       = module.safesend.notify_slack_webhook_secret
}

output "review_csrf_secret" {
  description = "Secret to hold the console's CSRF key, >= 32 bytes (null without reviewers_enabled)."
  value       = module.safesend.review_csrf_secret
}

output "postgres_instance" {
  description = "Cloud SQL instance of the PostgreSQL job store (null with Firestore)."
  value       = module.safesend.postgres_instance
}

output "postgres_connection_name" {
  description = "Its connection name, for gcloud sql connect / the Cloud SQL Auth Proxy (null with Firestore)."
  value       = module.safesend.postgres_connection_name
}

output "postgres_private_ip" {
  description = "The private IP the functions connect to (null with Firestore)."
  value       = module.safesend.postgres_private_ip
}

output "postgres_users" {
  description = "Each function's IAM database user (empty with Firestore)."
  value       = module.safesend.postgres_users
}

output "postgres_setup_sql" {
  description = "The one-time setup SQL of the PostgreSQL job store, to run as postgres in database safesend (null with Firestore; infra/README.md)."
  value       = module.safesend.postgres_setup_sql
}
