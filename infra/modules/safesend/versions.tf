terraform {
  # check blocks and import blocks need >= 1.5.
  required_version = ">= 1.5.0"

  # Exact versions, pinned here once for every environment (infra/envs/* configure the providers
  # and commit their .terraform.lock.hcl): tests/infra checks every resource and argument in
  # infra/ against these providers' schemas (infra/schema/*-provider-snapshot.json, regenerated
  # by infra/schema/regenerate.py). Bump both together.
  required_providers {
    google = {
      source  = "hashicorp/google"
      version = "8.7.0"
    }
    # Only for google_project_service_identity (the Pub/Sub and IAP service
    # agents), which the GA provider lacks.
    google-beta = {
      source  = "hashicorp/google-beta"
      version = "8.7.0"
    }
    # Zips ../../../functions; 2.5+ matches `excludes` as doublestar globs.
    archive = {
      source  = "hashicorp/archive"
      version = "2.8.1"
    }
    # Waits for IAM grants to propagate before the first function build.
    time = {
      source  = "hashicorp/time"
      version = "0.14.2"
    }
  }
}
