# URLs are the run.app URLs of the functions; they are also the audiences an
# ID token must carry to call them.

output "send_url" {
  description = "URL of the send function (POST; ID token audience for n8n)."
  value       = google_cloudfunctions2_function.send.service_config[0].uri
}

output "status_url" {
  description = "URL of the status function (GET; ID token audience for n8n)."
  value       = google_cloudfunctions2_function.status.service_config[0].uri
}

output "reconcile_url" {
  description = "URL of the reconcile function (Cloud Tasks target)."
  value       = google_cloudfunctions2_function.reconcile.service_config[0].uri
}

output "sweep_url" {
  description = "URL of the sweep function (Cloud Scheduler target)."
  value       = google_cloudfunctions2_function.sweep.service_config[0].uri
}

output "review_topic" {
  description = "Full path of the review Pub/Sub topic."
  value       = local.review_topic_path
}

output "review_subscription" {
  description = "Full path of the review inbox pull subscription."
  value       = google_pubsub_subscription.review_inbox.id
}

output "tasks_queue" {
  description = "Full path of the reconcile Cloud Tasks queue."
  value       = local.tasks_queue_path
}

output "runtime_service_account_email" {
  description = "Service account the functions run as."
  value       = google_service_account.runtime.email
}

output "tasks_invoker_service_account_email" {
  description = "Service account whose OIDC token Cloud Tasks sends to reconcile."
  value       = google_service_account.tasks_invoker.email
}

output "scheduler_invoker_service_account_email" {
  description = "Service account whose OIDC token Cloud Scheduler sends to sweep."
  value       = local.scheduler_invoker_email
}

output "n8n_invoker_service_account_email" {
  description = "Service account n8n uses to call send/status (null when create_n8n_invoker_service_account = false)."
  value       = local.n8n_invoker_email
}

output "build_service_account_email" {
  description = "Service account that builds the function images."
  value       = google_service_account.build.email
}

output "gmail_credentials_secret" {
  description = "Secret Manager secret that must hold the Gmail credentials JSON."
  value       = google_secret_manager_secret.gmail_credentials.id
}

output "gmail_credentials_add_version_command" {
  description = "Command that stores (or rotates) the Gmail credentials."
  value       = "gcloud secrets versions add ${google_secret_manager_secret.gmail_credentials.secret_id} --project=${var.project_id} --data-file=gmail-credentials.json"
}

output "functions_source_bucket" {
  description = "Bucket that holds the function source zips."
  value       = google_storage_bucket.functions_source.name
}

output "functions_source_object" {
  description = "Source zip currently deployed (named by its md5)."
  value       = google_storage_bucket_object.functions_source.name
}
