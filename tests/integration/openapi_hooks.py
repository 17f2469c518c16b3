"""Schemathesis hooks and bookkeeping for tests/integration/test_openapi_contract.py.

Why a body hook for POST /send: the field rules are in openapi.yaml (channel is an enum of the
configured channels, addresses have a pattern, ...), so a schema-valid ("positive") body is
already mostly acceptable. What JSON Schema cannot say are the cross-field rules the server
enforces: at most 100 recipients in to+cc+bcc together, the composed key
`customer_id:event_type:order_id` at most 255 characters, text+html at most 400 000 bytes. And
Hypothesis draws tiny keys ("0", "00") over and over, so nearly every send after the first few
would be a payload_mismatch, while exact replays would be rare. So every positive /send body
becomes one of:

* the generated body, repaired to satisfy the cross-field rules, its key suffixed with a digest
  of the rest of the body (same body -> same key -> replay; other body -> other key -> fresh send);
* a realistic message (real-looking, Unicode names and addresses, Unicode text), same key scheme;
* one of a few fixed bodies, sent again and again: replays (200, `replayed: true`);
* a realistic message under one fixed key with varying payloads: 422 payload_mismatch.

For GET /status and POST /reconcile, a schema-valid request sometimes asks about a job that exists
(the fixed bodies' jobs) instead of a random id, so the 200 answers (with events, mailbox hits...)
are validated too.

Schema-invalid ("negative") requests are left exactly as generated, so the refusal paths keep
their share. The hooks are registered on the test's schema object only, never globally. The
coverage phase builds its boundary cases without these hooks (so it still sends e.g. 100 to +
100 cc, refused with 400, which the spec documents).
"""

from __future__ import annotations

import copy
import hashlib
import json
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import jsonschema_rs
import yaml
from hypothesis import strategies as st

SPEC_PATH = Path(__file__).resolve().parents[2] / "openapi.yaml"
ROUTES = frozenset({"/send", "/decide", "/reconcile", "/sweep", "/status", "/mailboxes", "/notify"})
CHANNELS = ("transactional", "notifications", "payments", "refunds")
MAX_RECIPIENTS = 100
MAX_KEY_CHARS = 255
MAX_BODY_BYTES = 400_000
KEY_FIELDS = ("customer_id", "event_type", "order_id")


def load_spec() -> dict[str, Any]:
    with SPEC_PATH.open(encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def validator(spec: dict[str, Any], component: str) -> jsonschema_rs.Draft202012Validator:
    return jsonschema_rs.Draft202012Validator(
        {"$ref": f"#/components/schemas/{component}", "components": spec["components"]}
    )


# ------------------------------------------------------------------------------ valid bodies
_NAMES = ["Ann", "Bob Builder", "Zoë Ärger", '"Doe, Jane"', "李雷", "O'Neil & Sons", "Ünïcødé ☃", ""]
_LOCALS = ["ann", "bob.builder", "o'neil", "x+tag", "UPPER.case", "a_b-c"]
_DOMAINS = ["example.com", "example.org", "mail.example.co.uk", "xn--bcher-kva.example"]


def _mailbox(name: str, local: str, domain: str) -> str:
    return f"{local}@{domain}" if not name else f"{name} <{local}@{domain}>"


_address = st.builds(_mailbox, st.sampled_from(_NAMES), st.sampled_from(_LOCALS), st.sampled_from(_DOMAINS))
_recipients = st.one_of(_address, st.lists(_address, min_size=1, max_size=4))
_optional_recipients = st.one_of(_address, st.lists(_address, max_size=3))
# No C0/C1 controls, no surrogates, no line/paragraph separators; not only white space.
_subject = st.text(st.characters(exclude_categories=("Cc", "Cs", "Zl", "Zp")), min_size=1, max_size=120).filter(
    lambda s: s.strip()
)
_body_text = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=300)
_key_part = st.one_of(st.from_regex(r"[A-Za-z0-9_.\-]{1,24}", fullmatch=True), st.integers(0, 10**12))


