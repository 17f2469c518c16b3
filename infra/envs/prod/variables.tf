# The inputs that name a prod deployment (terraform.tfvars, or Cloud Build's TF_VAR_*), passed to
# the module, which describes and checks them, and who the alerts tell; every other setting is an
# argument in main.tf.

variable "project_id" {
  description = "The prod project (module variable project_id)."
  type        = string
}

variable "region" {
  description = "Region of the functions and the regional resources (module variable region)."
  type        = string
  default     = "us-central1"
}

variable "message_id_domain" {
  description = "Right-hand side of generated Message-IDs, e.g. \"mail.example.com\" (module variable message_id_domain)."
  type        = string
}

variable "default_from" {
  description = "Default From header, e.g. \"Support <support@example.com>\" (module variable default_from)."
  type        = string
}

variable "monitoring_notification_emails" {
  description = "Who the alerts tell, e.g. [\"ops@example.com\"] (module variable monitoring_notification_emails). The plan stops without an alert channel: this, or monitoring_slack_channel / monitoring_chat_space in main.tf."
  type        = list(string)
  default     = []
}
