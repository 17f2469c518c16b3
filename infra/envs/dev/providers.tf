# State in GCS; bucket and prefix come from
#   terraform init -backend-config=bucket=<state bucket> -backend-config=prefix=safesend/dev
# Terraform and provider versions: pinned exactly in ../../modules/safesend/versions.tf.
terraform {
  backend "gcs" {}
}

provider "google" {
  project        = var.project_id
  region         = var.region
  default_labels = { app = "safesend", managed-by = "terraform", environment = "dev" }
}

# Only for the module's service identities (Pub/Sub, IAP), which name their project.
provider "google-beta" {
  project = var.project_id
}

# Nothing to configure; declared so that terraform test's mock_provider replaces them too.
provider "archive" {}
provider "time" {}
