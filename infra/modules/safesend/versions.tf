terraform {
  # check blocks and import blocks need >= 1.5.
  required_version = ">= 1.5.0"

  # Lower bounds only: the root modules (infra/envs/*) pin the exact versions
  # whose schemas tests/infra checks this module against (infra/schema/).
  required_providers {
    google = {
      source  = "hashicorp/google"
      version = ">= 8.7.0, < 9.0.0"
    }
    # Only for google_project_service_identity (the Pub/Sub service agent),
    # which the GA provider lacks.
    google-beta = {
      source  = "hashicorp/google-beta"
      version = ">= 8.7.0, < 9.0.0"
    }
    # Zips ../../../functions; 2.5+ matches `excludes` as doublestar globs.
    archive = {
      source  = "hashicorp/archive"
      version = ">= 2.8.0, < 3.0.0"
    }
    # Waits for IAM grants to propagate before the first function build.
    time = {
      source  = "hashicorp/time"
      version = ">= 0.14.0, < 1.0.0"
    }
  }
}