@st.composite
def realistic_message(draw: st.DrawFn) -> dict[str, Any]:
    body: dict[str, Any] = {
        "channel": draw(st.sampled_from(CHANNELS)),
        "to": draw(_recipients),
        "subject": draw(_subject),
        "text": draw(_body_text),
    }
    for name, strategy in (
        ("cc", _optional_recipients),
        ("bcc", _optional_recipients),
        ("reply_to", _optional_recipients),
        ("from", _address),
        ("html", _body_text.filter(lambda s: s.strip())),
    ):
        if draw(st.booleans()):
            body[name] = draw(strategy)
    return body


@st.composite
def realistic_send(draw: st.DrawFn) -> dict[str, Any]:
    body = draw(realistic_message())
    if draw(st.booleans()):
        body["dedup_key"] = "ct-" + draw(st.from_regex(r"[\x21-\x7e]{1,60}", fullmatch=True))
    else:
        body.update({name: draw(_key_part) for name in KEY_FIELDS})
    return key_per_payload(body)


def key_per_payload(body: dict[str, Any]) -> dict[str, Any]:
    """Suffix the key with a digest of the rest of the body.

    Hypothesis draws small keys ("0", "00"...) again and again; unchanged, nearly every send after
    the first few would be a payload_mismatch. With the digest, the same body is the same key (a
    replay) and a different body is a different key (a fresh send). Deterministic, like the run.
    """
    rest = {k: v for k, v in body.items() if k != "dedup_key" and k not in KEY_FIELDS}
    digest = hashlib.sha256(
        json.dumps(rest, sort_keys=True, ensure_ascii=False).encode("utf-8", "surrogatepass")
    ).hexdigest()[:12]
    body = dict(body)
    if "dedup_key" in body:
        body["dedup_key"] = f"{str(body['dedup_key'])[: MAX_KEY_CHARS - 13]}-{digest}"
    elif all(name in body for name in KEY_FIELDS):
        parts = [str(body[name]) for name in KEY_FIELDS]
        while len(":".join(parts)) + 13 > MAX_KEY_CHARS:
            longest = max(range(3), key=lambda i: len(parts[i]))
            parts[longest] = parts[longest][:-1]
        parts[2] = f"{parts[2]}-{digest}"
        body.update(zip(KEY_FIELDS, parts, strict=True))
    return body


# Sent many times each: the first is a fresh send, every later one a replay (200, replayed: true).
FIXED_BODIES = (
    {
        "customer_id": "contract-c1",
        "event_type": "order_paid",
        "order_id": 1001,
        "channel": "transactional",
        "to": ["Ann <ann@example.com>"],
        "subject": "Your receipt",
        "text": "Thanks!",
    },
    {
        "dedup_key": "contract-replay-2",
        "channel": "payments",
        "to": "bob@example.org",
        "cc": [],
        "subject": "Invoice ✓",
        "text": "",
        "html": "<p>Invoice</p>",
    },
)
MISMATCH_KEY = "contract-mismatch-1"  # the first payload wins; every different one gets 422


def _key_of(body: dict[str, Any]) -> str:
    from safesend.core.keys import compose_dedup_key  # functions/ is on pytest's pythonpath

    return body["dedup_key"] if "dedup_key" in body else compose_dedup_key(*(str(body[f]) for f in KEY_FIELDS))


def _job_id_of(key: str) -> str:
    from safesend.core.keys import job_id_for

    return job_id_for(key)


def known_lookups() -> list[dict[str, str]]:
    """/status queries for jobs that exist once the fixed bodies were sent (every lookup form)."""
    by_fields, by_key = FIXED_BODIES
    return [
        {"job_id": _job_id_of(_key_of(by_fields))},
        {
            "customer_id": str(by_fields["customer_id"]),
            "event_type": str(by_fields["event_type"]),
            "order_id": str(by_fields["order_id"]),
        },
        {"dedup_key": by_key["dedup_key"]},
        {"job_id": _job_id_of(MISMATCH_KEY)},
    ]


