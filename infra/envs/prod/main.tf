# The prod environment: a thin caller of the module. Every setting, its type, default and checks is
# in ../../modules/safesend/variables.tf (listed in infra/README.md, "Variables"); set one for this
# environment as an argument below.
# terraform.tfvars (or Cloud Build's TF_VAR_*) gives the four inputs that name the deployment and
# who the alerts tell (variables.tf). tests/infra/test_env_settings.py keeps this file in step with the module and dev.

module "safesend" {
  source = "../../modules/safesend"

  # prod's choices (tests/infra/test_env_settings.py, ENV_CHOICES): a standby database, two weeks
  # of backups, a warm send instance; and the job store's deletion protection pinned here, not a
  # variable: removing it is a reviewed change of this line (infra/README.md, "Turning it off").
  postgres_high_availability   = true
  postgres_retained_backups    = 14
  postgres_deletion_protection = true
  send_min_instances           = 1

  project_id        = var.project_id
  region            = var.region
  message_id_domain = var.message_id_domain
  default_from      = var.default_from

  monitoring_notification_emails = var.monitoring_notification_emails
}

output "safesend" {
  description = "Every output of the module (infra/README.md, \"Outputs\"): terraform output -json safesend | jq -r .send_url"
  value       = module.safesend
}
