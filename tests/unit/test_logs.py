"""logs: one JSON object per line, in Cloud Logging's shape, linked to the request trace."""

from __future__ import annotations

import contextvars
import io
import json
import logging
import sys
from datetime import UTC, datetime

import pytest

from safesend.logs import CloudLoggingFormatter, get_logger, log, set_trace_from_headers

TRACE_KEY = "logging.googleapis.com/trace"


@pytest.fixture
def isolated_context():
    """The trace lives in a ContextVar: run each test's effects in a copy so nothing leaks out."""
    ctx = contextvars.copy_context()
    yield ctx


def record(
    message="hello %s", args=("world",), level=logging.INFO, fields=None, exc_info=None, name="safesend", created=None
) -> logging.LogRecord:
    rec = logging.LogRecord(name, level, __file__, 10, message, args, exc_info)
    if fields is not None:
        rec.fields = fields
    if created is not None:
        rec.created = created
    return rec


def formatted(rec: logging.LogRecord) -> dict:
    line = CloudLoggingFormatter().format(rec)
    assert "\n" not in line  # one line per entry
    entry = json.loads(line)
    assert isinstance(entry, dict)
    return entry


# --------------------------------------------------------------- formatter


def test_entry_has_severity_message_time_and_logger(isolated_context):
    created = datetime(2024, 5, 6, 7, 8, 9, 500000, tzinfo=UTC).timestamp()
    entry = isolated_context.run(formatted, record(created=created))
    assert entry["severity"] == "INFO"
    assert entry["message"] == "hello world"
    assert datetime.fromisoformat(entry["time"]) == datetime(2024, 5, 6, 7, 8, 9, 500000, tzinfo=UTC)
    assert entry["logger"] == "safesend"
    assert TRACE_KEY not in entry


@pytest.mark.parametrize(
    "level,severity",
    [
        (logging.DEBUG, "DEBUG"),
        (logging.INFO, "INFO"),
        (logging.WARNING, "WARNING"),
        (logging.ERROR, "ERROR"),
        (logging.CRITICAL, "CRITICAL"),
    ],
)
def test_severity_is_the_level_name(isolated_context, level, severity):
    assert isolated_context.run(formatted, record(level=level))["severity"] == severity


def test_warn_level_name_is_reported_as_warning(isolated_context):
    rec = record(level=logging.WARNING)
    rec.levelname = "WARN"
    assert isolated_context.run(formatted, rec)["severity"] == "WARNING"


def test_extra_fields_are_top_level_keys(isolated_context):
    when = datetime(2024, 1, 1, tzinfo=UTC)
    entry = isolated_context.run(
        formatted, record(fields={"job_id": "abc", "attempt": 2, "at": when, "ok": True, "nothing": None})
    )
    assert (entry["job_id"], entry["attempt"], entry["ok"], entry["nothing"]) == ("abc", 2, True, None)
    assert entry["at"] == str(when)  # non-JSON values are stringified, not dropped


def test_multiline_and_non_ascii_message_stays_one_json_line(isolated_context):
    entry = isolated_context.run(formatted, record(message="first\nsecond – Zoë", args=()))
    assert entry["message"] == "first\nsecond – Zoë"


def test_exception_is_included(isolated_context):
    try:
        raise RuntimeError("kaboom")
    except RuntimeError:
        exc_info = sys.exc_info()
    entry = isolated_context.run(formatted, record(exc_info=exc_info))
    assert "RuntimeError: kaboom" in entry["exception"]


# --------------------------------------------------------------- trace


def traced_entry(headers, project="proj-1") -> dict:
    set_trace_from_headers(headers, project)
    return formatted(record())


def test_cloud_trace_context_header_sets_the_trace(isolated_context):
    entry = isolated_context.run(traced_entry, {"X-Cloud-Trace-Context": "105445aa7843bc8bf206b120001000/1;o=1"})
    assert entry[TRACE_KEY] == "projects/proj-1/traces/105445aa7843bc8bf206b120001000"


