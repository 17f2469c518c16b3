"""Structured JSON logs on stdout, in the shape Cloud Logging parses (severity, message, trace).

Never pass bodies, raw MIME or credentials here: only ids, states and error codes.
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
import re
import sys
from datetime import UTC, datetime
from typing import Any

_EMAIL = re.compile(r"([A-Za-z0-9!#$%&'*+/=?^_`{|}~.-])[A-Za-z0-9!#$%&'*+/=?^_`{|}~.-]*@([A-Za-z0-9.-]+)")
# A trace id is whatever the caller's header says, so it is hostile text that lands in every line we
# log for the request: keep it to a token (Cloud Trace's own ids are 32 hex digits) or drop it.
_TRACE_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")
_trace: contextvars.ContextVar[str | None] = contextvars.ContextVar("safesend_trace", default=None)
_LOGGER_NAME = "safesend"
_configured = False


class CloudLoggingFormatter(logging.Formatter):
    """One JSON object per line: Cloud Logging maps `severity`, `message` and the trace field."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "severity": record.levelname if record.levelname != "WARN" else "WARNING",
            "message": record.getMessage(),
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "logger": record.name,
        }
        entry.update(getattr(record, "fields", {}) or {})
        entry = {k: mask_emails(v) for k, v in entry.items()}
        trace = _trace.get()
        if trace:
            entry["logging.googleapis.com/trace"] = trace
        if record.exc_info:
            entry["exception"] = mask_emails(self.formatException(record.exc_info))
        return json.dumps(entry, default=str, ensure_ascii=False)


def mask_emails(value: Any) -> Any:
    """`ann.lee@example.com` -> `a***@example.com`, in strings and nested lists/dicts.

    Defence in depth: we log ids, not addresses, but Gmail error texts can quote recipients.
    """
    if isinstance(value, str):
        return _EMAIL.sub(lambda m: f"{m.group(1)}***@{m.group(2)}", value)
    if isinstance(value, dict):
        return {k: mask_emails(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [mask_emails(v) for v in value]
    return value


LOG_LEVEL_ENV = "SAFESEND_LOG_LEVEL"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def log_level_from(raw: str) -> int | None:
    """The logging level a SAFESEND_LOG_LEVEL value names, or None if it names none (the settings
    check refuses such a value at start; until then the logger keeps INFO rather than crash)."""
    word = raw.strip().upper()
    return getattr(logging, word) if word in LOG_LEVELS else None


def get_logger() -> logging.Logger:
    """The package logger, configured once (JSON to stdout, level from SAFESEND_LOG_LEVEL)."""
    global _configured  # noqa: PLW0603 - configured once per process
    logger = logging.getLogger(_LOGGER_NAME)
    if not _configured:
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(CloudLoggingFormatter())
        logger.addHandler(handler)
        logger.setLevel(log_level_from(os.environ.get(LOG_LEVEL_ENV, "")) or logging.INFO)
        logger.propagate = False
        _configured = True
    return logger


def log(level: int, message: str, exc_info: bool = False, **fields: Any) -> None:
    """One structured line; `exc_info=True` inside an `except` adds the traceback (Error Reporting)."""
    get_logger().log(level, message, exc_info=exc_info, extra={"fields": fields})


def log_always(level: int, message: str, **fields: Any) -> None:
    """A line an alert reads (core/signals.emit), written whatever SAFESEND_LOG_LEVEL says: a quieter
    level must not silence an alert (index lag, Gmail refusals) nor starve the dead man's switch."""
    logger = get_logger()
    if logger.isEnabledFor(level):
        logger.log(level, message, extra={"fields": fields})
    elif not logger.disabled:
        logger.handle(logger.makeRecord(logger.name, level, "(signal)", 0, message, (), None, extra={"fields": fields}))


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
    usable = trace_id is not None and _TRACE_ID.fullmatch(trace_id) is not None
    _trace.set(f"projects/{project}/traces/{trace_id}" if usable and project else None)
