# Jobs that need a human (ambiguous outcome, permanent failure, ...) are
# published here by the functions.
resource "google_pubsub_topic" "review" {
  project = var.project_id
  name    = "${var.name_prefix}-review"

  depends_on = [google_project_service.enabled]
}

# Pull subscription that the review tooling (e.g. an n8n workflow) drains.
# No dead-letter policy: messages are simply redelivered until acked or until
# the 7-day retention drops them.
resource "google_pubsub_subscription" "review_inbox" {
  project = var.project_id
  name    = "${var.name_prefix}-review-inbox"
  topic   = google_pubsub_topic.review.id

  ack_deadline_seconds       = 60
  message_retention_duration = "604800s" # 7 days
  retain_acked_messages      = false

  # Default subscriptions expire after 31 idle days; an inbox that is quiet for
  # a month must not disappear.
  expiration_policy {
    ttl = ""
  }
}

resource "google_pubsub_subscription_iam_member" "review_subscribers" {
  for_each = toset(var.review_subscriber_members)

  project      = var.project_id
  subscription = google_pubsub_subscription.review_inbox.name
  role         = "roles/pubsub.subscriber"
  member       = each.value
}
