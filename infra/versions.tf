terraform {
  # CI pins the exact version (cloudbuild.yaml, _TF_VERSION); locally any
  # maintained release works.
  required_version = ">= 1.5.0"

  required_providers {
    google = {
      source  = "hashicorp/google"
      version = "~> 6.0"
    }
    # Zips ../functions so every source change produces a new object name.
    # 2.5+ is needed for glob patterns in `excludes`.
    archive = {
      source  = "hashicorp/archive"
      version = "~> 2.5"
    }
    # Waits for IAM grants to propagate before the first function build.
    time = {
      source  = "hashicorp/time"
      version = "~> 0.12"
    }
  }

  # State lives in GCS. Left empty on purpose so the same code works for every
  # environment: the bucket (and prefix) are passed at init time, e.g.
  #   terraform init -backend-config=bucket=my-tf-state -backend-config=prefix=safesend
  # See README.md for running without a bucket.
  backend "gcs" {}
}

provider "google" {
  project = var.project_id
  region  = var.region

  # Applied to every resource that supports labels (functions, bucket, topic,
  # subscription, secret, ...), so cost reports can be filtered by app.
  default_labels = var.labels
}
