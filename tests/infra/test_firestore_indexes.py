"""The composite index the sweeper's query needs, derived from the code, is exactly what infra declares:
in Terraform (google_firestore_index) and in infra/firestore.indexes.json (for gcloud / firebase)."""

from __future__ import annotations

import ast
import json

from .support import FUNCTIONS, INFRA, MODULE, resources, top_level

STORE = FUNCTIONS / "safesend" / "adapters" / "firestore_store.py"
EQUALITY = {"==", "in", "array-contains", "array-contains-any"}


def _store_class() -> ast.ClassDef:
    tree = ast.parse(STORE.read_text())
    return next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "FirestoreJobStore")


def _strings(call: ast.Call) -> list[str]:
    return [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]


def queries() -> list[dict]:
    """Each method of FirestoreJobStore that filters or orders: its filters and order_by fields."""
    found = []
    for method in _store_class().body:
        if not isinstance(method, ast.FunctionDef):
            continue
        filters, orders = [], []
        for node in ast.walk(method):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
            if name == "FieldFilter":
                field, op = _strings(node)[:2]
                filters.append((field, op))
            elif name == "order_by":
                direction = "DESCENDING" if any("DESC" in ast.unparse(k.value) for k in node.keywords) else "ASCENDING"
                orders.append((_strings(node)[0], direction))
            elif name == "where" and node.args and not node.keywords:
                raise AssertionError(f"{method.name}: positional where() is not understood by this test")
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
    defaults = dict(zip([a.arg for a in args.args][-len(args.defaults):], args.defaults))
    return ast.literal_eval(defaults["collection"])


def test_the_code_has_the_one_query_we_index():
    found = queries()
    assert [q["method"] for q in found] == ["find_due"]
    assert required_index(found[0]) == [("state", "ASCENDING"), ("next_check_at", "ASCENDING")]


def expected() -> list[list[tuple[str, str]]]:
    return [idx for idx in (required_index(q) for q in queries()) if idx]


def test_terraform_declares_exactly_the_needed_index_on_the_jobs_collection():
    declared = []
    for index in resources("google_firestore_index"):
        assert index.body["collection"] == "${var.jobs_collection}", index.address
        assert index.body["query_scope"] == "COLLECTION", index.address
        assert index.body["database"] == "(default)", index.address
        declared.append([(f["field_path"], f["order"]) for f in index.blocks("fields")])
    assert declared == expected()
    assert top_level("variable", MODULE)["jobs_collection"]["default"] == default_collection() == "ai_jobs"


def test_firestore_indexes_json_declares_the_same_index():
    data = json.loads((INFRA / "firestore.indexes.json").read_text())
    assert set(data) <= {"indexes", "fieldOverrides"}
    declared = []
    for index in data["indexes"]:
        assert index["collectionGroup"] == default_collection()
        assert index["queryScope"] == "COLLECTION"
        declared.append([(f["fieldPath"], f["order"]) for f in index["fields"]])
    assert declared == expected()
    assert data.get("fieldOverrides", []) == []


def test_no_ttl_policy_because_the_code_sets_no_expiry_field():
    # A TTL policy would need a timestamp field meant as an expiry; Job has none (see infra/README.md).
    model = (FUNCTIONS / "safesend" / "model.py").read_text()
    assert "expire" not in model.lower() and "ttl" not in model.lower()
    assert not resources("google_firestore_field")
