# The dev environment: a thin caller of the module. Every setting, its type, default and checks is
# in ../../modules/safesend/variables.tf (listed in infra/README.md, "Variables"); set one for this
# environment as an argument below. terraform.tfvars (or Cloud Build's TF_VAR_*) gives the four
# inputs that name the deployment and who the alerts tell (variables.tf). tests/infra/test_env_settings.py keeps this file
# in step with the module and with prod.

module "safesend" {
  source = "../../modules/safesend"

  project_id        = var.project_id
  region            = var.region
  message_id_domain = var.message_id_domain
  default_from      = var.default_from

  monitoring_notification_emails = var.monitoring_notification_emails

  # dev's choices (tests/infra/test_env_settings.py, ENV_CHOICES): cheap and easy to tear down.
  firestore_point_in_time_recovery = false
  firestore_delete_protection      = false
  send_max_instances               = 5
  status_max_instances             = 3
  log_level                        = "DEBUG"
  source_bucket_force_destroy      = true
}

output "safesend" {
  description = "Every output of the module (infra/README.md, \"Outputs\"): terraform output -json safesend | jq -r .send_url"
  value       = module.safesend
}
