# Issue 20: operations are never silent either. One log-based metric per
# signal the code logs (functions/safesend/core/signals.py), an alert policy with a
# runbook (runbooks/<alert>.md) for every way the service can silently stop,
# the notification channels, and a dashboard. The definitions are
# monitoring.json, which the gcloud path renders too (infra/monitoring_render.py).
# On by default; monitoring_enabled = false leaves all of it out.

locals {
  monitoring = jsondecode(file("${path.module}/monitoring.json"))

  # Seconds between sweeps, from sweep_schedule ("*/N * * * *" or "* * * * *", as its validation
  # accepts): the dead man's switch fires after `sweeps` of them without a completed sweep, and
  # every function's SAFESEND_SWEEP_INTERVAL_S is it (functions.tf's env_facts.sweep_interval_s).
  sweep_interval_seconds = 60 * (var.sweep_schedule == "* * * * *" ? 1 : tonumber(regex("^\\*/([0-9]+) \\* \\* \\* \\*$", var.sweep_schedule)[0]))

  monitoring_thresholds = merge(local.monitoring.thresholds, var.monitoring_thresholds)

  log_metric_types = {
    for name, metric in local.monitoring.metrics : name => "logging.googleapis.com/user/${var.name_prefix}_${name}"
  }

  # What each alert (and its dashboard chart) watches: a built-in metric, or
  # the log-based metric of a signal, across every revision of every function.
  chart_filters = {
    for name, alert in local.monitoring.alerts : name => (
      lookup(alert, "filter", null) != null ? replace(alert.filter, "{prefix}", var.name_prefix) : join(" AND ", compact([
        "metric.type=\"${local.log_metric_types[alert.metric]}\"",
        "resource.type=\"cloud_run_revision\"",
        lookup(alert, "label_filter", ""),
      ]))
    )
  }

  ops_channels = concat(
    [for channel in google_monitoring_notification_channel.email : channel.name],
    google_monitoring_notification_channel.slack[*].name,
    google_monitoring_notification_channel.chat[*].name,
  )
  reviewer_channels = [for channel in google_monitoring_notification_channel.reviewer_email : channel.name]
}

resource "google_project_service" "monitoring" {
  count = var.monitoring_enabled ? 1 : 0

  project            = var.project_id
  service            = "monitoring.googleapis.com"
  disable_on_destroy = false

  # An alert policy without a channel only opens incidents in the console, where nobody looks:
  # the dead man's switch included, every alert would fire into nowhere.
  lifecycle {
    precondition {
      condition     = length(var.monitoring_notification_emails) > 0 || var.monitoring_slack_channel != "" || var.monitoring_chat_space != ""
      error_message = "The alerts need an operations channel: set monitoring_notification_emails, monitoring_slack_channel (with monitoring_slack_auth_token) or monitoring_chat_space. Without one every alert, the dead man's switch included, fires into nowhere. monitoring_enabled = false leaves the alerts out knowingly."
    }
    precondition {
      condition     = var.monitoring_slack_channel == "" || var.monitoring_slack_auth_token != ""
      error_message = "monitoring_slack_channel needs monitoring_slack_auth_token (Cloud Monitoring's Slack app token)."
    }
  }
}

resource "google_logging_metric" "signal" {
  for_each = { for name, metric in local.monitoring.metrics : name => metric if var.monitoring_enabled }

  project          = var.project_id
  name             = "${var.name_prefix}_${each.key}"
  description      = each.value.description
  filter           = each.value.filter
  value_extractor  = lookup(each.value, "value_field", null) == null ? null : "EXTRACT(jsonPayload.${each.value.value_field})"
  label_extractors = { for label, field in each.value.labels : label => "EXTRACT(jsonPayload.${field})" }

  metric_descriptor {
    metric_kind = "DELTA"
    value_type  = lookup(each.value, "value_field", null) == null ? "INT64" : "DISTRIBUTION"
    unit        = lookup(each.value, "unit", "1")

    dynamic "labels" {
      for_each = each.value.labels
      content {
        key        = labels.key
        value_type = "STRING"
      }
    }
  }

  dynamic "bucket_options" {
    for_each = lookup(each.value, "value_field", null) == null ? [] : [1]
    content {
      exponential_buckets {
        num_finite_buckets = 32
        growth_factor      = 2
        scale              = 1
      }
    }
  }
}

resource "google_monitoring_notification_channel" "email" {
  for_each = var.monitoring_enabled ? toset(var.monitoring_notification_emails) : toset([])

  project      = var.project_id
  display_name = "safesend ${var.name_prefix} operations: ${each.value}"
  type         = "email"
  labels = {
    email_address = each.value
  }
}