def repair(body: dict[str, Any]) -> dict[str, Any]:
    """Make a schema-valid body satisfy the cross-field rules that JSON Schema cannot state."""
    body = copy.deepcopy(body)
    budget = MAX_RECIPIENTS
    for name in ("to", "cc", "bcc"):
        value = body.get(name)
        if isinstance(value, list):
            value = value[: max(budget, 1 if name == "to" else 0)]
            body[name] = value
            budget -= len(value)
        elif isinstance(value, str):
            budget -= 1
    if all(name in body for name in KEY_FIELDS):
        parts = [str(body[name]) for name in KEY_FIELDS]
        while len(":".join(parts)) > MAX_KEY_CHARS:
            longest = max(range(3), key=lambda i: len(parts[i]))
            parts[longest] = parts[longest][:-1]
        for name, part in zip(KEY_FIELDS, parts, strict=True):
            if part != str(body[name]):
                body[name] = part
    for name in ("html", "text"):  # html first: text is required, html optional
        size = sum(len(str(body.get(n) or "").encode()) for n in ("text", "html"))
        if size > MAX_BODY_BYTES and isinstance(body.get(name), str):
            excess = size - MAX_BODY_BYTES
            encoded = body[name].encode()
            body[name] = encoded[: max(0, len(encoded) - excess)].decode("utf-8", "ignore")
    return body


class SendBodyHook:
    """flatmap_body for POST /send: see the module docstring."""

    def __init__(self, spec: dict[str, Any]):
        self._validator = validator(spec, "SendRequest")

    def _is_positive(self, body: Any) -> bool:
        # Negative bodies may be anything (bytes, lists, numbers...): only a dict can be valid.
        return isinstance(body, dict) and self._validator.is_valid(body)

    def __call__(self, context: Any, body: Any) -> st.SearchStrategy:
        operation = getattr(context, "operation", None)
        if operation is None or operation.path != "/send" or not self._is_positive(body):
            return st.just(body)
        repaired = key_per_payload(repair(body))
        return st.one_of(
            st.just(repaired),
            st.just(repaired),
            realistic_send(),
            realistic_send(),
            st.sampled_from(FIXED_BODIES).map(copy.deepcopy),
            realistic_message().map(lambda message: {**message, "dedup_key": MISMATCH_KEY}),
        )


class KnownJobHook:
    """flatmap_query for GET /status and flatmap_body for POST /reconcile: with a schema-valid
    request, sometimes ask about a job that exists (random ids are almost always unknown), so the
    200 answers and their schemas (events, mailbox hits ...) are exercised too."""

    def __init__(self, spec: dict[str, Any]):
        parameters = spec["paths"]["/status"]["get"]["parameters"]
        self._query = jsonschema_rs.Draft202012Validator(
            {
                "type": "object",
                "additionalProperties": False,
                "components": spec["components"],
                "properties": {p["name"]: p["schema"] for p in parameters},
            }
        )
        self._reconcile = validator(spec, "ReconcileRequest")

    def query(self, context: Any, query: Any) -> st.SearchStrategy:
        operation = getattr(context, "operation", None)
        if (
            operation is None
            or operation.path != "/status"
            or not isinstance(query, dict)
            or not self._query.is_valid(query)
        ):
            return st.just(query)
        return st.one_of(st.just(query), st.sampled_from(known_lookups()))

    def body(self, context: Any, body: Any) -> st.SearchStrategy:
        operation = getattr(context, "operation", None)
        if (
            operation is None
            or operation.path != "/reconcile"
            or not isinstance(body, dict)
            or not self._reconcile.is_valid(body)
        ):
            return st.just(body)
        job_ids = [lookup["job_id"] for lookup in known_lookups() if "job_id" in lookup]
        return st.one_of(st.just(body), st.sampled_from(job_ids).map(lambda job_id: {**body, "job_id": job_id}))


