# Review items (ambiguous outcome, duplicate, permanent failure, retries
# exhausted) are published here by send, reconcile and sweep.
resource "google_pubsub_topic" "review" {
  #checkov:skip=CKV_GCP_83:Review items carry recipients, subject and attempt history but never a body or credentials; Google-managed encryption at rest applies, and CMEK would add a key lifecycle for no data that needs it.

  project = var.project_id
  name    = "${var.name_prefix}-review"

  message_retention_duration = "604800s" # 7 days: a late subscriber can still seek back

  depends_on = [google_project_service.enabled]
}

# Messages the reviewers' subscription could not get acknowledged after
# review_max_delivery_attempts deliveries.
resource "google_pubsub_topic" "review_dead_letter" {
  #checkov:skip=CKV_GCP_83:Same content as the review topic (dead-lettered review items); Google-managed encryption at rest.

  project = var.project_id
  name    = "${var.name_prefix}-review-dead-letter"

  message_retention_duration = "604800s"

  depends_on = [google_project_service.enabled]
}

# The reviewers' inbox (pull; e.g. an n8n workflow or a person with gcloud).
resource "google_pubsub_subscription" "review_inbox" {
  project = var.project_id
  name    = "${var.name_prefix}-review-inbox"
  topic   = google_pubsub_topic.review.id

  ack_deadline_seconds       = 60
  message_retention_duration = "604800s" # 7 days, the maximum
  retain_acked_messages      = false

  # A quiet inbox must not expire after the default 31 idle days.
  expiration_policy {
    ttl = ""
  }

  retry_policy {
    minimum_backoff = "10s"
    maximum_backoff = "600s"
  }

  dead_letter_policy {
    dead_letter_topic     = google_pubsub_topic.review_dead_letter.id
    max_delivery_attempts = var.review_max_delivery_attempts
  }

  # Dead-lettering needs the grants below; without them Pub/Sub keeps
  # redelivering instead of forwarding.
  depends_on = [
    google_pubsub_topic_iam_member.dead_letter_publisher,
  ]
}

# Keeps dead-lettered review items (a topic without subscriptions drops
# messages). Someone must look at it: it only fills when reviewers' tooling
# keeps failing on an item.
resource "google_pubsub_subscription" "review_dead_letter" {
  project = var.project_id
  name    = "${var.name_prefix}-review-dead-letter"
  topic   = google_pubsub_topic.review_dead_letter.id

  ack_deadline_seconds       = 60
  message_retention_duration = "604800s"

  expiration_policy {
    ttl = ""
  }
}

# notify's feed (reviewers_enabled): every review item is pushed to notify with
# an OIDC token of <prefix>-notify-push, audience = notify's run.app URL (the
# push endpoint too: internal-only ingress admits Pub/Sub push from this project
# on the run.app URL, cloud.google.com/run/docs/securing/ingress#settings). The
# app accepts it only from that account (SAFESEND_AUTH_INTERNAL_INVOKERS) with
# that audience (SAFESEND_AUTH_AUDIENCES); Cloud Run admits only that account
# (roles/run.invoker, iam.tf). A non-2xx answer is redelivered with backoff;
# after review_max_delivery_attempts the item goes to the same dead-letter topic
# as the inbox's (the forwarded message names its source subscription in the
# CloudPubSubDeadLetterSourceSubscription attribute). The sweeper publishes an
# item notify never took up again after review_notify_timeout_seconds.
# Creating a push subscription with an OIDC identity needs
# iam.serviceAccounts.actAs on that account (pubsub v1 PushConfig.OidcToken).
resource "google_pubsub_subscription" "notify_push" {
  count = local.reviewers_enabled ? 1 : 0

  project = var.project_id
  name    = "${var.name_prefix}-notify-push"
  topic   = google_pubsub_topic.review.id

  # Pub/Sub waits this long for notify's answer; notify's own timeout is 120 s
  # (functions.tf): a slow push is notify's error, never a redelivery while it
  # still runs.
  ack_deadline_seconds       = 180
  message_retention_duration = "604800s"
  retain_acked_messages      = false

  expiration_policy {
    ttl = ""
  }

  push_config {
    push_endpoint = local.function_urls.notify

    oidc_token {
      service_account_email = google_service_account.notify_push[0].email
      audience              = local.function_urls.notify
    }
  }

  retry_policy {
    minimum_backoff = "10s"
    maximum_backoff = "600s"
  }

  dead_letter_policy {
    dead_letter_topic     = google_pubsub_topic.review_dead_letter.id
    max_delivery_attempts = var.review_max_delivery_attempts
  }

  # Pushes start once notify exists and its push identity may call it, and
  # dead-lettering works from the first message.
  depends_on = [
    google_pubsub_topic_iam_member.dead_letter_publisher,
    google_cloud_run_v2_service_iam_member.notify_push_invoker,
  ]
}

# Who may pull review items (and the dead letters).
resource "google_pubsub_subscription_iam_member" "review_subscribers" {
  for_each = toset(var.review_subscriber_members)

  project      = var.project_id
  subscription = google_pubsub_subscription.review_inbox.name
  role         = "roles/pubsub.subscriber"
  member       = each.value
}

resource "google_pubsub_subscription_iam_member" "dead_letter_subscribers" {
  for_each = toset(var.review_subscriber_members)

  project      = var.project_id
  subscription = google_pubsub_subscription.review_dead_letter.name
  role         = "roles/pubsub.subscriber"
  member       = each.value
}

# Dead-lettering is done by the Pub/Sub service agent of this project
# (service-<number>@gcp-sa-pubsub.iam.gserviceaccount.com): it must publish to
# the dead-letter topic and acknowledge (subscriber) on the source
# subscription (pubsub.v1 DeadLetterPolicy.deadLetterTopic; cloud.google.com/
# pubsub/docs/handling-failures#grant_forwarding_permissions). Both grants are
# on those two resources only.
#
# The agent is not guaranteed to exist on a new project when the API has just
# been enabled, and granting a role to a missing account fails the apply. So it
# is created explicitly (Service Usage generateServiceIdentity, idempotent;
# google-beta only), its email is taken from the answer instead of being
# inferred from the project number, and the grants wait until IAM knows it.
resource "google_project_service_identity" "pubsub" {
  provider = google-beta

  project = var.project_id
  service = "pubsub.googleapis.com"

  depends_on = [google_project_service.enabled]
}

# A newly created service agent can take a moment to become grantable.
resource "time_sleep" "pubsub_agent" {
  create_duration = "30s"

  triggers = {
    member = google_project_service_identity.pubsub.member
  }
}

locals {
  # Read through the sleep, so every grant to the agent waits for it.
  pubsub_service_agent = time_sleep.pubsub_agent.triggers["member"]
}

resource "google_pubsub_topic_iam_member" "dead_letter_publisher" {
  project = var.project_id
  topic   = google_pubsub_topic.review_dead_letter.name
  role    = "roles/pubsub.publisher"
  member  = local.pubsub_service_agent
}

resource "google_pubsub_subscription_iam_member" "dead_letter_source_subscriber" {
  project      = var.project_id
  subscription = google_pubsub_subscription.review_inbox.name
  role         = "roles/pubsub.subscriber"
  member       = local.pubsub_service_agent
}

# The same forwarding grant on notify's push subscription.
resource "google_pubsub_subscription_iam_member" "dead_letter_notify_push_subscriber" {
  count = local.reviewers_enabled ? 1 : 0

  project      = var.project_id
  subscription = google_pubsub_subscription.notify_push[0].name
  role         = "roles/pubsub.subscriber"
  member       = local.pubsub_service_agent
}
