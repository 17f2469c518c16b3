"""A small evaluator for the subset of the Cloud Logging query language infra/'s log filters use, so a
log-based metric's filter can be run against the log lines the code really prints.

Subset: comparisons `path OP value` with OP one of = != : >= > <= < (`:` is "has", `:*` "present"),
paths like resource.type, severity, jsonPayload.a.b; values quoted or bare; AND, OR, NOT and
parentheses (AND binds tighter than OR, as in the Logging language). `severity` compares by level
(DEFAULT < DEBUG < INFO < NOTICE < WARNING < ERROR < CRITICAL < ALERT < EMERGENCY). Anything
else (functions, regular expressions, implicit AND by juxtaposition) raises FilterSyntaxError:
filters must stay inside what is tested here."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

SEVERITIES = ("DEFAULT", "DEBUG", "INFO", "NOTICE", "WARNING", "ERROR", "CRITICAL", "ALERT", "EMERGENCY")
_TOKEN = re.compile(r'\s*(?:(\()|(\))|(AND\b|OR\b|NOT\b)|("(?:[^"\\]|\\.)*")|(>=|<=|!=|=|:|>|<)|([A-Za-z0-9_.*@/-]+))')


class FilterSyntaxError(ValueError):
    """A filter outside the supported subset."""


@dataclass(frozen=True)
class Token:
    kind: str  # ( ) op bool str word
    text: str


def tokens(text: str) -> list[Token]:
    out, pos = [], 0
    while pos < len(text.rstrip()):
        match = _TOKEN.match(text, pos)
        if not match or match.end() == pos:
            raise FilterSyntaxError(f"cannot read {text[pos : pos + 20]!r}")
        kinds = ("(", ")", "bool", "str", "op", "word")
        kind = next(k for k, g in zip(kinds, match.groups(), strict=True) if g is not None)
        raw = match.group(kinds.index(kind) + 1)
        out.append(Token(kind, json.loads(raw) if kind == "str" else raw))
        pos = match.end()
    return out


class _Parser:
    def __init__(self, toks: list[Token]):
        self.toks, self.i = toks, 0

    def peek(self) -> Token | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self, kind: str, text: str | None = None) -> Token:
        tok = self.peek()
        if tok is None or tok.kind != kind or (text is not None and tok.text != text):
            raise FilterSyntaxError(f"expected {text or kind} at token {self.i}, got {tok}")
        self.i += 1
        return tok

    def parse(self) -> Any:
        node = self.or_()
        if self.peek() is not None:
            raise FilterSyntaxError(f"unexpected {self.peek()} (write AND explicitly)")
        return node

    def or_(self) -> Any:
        node = self.and_()
        while (tok := self.peek()) is not None and tok.kind == "bool" and tok.text == "OR":
            self.i += 1
            node = ("or", node, self.and_())
        return node

    def and_(self) -> Any:
        node = self.not_()
        while (tok := self.peek()) is not None and tok.kind == "bool" and tok.text == "AND":
            self.i += 1
            node = ("and", node, self.not_())
        return node

    def not_(self) -> Any:
        tok = self.peek()
        if tok is not None and tok.kind == "bool" and tok.text == "NOT":
            self.i += 1
            return ("not", self.not_())
        if tok is not None and tok.kind == "(":
            self.i += 1
            node = self.or_()
            self.take(")")
            return node
        path = self.take("word").text
        op = self.take("op").text
        value = self.peek()
        if value is None or value.kind not in ("str", "word"):
            raise FilterSyntaxError(f"{path}{op}: a value is needed")
        self.i += 1
        if value.kind == "word" and "(" in value.text:
            raise FilterSyntaxError("functions are outside the subset")
        return ("cmp", path, op, value.text)


def parse(text: str) -> Any:
    return _Parser(tokens(text)).parse()


def _lookup(entry: dict[str, Any], path: str) -> Any:
    value: Any = entry
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _compare(entry: dict[str, Any], path: str, op: str, want: str) -> bool:
    value = _lookup(entry, path)
    if op == ":" and want == "*":
        return value is not None
    if value is None:
        return op == "!="
    if path == "severity":
        if want not in SEVERITIES or value not in SEVERITIES:
            raise FilterSyntaxError(f"unknown severity {want!r} or {value!r}")
        a, b = SEVERITIES.index(value), SEVERITIES.index(want)
    else:
        a, b = (str(value).lower(), want.lower()) if op == ":" else (_as_text(value), want)
    if op == ":":
        return str(b) in str(a)
    return {"=": a == b, "!=": a != b, ">=": a >= b, ">": a > b, "<=": a <= b, "<": a < b}[op]  # type: ignore[operator]


def _as_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def evaluate(node: Any, entry: dict[str, Any]) -> bool:
    kind = node[0]
    if kind == "and":
        return evaluate(node[1], entry) and evaluate(node[2], entry)
    if kind == "or":
        return evaluate(node[1], entry) or evaluate(node[2], entry)
    if kind == "not":
        return not evaluate(node[1], entry)
    return _compare(entry, node[1], node[2], node[3])


def matches(filter_text: str, entry: dict[str, Any]) -> bool:
    return evaluate(parse(filter_text), entry)


def entry_from_stdout(line: dict[str, Any], resource_type: str = "cloud_run_revision") -> dict[str, Any]:
    """What Cloud Logging makes of one JSON line a Cloud Run function prints: `severity` becomes the
    entry's severity, every field (message included) goes to jsonPayload, the platform adds resource."""
    payload = {k: v for k, v in line.items() if k not in ("severity", "logging.googleapis.com/trace")}
    return {"severity": line.get("severity", "DEFAULT"), "jsonPayload": payload, "resource": {"type": resource_type}}