def install(schema: Any) -> None:
    """Register the hooks on this schema object only (not schemathesis' global dispatcher)."""
    spec = load_spec()
    send, known = SendBodyHook(spec), KnownJobHook(spec)

    def send_body(context: Any, body: Any) -> st.SearchStrategy:
        return send(context, body)

    def reconcile_body(context: Any, body: Any) -> st.SearchStrategy:
        return known.body(context, body)

    def status_query(context: Any, query: Any) -> st.SearchStrategy:
        return known.query(context, query)

    # Plain functions: schemathesis tags each hook with a filter set, which a bound method cannot take.
    schema.hook("flatmap_body")(send_body)
    schema.hook("flatmap_body")(reconcile_body)
    schema.hook("flatmap_query")(status_query)


# ------------------------------------------------------------------------------ bookkeeping
class Tally:
    """What the run exercised: (operation, phase, generation mode, status) -> count, and notable answers.

    Requests built by hand (edge and fault tests) have no schemathesis metadata: phase "-".
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: Counter[tuple[str, str, str, int]] = Counter()
        self.send_outcomes: Counter[tuple[bool, str]] = Counter()  # (generated by schemathesis, outcome)
        self.positive_rejections: Counter[str] = Counter()

    def record(self, case: Any, response: Any) -> None:
        meta = getattr(case, "meta", None)
        mode = meta.generation.mode.value if meta is not None else "-"
        phase = meta.phase.name.value if meta is not None else "-"
        status = response.status_code
        label = f"{case.method.upper()} {case.path}"
        try:
            payload = response.json()
        except Exception:  # noqa: BLE001 - not JSON; the content-type check reports it
            payload = None
        with self._lock:
            self.counts[(label, phase, mode, status)] += 1
            if case.path == "/send" and isinstance(payload, dict):
                if status in (200, 202, 422) and "state" in payload:
                    replay = " replayed" if payload.get("replayed") else ""
                    self.send_outcomes[(meta is not None, f"{status} {payload['state']}{replay}")] += 1
                elif status == 422:
                    self.send_outcomes[(meta is not None, f"422 {payload.get('error')}")] += 1
                if status == 400 and mode == "positive":
                    # A body the spec calls valid, refused by the server: a spec/code mismatch, or a
                    # cross-field rule the schema cannot express (the coverage phase bypasses the hooks).
                    for name, reason in (payload.get("fields") or {}).items():
                        self.positive_rejections[f"{name}: {reason[:80]}"] += 1

    @property
    def generated(self) -> bool:
        return any(phase != "-" for (_, phase, _, _) in self.counts)

    def statuses(self, label: str, generated_only: bool = True) -> Counter[int]:
        result: Counter[int] = Counter()
        for (op, phase, _, status), count in self.counts.items():
            if op == label and (phase != "-" or not generated_only):
                result[status] += count
        return result

    def outcomes(self, generated_only: bool = True) -> Counter[str]:
        result: Counter[str] = Counter()
        for (generated, outcome), count in self.send_outcomes.items():
            if generated or not generated_only:
                result[outcome] += count
        return result

    def report(self) -> str:
        lines = ["contract run: operation / phase / mode / status -> count"]
        lines += [
            f"  {op:16} {phase:9} {mode:9} {status}: {count}"
            for (op, phase, mode, status), count in sorted(self.counts.items())
        ]
        for title, generated_only in (("generated", True), ("all", False)):
            outcomes = self.outcomes(generated_only)
            lines.append(f"  /send outcomes ({title}): " + ", ".join(f"{k} x{v}" for k, v in sorted(outcomes.items())))
        if self.positive_rejections:
            lines.append(
                "  schema-valid /send bodies refused with 400: "
                + "; ".join(f"{k} x{v}" for k, v in self.positive_rejections.most_common())
            )
        return "\n".join(lines)
