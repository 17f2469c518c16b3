"""The composite index the sweeper's query needs, derived from the code, is exactly what infra declares:
in Terraform (google_firestore_index) and in infra/firestore.indexes.json (for gcloud / firebase); both
deploy paths put it on the collection the functions are configured with; and the gcloud pipeline
creates a missing index, waits for one being built and fails on any error (its step is run
against a stub gcloud)."""

from __future__ import annotations

import ast
import json

import pytest

from .cloudbuild_sim import Sim
from .support import FUNCTIONS, INFRA, MODULE, ROOT, resources, top_level
from .tfmodel import ModuleModel

pytestmark = pytest.mark.functions_out_of_process  # tests/coverage_pause.py

STORE = FUNCTIONS / "safesend" / "adapters" / "firestore_store.py"
# Firestore's REST operators (StructuredQuery.FieldFilter.Operator) that are equality for indexing.
EQUALITY = {"EQUAL", "IN", "ARRAY_CONTAINS", "ARRAY_CONTAINS_ANY"}


def _store_class() -> ast.ClassDef:
    tree = ast.parse(STORE.read_text())
    return next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "FirestoreJobStore")


def _strings(call: ast.Call) -> list[str]:
    return [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]


def _query_direction() -> str:
    """The one direction FirestoreJobStore._query orders by (its orderBy entry, read from the code)."""
    query = next(n for n in _store_class().body if isinstance(n, ast.FunctionDef) and n.name == "_query")
    directions = {
        value.value
        for node in ast.walk(query)
        if isinstance(node, ast.Dict)
        for key, value in zip(node.keys, node.values, strict=True)
        if isinstance(key, ast.Constant) and key.value == "direction" and isinstance(value, ast.Constant)
    }
    assert len(directions) == 1, f"_query: expected one constant orderBy direction, found {directions}"
    return str(directions.pop())


def queries() -> list[dict]:
    """Each method of FirestoreJobStore that queries: its filters (`_field(path, OP, value)`) and the
    field it orders by (`self._query(where, order_by, limit)`)."""
    direction = _query_direction()
    found = []
    for method in _store_class().body:
        if not isinstance(method, ast.FunctionDef) or method.name == "_query":
            continue
        filters, orders = [], []
        for node in ast.walk(method):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
            if name == "_field":
                field, op = _strings(node)[:2]
                filters.append((field, op))
            elif name == "_query":
                (order_by,) = _strings(node)
                orders.append((order_by, direction))
        if filters or orders:
            found.append({"method": method.name, "filters": filters, "orders": orders})
    return found


def required_index(query: dict) -> list[tuple[str, str]] | None:
    """Firestore's rule: equality fields, then the range/order field(s); None if single-field indexes do."""
    equality = [f for f, op in query["filters"] if op in EQUALITY]
    ranges = [f for f, op in query["filters"] if op not in EQUALITY]
    assert len(set(ranges)) <= 1, f"{query['method']}: range filters on several fields are not supported"
    order_fields = [f for f, _ in query["orders"]]
    if ranges and order_fields:
        assert order_fields[0] == ranges[0], f"{query['method']}: the first order_by must be the range field"
    fields = [(f, "ASCENDING") for f in dict.fromkeys(equality)]
    orders = query["orders"] or ([(ranges[0], "ASCENDING")] if ranges else [])
    fields += [(field, direction) for field, direction in orders if field not in dict(fields)]
    if len(fields) < 2:
        return None
    return fields


