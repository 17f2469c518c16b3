provider "google" {
  project = var.project_id
  region  = var.region

  # On every resource that takes labels (functions, bucket, topics, secrets, ...).
  default_labels = merge(var.labels, { environment = var.environment })
}

# Same project and labels; used by the module only for the Pub/Sub and IAP
# service agents (google_project_service_identity, not in the GA provider).
provider "google-beta" {
  project = var.project_id
  region  = var.region

  default_labels = merge(var.labels, { environment = var.environment })
}

module "safesend" {
  source = "../../modules/safesend"

  project_id  = var.project_id
  region      = var.region
  name_prefix = var.name_prefix

  manage_firestore_database        = var.manage_firestore_database
  firestore_location               = var.firestore_location
  firestore_point_in_time_recovery = var.firestore_point_in_time_recovery
  firestore_delete_protection      = var.firestore_delete_protection
  jobs_collection                  = var.jobs_collection

  job_store                    = var.job_store
  postgres_tier                = var.postgres_tier
  postgres_high_availability   = var.postgres_high_availability
  postgres_disk_size_gb        = var.postgres_disk_size_gb
  postgres_max_connections     = var.postgres_max_connections
  postgres_pool_max            = var.postgres_pool_max
  postgres_retained_backups    = var.postgres_retained_backups
  postgres_subnet_cidr         = var.postgres_subnet_cidr
  postgres_psa_prefix_length   = var.postgres_psa_prefix_length
  postgres_proxy_public_ip     = var.postgres_proxy_public_ip
  postgres_deletion_protection = var.postgres_deletion_protection
  postgres_server_ca_version   = var.postgres_server_ca_version

  message_id_domain         = var.message_id_domain
  default_from              = var.default_from
  gmail_user                = var.gmail_user
  gmail_delegated_user      = var.gmail_delegated_user
  gmail_credentials_version = var.gmail_credentials_version
  webhook_hmac_version      = var.webhook_hmac_version
  api_keys_version          = var.api_keys_version
  callback_hmac_version     = var.callback_hmac_version
  index_lag_seconds         = var.index_lag_seconds
  unknown_window_seconds    = var.unknown_window_seconds
  verify_horizon_seconds    = var.verify_horizon_seconds
  retry_horizon_seconds     = var.retry_horizon_seconds
  callback_allowed_hosts    = var.callback_allowed_hosts
  log_level                 = var.log_level

  create_n8n_invoker_service_account = var.create_n8n_invoker_service_account
  extra_caller_service_accounts      = var.extra_caller_service_accounts
  public_callers                     = var.public_callers
  api_deciders                       = var.api_deciders
  review_subscriber_members          = var.review_subscriber_members
  review_max_delivery_attempts       = var.review_max_delivery_attempts

  reviewers_enabled             = var.reviewers_enabled
  review_allowed_emails         = var.review_allowed_emails
  review_allowed_domains        = var.review_allowed_domains
  review_iap_members            = var.review_iap_members
  notify_chat_webhook           = var.notify_chat_webhook
  notify_slack_webhook          = var.notify_slack_webhook
  notify_email_to               = var.notify_email_to
  notify_email_channel          = var.notify_email_channel
  review_notify_timeout_seconds = var.review_notify_timeout_seconds
  notify_chat_webhook_version   = var.notify_chat_webhook_version
  notify_slack_webhook_version  = var.notify_slack_webhook_version
  review_csrf_version           = var.review_csrf_version
  notify_max_instances          = var.notify_max_instances
  review_max_instances          = var.review_max_instances

  send_min_instances              = var.send_min_instances
  send_max_instances              = var.send_max_instances
  status_max_instances            = var.status_max_instances
  reconcile_max_instances         = var.reconcile_max_instances
  tasks_max_dispatches_per_second = var.tasks_max_dispatches_per_second
  tasks_max_concurrent_dispatches = var.tasks_max_concurrent_dispatches
  sweep_schedule                  = var.sweep_schedule
  scheduler_time_zone             = var.scheduler_time_zone

  source_bucket_force_destroy = var.source_bucket_force_destroy

  mailboxes                      = var.mailboxes
  mailbox_pools                  = var.mailbox_pools
  monitoring_enabled             = var.monitoring_enabled
  monitoring_thresholds          = var.monitoring_thresholds
  monitoring_notification_emails = var.monitoring_notification_emails
  monitoring_slack_channel       = var.monitoring_slack_channel
  monitoring_slack_auth_token    = var.monitoring_slack_auth_token
  monitoring_chat_space          = var.monitoring_chat_space
  monitoring_reviewer_emails     = var.monitoring_reviewer_emails
}
