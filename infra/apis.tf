locals {
  # APIs safesend needs. cloudresourcemanager and storage are not used by the
  # code, but Terraform needs them for project IAM bindings and the source
  # bucket; iamcredentials lets callers mint ID tokens for the invoker SAs.
  required_apis = toset([
    "artifactregistry.googleapis.com", # images built from the function source
    "cloudbuild.googleapis.com",       # builds those images
    "cloudfunctions.googleapis.com",
    "cloudresourcemanager.googleapis.com",
    "cloudscheduler.googleapis.com",
    "cloudtasks.googleapis.com",
    "firestore.googleapis.com",
    "gmail.googleapis.com",
    "iam.googleapis.com",
    "iamcredentials.googleapis.com", # generateIdToken for n8n / gcloud impersonation
    "pubsub.googleapis.com",
    "run.googleapis.com", # gen2 functions are Cloud Run services
    "secretmanager.googleapis.com",
    "storage.googleapis.com",
  ])
}

resource "google_project_service" "enabled" {
  for_each = local.required_apis

  project = var.project_id
  service = each.value

  # Other workloads in the project may rely on these APIs: never switch them
  # off as a side effect of `terraform destroy`.
  disable_on_destroy         = false
  disable_dependent_services = false
}