def test_cloud_trace_context_without_span_sets_the_trace(isolated_context):
    entry = isolated_context.run(traced_entry, {"X-Cloud-Trace-Context": "abc123"})
    assert entry[TRACE_KEY] == "projects/proj-1/traces/abc123"


def test_w3c_traceparent_sets_the_trace(isolated_context):
    headers = {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
    entry = isolated_context.run(traced_entry, headers)
    assert entry[TRACE_KEY] == "projects/proj-1/traces/4bf92f3577b34da6a3ce929d0e0e4736"


def test_cloud_trace_context_wins_over_traceparent(isolated_context):
    headers = {"X-Cloud-Trace-Context": "CLOUD/2;o=1", "traceparent": "00-W3C-00f067aa0ba902b7-01"}
    assert isolated_context.run(traced_entry, headers)[TRACE_KEY] == "projects/proj-1/traces/CLOUD"


@pytest.mark.parametrize(
    "headers,project",
    [
        ({}, "proj-1"),
        (None, "proj-1"),
        ({"traceparent": "garbage"}, "proj-1"),
        ({"X-Cloud-Trace-Context": "TRACE/1;o=1"}, None),
        ({"X-Cloud-Trace-Context": "TRACE/1;o=1"}, ""),
        # hostile ids (found by the security review): they would land in every line of the request
        ({"X-Cloud-Trace-Context": "a" * 129 + "/1;o=1"}, "proj-1"),
        ({"X-Cloud-Trace-Context": 'ann@example.com said "hi"/1'}, "proj-1"),
        ({"traceparent": "00-" + "x" * 8000 + "-00f067aa0ba902b7-01"}, "proj-1"),
        ({"traceparent": "00-ab\ncd-00f067aa0ba902b7-01"}, "proj-1"),
    ],
)
def test_no_trace_without_a_usable_header_or_project(isolated_context, headers, project):
    assert TRACE_KEY not in isolated_context.run(traced_entry, headers, project)


def test_a_request_without_trace_headers_clears_the_previous_trace(isolated_context):
    def two_requests():
        first = traced_entry({"X-Cloud-Trace-Context": "FIRST/1;o=1"})
        second = traced_entry({})
        return first, second

    first, second = isolated_context.run(two_requests)
    assert first[TRACE_KEY] == "projects/proj-1/traces/FIRST"
    assert TRACE_KEY not in second


# --------------------------------------------------------------- log() end to end


def test_log_writes_one_json_line_with_fields_and_trace(isolated_context):
    def emit():
        logger = get_logger()  # installs the stdout handler and level first
        stream = io.StringIO()
        handler = logging.StreamHandler(stream)
        handler.setFormatter(CloudLoggingFormatter())
        old_level = logger.level
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
        try:
            set_trace_from_headers({"X-Cloud-Trace-Context": "TRACE/SPAN;o=1"}, "P")
            log(logging.WARNING, "send attempt failed", job_id="j1", code="http_429")
        finally:
            logger.removeHandler(handler)
            logger.setLevel(old_level)
        return stream.getvalue()

    output = isolated_context.run(emit)
    lines = output.splitlines()
    assert len(lines) == 1
    entry = json.loads(lines[0])
    assert entry["severity"] == "WARNING"
    assert entry["message"] == "send attempt failed"
    assert (entry["job_id"], entry["code"]) == ("j1", "http_429")
    assert entry[TRACE_KEY] == "projects/P/traces/TRACE"
    assert entry["logger"] == "safesend"


def test_get_logger_is_idempotent_and_does_not_propagate_to_root():
    logger = get_logger()
    handlers = list(logger.handlers)
    assert get_logger() is logger
    assert logger.handlers == handlers  # a second call adds no second handler (no duplicate lines)
    assert logger.name == "safesend"
    assert logger.propagate is False
    assert any(isinstance(h.formatter, CloudLoggingFormatter) for h in logger.handlers)


def test_an_unknown_log_level_keeps_info_instead_of_crashing_the_import():
    from safesend.logs import log_level_from

    assert log_level_from("debug") == logging.DEBUG
    assert log_level_from(" Error ") == logging.ERROR
    assert log_level_from("chatty") is None
    assert log_level_from("") is None
