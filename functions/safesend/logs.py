"""Structured JSON logs on stdout, in the shape Cloud Logging parses (severity, message, trace).

Never pass bodies, raw MIME or credentials here: only ids, states and error codes.
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
import sys
from datetime import datetime, timezone
from typing import Any

_trace: contextvars.ContextVar[str | None] = contextvars.ContextVar("safesend_trace", default=None)
_LOGGER_NAME = "safesend"


class CloudLoggingFormatter(logging.Formatter):
    """One JSON object per line: Cloud Logging maps `severity`, `message` and the trace field."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "severity": record.levelname if record.levelname != "WARN" else "WARNING",
            "message": record.getMessage(),
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(),
            "logger": record.name,
        }
        entry.update(getattr(record, "fields", {}) or {})
        trace = _trace.get()
        if trace:
            entry["logging.googleapis.com/trace"] = trace
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


def get_logger() -> logging.Logger:
    logger = logging.getLogger(_LOGGER_NAME)
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(CloudLoggingFormatter())
        logger.addHandler(handler)
        logger.setLevel(os.environ.get("SAFESEND_LOG_LEVEL", "INFO").upper())
        logger.propagate = False
    return logger


def log(level: int, message: str, **fields: Any) -> None:
    get_logger().log(level, message, extra={"fields": fields})


def set_trace_from_headers(headers: Any, project: str | None) -> None:
    """Link our lines to the request trace (X-Cloud-Trace-Context or W3C traceparent)."""
    trace_id = None
    cloud = headers.get("X-Cloud-Trace-Context") if headers else None
    if cloud:
        trace_id = cloud.split("/", 1)[0]
    else:
        parent = headers.get("traceparent") if headers else None
        parts = parent.split("-") if parent else []
        if len(parts) >= 2:
            trace_id = parts[1]
    _trace.set(f"projects/{project}/traces/{trace_id}" if trace_id and project else None)