def default_collection() -> str:
    init = next(n for n in _store_class().body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    args = init.args
    defaults = dict(zip([a.arg for a in args.args][-len(args.defaults) :], args.defaults, strict=False))
    return ast.literal_eval(defaults["collection"])


def test_the_code_needs_the_composite_indexes_we_declare_and_find_due_is_one():
    found = queries()
    composite = {q["method"]: required_index(q) for q in found if required_index(q)}
    assert composite["find_due"] == [("state", "ASCENDING"), ("next_check_at", "ASCENDING")]
    assert sorted(composite.values()) == sorted(expected())


def expected() -> list[list[tuple[str, str]]]:
    return [idx for idx in (required_index(q) for q in queries()) if idx]


def test_terraform_declares_exactly_the_needed_indexes_on_the_jobs_collection():
    [block] = resources("google_firestore_index")
    assert block.body["collection"] == "${var.jobs_collection}", block.address
    assert block.body["database"] == "(default)", block.address
    model = ModuleModel()
    declared = []
    for index in model.instances("google_firestore_index", block.name):
        assert index["query_scope"] == "COLLECTION" and index["collection"] == "ai_jobs"
        declared.append([(f["field_path"], f["order"]) for f in index["fields"]])
    assert sorted(declared) == sorted(expected())
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("env_spec_for_index", INFRA / "env_spec.py")
    env_spec = importlib.util.module_from_spec(spec)
    sys.modules["env_spec_for_index"] = env_spec
    spec.loader.exec_module(env_spec)
    assert (
        top_level("variable", MODULE)["jobs_collection"]["default"]
        == default_collection()
        == env_spec.DEFAULT_JOBS_COLLECTION
        == "ai_jobs"
    )


def test_terraform_indexes_the_collection_the_functions_use():
    model = ModuleModel({"jobs_collection": "mail_jobs"})
    indexes = model.instances("google_firestore_index", "jobs")
    assert indexes
    for index in indexes:
        assert index["collection"] == "mail_jobs"
        for fn, env in model.local("function_env").items():
            assert env["SAFESEND_JOBS_COLLECTION"] == index["collection"], fn


def test_index_file_values_are_ones_firestore_accepts():
    snapshot = json.loads((INFRA / "schema" / "google-provider-snapshot.json").read_text())
    schema = snapshot["resources"]["google_firestore_index"]
    for index in json.loads((INFRA / "firestore.indexes.json").read_text())["indexes"]:
        assert index["queryScope"] in schema["arguments"]["query_scope"]["enum"]
        for field in index["fields"]:
            assert field["order"] in schema["blocks"]["fields"]["arguments"]["order"]["enum"]


def test_firestore_indexes_json_declares_the_same_index():
    data = json.loads((INFRA / "firestore.indexes.json").read_text())
    assert set(data) <= {"indexes", "fieldOverrides"}
    declared = []
    for index in data["indexes"]:
        assert index["collectionGroup"] == default_collection()
        assert index["queryScope"] == "COLLECTION"
        declared.append([(f["fieldPath"], f["order"]) for f in index["fields"]])
    assert sorted(declared) == sorted(expected())
    assert data.get("fieldOverrides", []) == []


def test_no_ttl_policy_because_the_code_sets_no_expiry_field():
    # A TTL policy would need a timestamp field meant as an expiry; Job has none (see infra/README.md).
    model = (FUNCTIONS / "safesend" / "core" / "model.py").read_text()
    assert "expire" not in model.lower() and "ttl" not in model.lower()
    assert not resources("google_firestore_field")


def run_index_step(tmp_path, listing: str, extra: list | None = None, collection: str = "mail_jobs"):
    sim = Sim.create("cloudbuild-gcloud.yaml", tmp_path, {"_JOBS_COLLECTION": collection, "_SOURCE_BUCKET": "b"})
    (sim.workdir / "deploy-config").mkdir()
    (sim.workdir / "functions-source.sha256").write_text("abc functions-source.zip\n")
    sim.answers = [*(extra or []), (r"storage objects describe", "", 0), (r"indexes composite list", listing, 0)]
    return sim, sim.run("upload-and-index")


def index_json(collection: str, state: str) -> str:
    return json.dumps(
        [
            {
                "name": f"projects/p/databases/(default)/collectionGroups/{collection}/indexes/IDX",
                "queryScope": "COLLECTION",
                "state": state,
                "fields": [
                    {"fieldPath": "state", "order": "ASCENDING"},
                    {"fieldPath": "next_check_at", "order": "ASCENDING"},
                    {"fieldPath": "__name__", "order": "ASCENDING"},
                ],
            }
        ]
    )


def creates(sim: Sim) -> list[list[str]]:
    return [c for c in sim.calls() if c[1:5] == ["firestore", "indexes", "composite", "create"]]


def test_gcloud_creates_the_index_on_the_configured_collection_and_waits_for_it(tmp_path):
    sim, proc = run_index_step(tmp_path, "[]")
    assert proc.returncode == 0, proc.stderr
    calls = creates(sim)
    assert len(calls) == len(expected())
    for call in calls:
        assert "--collection-group=mail_jobs" in call and "--async" not in call
    assert [
        "--field-config=field-path=state,order=ascending",
        "--field-config=field-path=next_check_at,order=ascending",
    ] in [c[-2:] for c in calls]


def test_gcloud_leaves_a_ready_index_alone(tmp_path):
    sim, proc = run_index_step(tmp_path, index_json("mail_jobs", "READY"))
    assert proc.returncode == 0 and len(creates(sim)) == len(expected()) - 1
    assert all("field-path=next_check_at,order=ascending" not in " ".join(c) for c in creates(sim))


def test_an_index_on_another_collection_does_not_count(tmp_path):
    sim, proc = run_index_step(tmp_path, index_json("ai_jobs", "READY"))
    assert proc.returncode == 0 and len(creates(sim)) == len(expected())


def test_gcloud_waits_for_an_index_being_built(tmp_path):
    sim, proc = run_index_step(
        tmp_path, index_json("mail_jobs", "CREATING"), [(r"indexes composite describe", "READY\n", 0)]
    )
    assert proc.returncode == 0 and len(creates(sim)) == len(expected()) - 1
    assert any(c[1:5] == ["firestore", "indexes", "composite", "describe"] for c in sim.calls())


@pytest.mark.parametrize("case", ["create-fails", "needs-repair", "list-fails"])
def test_gcloud_index_errors_fail_the_build(tmp_path, case):
    listing, extra = "[]", []
    if case == "create-fails":
        extra = [(r"indexes composite create", "PERMISSION_DENIED", 1)]
    elif case == "needs-repair":
        listing = index_json("mail_jobs", "NEEDS_REPAIR")
    else:
        extra = [(r"indexes composite list", "", 1)]
    _, proc = run_index_step(tmp_path, listing, extra)
    assert proc.returncode != 0


def test_no_error_is_hidden_in_the_gcloud_pipeline():
    text = (ROOT / "cloudbuild-gcloud.yaml").read_text()
    assert "|| true" not in text and "--async" not in text
