locals {
  # Every API the stack uses. cloudresourcemanager (project IAM), iam and
  # iamcredentials (ID tokens for n8n and for Cloud Tasks/Scheduler OIDC) are
  # not called by the code but by Terraform and by the callers. iap only with
  # the reviewer side (the console is behind Identity-Aware Proxy); Cloud SQL,
  # the VPC network and private services access only with job_store = "postgres".
  required_apis = toset(concat([
    "artifactregistry.googleapis.com", # function images (our repository, see build.tf)
    "cloudbuild.googleapis.com",       # builds those images from the source zip
    "cloudfunctions.googleapis.com",
    "cloudresourcemanager.googleapis.com",
    "cloudscheduler.googleapis.com",
    "cloudtasks.googleapis.com",
    "firestore.googleapis.com",
    "gmail.googleapis.com",
    "iam.googleapis.com",
    "iamcredentials.googleapis.com",
    "logging.googleapis.com",
    "pubsub.googleapis.com",
    "run.googleapis.com", # gen2 functions are Cloud Run services
    "secretmanager.googleapis.com",
    "storage.googleapis.com",
    ], var.reviewers_enabled ? ["iap.googleapis.com"] : [], local.postgres ? [
    "compute.googleapis.com",           # the VPC network and subnet (network.tf)
    "servicenetworking.googleapis.com", # private services access: the instance's private IP
    "sqladmin.googleapis.com",          # the Cloud SQL instance, database and users
  ] : []))
}

resource "google_project_service" "enabled" {
  for_each = local.required_apis

  project = var.project_id
  service = each.value

  # Other workloads in the project may rely on these APIs: `terraform destroy`
  # never switches them off.
  disable_on_destroy         = false
  disable_dependent_services = false
}

# Project number: the deterministic run.app URLs and the Pub/Sub service agent
# are derived from it.
# (Reading it needs cloudresourcemanager, enabled before the first apply; no
# depends_on, which would defer the read and every URL to apply time.)
data "google_project" "this" {
  project_id = var.project_id
}