resource "google_monitoring_notification_channel" "slack" {
  count = var.monitoring_enabled && var.monitoring_slack_channel != "" ? 1 : 0

  project      = var.project_id
  display_name = "safesend ${var.name_prefix} operations: Slack ${var.monitoring_slack_channel}"
  type         = "slack"
  labels = {
    channel_name = var.monitoring_slack_channel
  }
  sensitive_labels {
    auth_token = var.monitoring_slack_auth_token
  }
}

# Cloud Monitoring's Google Chat channel: the space must have the "Google Cloud
# Monitoring" Chat app added (infra/README.md).
resource "google_monitoring_notification_channel" "chat" {
  count = var.monitoring_enabled && var.monitoring_chat_space != "" ? 1 : 0

  project      = var.project_id
  display_name = "safesend ${var.name_prefix} operations: Google Chat"
  type         = "google_chat"
  labels = {
    space = var.monitoring_chat_space
  }
}

# The reviewers hear of every duplicate at once, as well as operations.
resource "google_monitoring_notification_channel" "reviewer_email" {
  for_each = var.monitoring_enabled ? toset(var.monitoring_reviewer_emails) : toset([])

  project      = var.project_id
  display_name = "safesend ${var.name_prefix} reviewers: ${each.value}"
  type         = "email"
  labels = {
    email_address = each.value
  }
}

resource "google_monitoring_alert_policy" "alert" {
  for_each = { for name, alert in local.monitoring.alerts : name => alert if var.monitoring_enabled }

  project               = var.project_id
  display_name          = "safesend ${var.name_prefix}: ${each.value.title}"
  combiner              = "OR"
  severity              = each.value.severity
  notification_channels = concat(local.ops_channels, lookup(each.value, "reviewers", false) ? local.reviewer_channels : [])

  conditions {
    display_name = each.value.title

    dynamic "condition_absent" {
      for_each = each.value.type == "absent" ? [1] : []
      content {
        filter   = local.chart_filters[each.key]
        duration = "${local.sweep_interval_seconds * each.value.sweeps}s"
        aggregations {
          alignment_period     = "${local.sweep_interval_seconds}s"
          per_series_aligner   = "ALIGN_DELTA"
          cross_series_reducer = "REDUCE_SUM" # one series across revisions: a new deploy is not "absent"
        }
      }
    }

    dynamic "condition_threshold" {
      for_each = each.value.type == "threshold" ? [1] : []
      content {
        # per_unknown_window: the threshold is a share of the deployment's unknown window (index lag)
        filter          = local.chart_filters[each.key]
        comparison      = "COMPARISON_GT"
        threshold_value = local.monitoring_thresholds[each.value.threshold] * (lookup(each.value, "per_unknown_window", false) ? var.unknown_window_seconds : each.value.scale)
        duration        = "0s"
        aggregations {
          alignment_period     = "300s"
          per_series_aligner   = each.value.aligner
          cross_series_reducer = contains(["ALIGN_DELTA", "ALIGN_RATE"], each.value.aligner) ? "REDUCE_SUM" : "REDUCE_MAX"
          group_by_fields      = lookup(each.value, "group_by", [])
        }
        trigger {
          count = 1
        }
      }
    }

    dynamic "condition_matched_log" {
      for_each = each.value.type == "log" ? [1] : []
      content {
        filter = local.monitoring.metrics[each.value.metric].filter
      }
    }
  }

  dynamic "alert_strategy" {
    for_each = each.value.type == "log" ? [1] : []
    content {
      auto_close = "1800s"
      notification_rate_limit {
        period = "300s"
      }
    }
  }

  documentation {
    subject   = "safesend ${var.name_prefix}: ${each.value.title}"
    content   = replace(file("${path.module}/runbooks/${each.key}.md"), "{prefix}", var.name_prefix)
    mime_type = "text/markdown"
  }

  depends_on = [google_logging_metric.signal, google_project_service.monitoring]
}

resource "google_monitoring_dashboard" "safesend" {
  count = var.monitoring_enabled ? 1 : 0

  project = var.project_id
  dashboard_json = jsonencode({
    displayName = "safesend ${var.name_prefix}"
    gridLayout = {
      columns = "3"
      widgets = [
        for name, alert in local.monitoring.alerts : {
          title = alert.title
          xyChart = {
            dataSets = [{
              plotType = "LINE"
              timeSeriesQuery = {
                timeSeriesFilter = {
                  filter = local.chart_filters[name]
                  aggregation = {
                    alignmentPeriod    = "300s"
                    perSeriesAligner   = lookup(alert, "aligner", "ALIGN_DELTA")
                    crossSeriesReducer = contains(["ALIGN_PERCENTILE_99", "ALIGN_MAX"], lookup(alert, "aligner", "ALIGN_DELTA")) ? "REDUCE_MAX" : "REDUCE_SUM"
                    groupByFields      = lookup(alert, "group_by", [])
                  }
                }
              }
            }]
          }
        }
      ]
    }
  })

  depends_on = [google_logging_metric.signal, google_project_service.monitoring]
}
