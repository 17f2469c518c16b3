"""The safesend module evaluated for given variables, offline: which resource instances exist and
what their arguments are, as far as variables, locals and other resources' arguments decide.

Built on hcl_eval (Terraform's expression semantics for what infra/ uses). Computed attributes
(known only after apply) are UNKNOWN, except a few the provider derives from arguments alone
(DERIVED). Used by the policy and parity tests to check every combination of modes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import hcl_eval as H  # noqa: N812 - H reads like the HCL it evaluates
from .support import MODULE, Block, blocks, body_items, is_block, locals_of, resources, top_level

PROJECT_NUMBER = "123456789012"
# Stand-ins for what only Cloud SQL knows after creating the instance (its private IP from the private
# services access range, its per-instance server CA); the gcloud path reads the same from
# `gcloud sql instances describe` (the parity tests' stub answers with these).
SQL_PRIVATE_IP = "10.20.0.3"
SQL_SERVER_CA = "-----BEGIN CERTIFICATE-----\nMIIB...stand-in...\n-----END CERTIFICATE-----\n"
# The service agents google_project_service_identity answers with (Service Usage generateServiceIdentity).
SERVICE_AGENTS = {
    "pubsub.googleapis.com": f"service-{PROJECT_NUMBER}@gcp-sa-pubsub.iam.gserviceaccount.com",
    "iap.googleapis.com": f"service-{PROJECT_NUMBER}@gcp-sa-iap.iam.gserviceaccount.com",
}


def _email(args: dict, project: str) -> Any:
    account = args.get("account_id")
    return H.UNKNOWN if not H._known(account) else f"{account}@{project}.iam.gserviceaccount.com"


# Attributes the provider computes from arguments only (documented resource id formats).
DERIVED = {
    ("google_service_account", "email"): _email,
    ("google_service_account", "name"): lambda a, p: (
        H.UNKNOWN if _email(a, p) is H.UNKNOWN else f"projects/{p}/serviceAccounts/{_email(a, p)}"
    ),
    ("google_cloud_tasks_queue", "id"): lambda a, p: f"projects/{p}/locations/{a['location']}/queues/{a['name']}",
    ("google_pubsub_topic", "id"): lambda a, p: f"projects/{p}/topics/{a['name']}",
    ("google_project_service_identity", "member"): lambda a, p: (
        f"serviceAccount:{SERVICE_AGENTS[a['service']]}" if a.get("service") in SERVICE_AGENTS else H.UNKNOWN
    ),
    ("google_project_service_identity", "email"): lambda a, p: SERVICE_AGENTS.get(a.get("service"), H.UNKNOWN),
    ("google_compute_network", "id"): lambda a, p: f"projects/{p}/global/networks/{a['name']}",
    ("google_compute_subnetwork", "id"): lambda a, p: f"projects/{p}/regions/{a['region']}/subnetworks/{a['name']}",
    ("google_sql_database_instance", "connection_name"): lambda a, p: f"{p}:{a['region']}:{a['name']}",
    ("google_sql_database_instance", "private_ip_address"): lambda a, p: SQL_PRIVATE_IP,
    ("google_sql_database_instance", "server_ca_cert"): lambda a, p: [{"cert": SQL_SERVER_CA}],
}


class _Lazy(dict):
    """An instance's attributes, evaluated on first read: arguments from the body, nested blocks
    as lists of _Lazy, DERIVED attributes, anything else UNKNOWN."""

    def __init__(self, model: ModuleModel, tf_type: str, body: dict, scope: H.Scope, top: bool):
        super().__init__()
        self._model, self._type, self._body, self._scope, self._top = model, tf_type, body, scope, top

    def __contains__(self, name: object) -> bool:
        return True

    def __getitem__(self, name: str) -> Any:
        if dict.__contains__(self, name):
            return dict.__getitem__(self, name)
        value: Any
        raw = self._body.get(name)
        if is_block(raw):
            value = [_Lazy(self._model, self._type, b, self._scope, False) for b in raw]
        elif name in self._body and not name.startswith("__"):
            value = H.evaluate_value(raw, self._scope)
        elif any(name in entry for entry in self._body.get("dynamic", [])):
            value = self._dynamic(name)
        elif self._top and (self._type, name) in DERIVED:
            args = {k: self[k] for k, _ in body_items(self._body) if not is_block(self._body[k])}
            value = DERIVED[(self._type, name)](args, self._model.variables["project_id"])
        else:
            value = H.UNKNOWN
        dict.__setitem__(self, name, value)
        return value

    def get(self, name: str, default: Any = None) -> Any:
        return self[name]

    def _dynamic(self, label: str) -> Any:
        """A `dynamic "<label>"` block: one nested block per for_each element, <label>.key/.value bound."""
        out = []
        for entry in self._body.get("dynamic", []):
            if label not in entry:
                continue
            spec = entry[label]
            coll = H.evaluate_value(spec["for_each"], self._scope)
            if coll is H.UNKNOWN:
                return H.UNKNOWN
            pairs = sorted(coll.items()) if isinstance(coll, dict) else list(enumerate(coll))
            for key, value in pairs:
                scope = self._scope.child(**{label: {"key": key, "value": value}})
                for content in spec.get("content", []):
                    out.append(_Lazy(self._model, self._type, content, scope, False))
        return out


@dataclass
class Instance:
    block: Block
    key: Any  # None (single), int (count) or str (for_each)
    attrs: _Lazy

    def __getitem__(self, name: str) -> Any:
        return self.attrs[name]


class ModuleModel:
    def __init__(self, overrides: dict[str, Any] | None = None, module_dir: Path = MODULE):
        declared = top_level("variable", module_dir)
        self.variables: dict[str, Any] = {}
        for name, body in declared.items():
            if "default" in body:
                self.variables[name] = H.evaluate_value(body["default"], H.Scope())
        self.variables.update(
            {
                "project_id": "proj-1",
                "message_id_domain": "mail.example.com",
                "default_from": "Support <support@example.com>",
            }
        )
        self.variables.update(overrides or {})
        unknown = set(overrides or {}) - set(declared)
        if unknown:
            raise KeyError(f"not module variables: {sorted(unknown)}")
        for name, body in declared.items():  # optional() attributes get their defaults, as Terraform does
            if name in self.variables and isinstance(body.get("type"), str) and "optional(" in body["type"]:
                self.variables[name] = conform(H.parse(body["type"][2:-1]), self.variables[name])
        self.module_dir = module_dir
        self.blocks = {(b.type, b.name): b for b in resources(under=module_dir)}
        self.data = {(b.type, b.name): b for b in blocks("data", module_dir)}
        self.scope = H.Scope(
            variables=self.variables, locals=locals_of(module_dir), module_dir=module_dir, resolve=self._resolve
        )
        self._instances: dict[tuple[str, str], Any] = {}

    # ------------------------------------------------------------ instances
    def instances(self, tf_type: str, name: str) -> list[Instance]:
        block = self.blocks[(tf_type, name)]
        found = self._instance_value(block)
        if isinstance(found, list):
            return [Instance(block, i, v) for i, v in enumerate(found)]
        if isinstance(found, dict) and not isinstance(found, _Lazy):
            return [Instance(block, k, v) for k, v in found.items()]
        return [Instance(block, None, found)]

    def _instance_value(self, block: Block) -> Any:
        key = (block.type, block.name)
        if key not in self._instances:
            if "count" in block.body:
                n = H.evaluate_value(block.body["count"], self.scope)
                if n is H.UNKNOWN:
                    raise H.EvalError(f"{block.address}: count is unknown at plan time")
                self._instances[key] = [
                    _Lazy(self, block.type, block.body, self.scope.child(count={"index": i}), True)
                    for i in range(int(n))
                ]
            elif "for_each" in block.body:
                coll = H.evaluate_value(block.body["for_each"], self.scope)
                if coll is H.UNKNOWN or (isinstance(coll, list) and not H._known(*coll)):
                    raise H.EvalError(f"{block.address}: for_each keys are unknown at plan time")
                pairs = coll.items() if isinstance(coll, dict) else ((v, v) for v in coll)
                self._instances[key] = {
                    k: _Lazy(self, block.type, block.body, self.scope.child(each={"key": k, "value": v}), True)
                    for k, v in pairs
                }
            else:
                self._instances[key] = _Lazy(self, block.type, block.body, self.scope, True)
        return self._instances[key]

    def _resolve(self, root: str, accessors: list) -> Any:
        if root == "data":
            (_, tf_type), (_, name), *rest = accessors
            if (tf_type, name) == ("google_project", "this") and rest and rest[0] == ("attr", "number"):
                return _apply(PROJECT_NUMBER, rest[1:])
            return H.UNKNOWN
        name = accessors[0][1]
        block = self.blocks.get((root, name))
        if block is None:
            raise H.EvalError(f"{root}.{name} is not declared in {self.module_dir}")
        return _apply(self._instance_value(block), accessors[1:])

    # ------------------------------------------------------------ helpers
    def local(self, name: str) -> Any:
        return self.scope.local(name)

    def all_instances(self) -> list[Instance]:
        return [i for (t, n) in self.blocks for i in self.instances(t, n)]


def conform(type_node: H.Node, value: Any) -> Any:
    """A variable's value converted to its type constraint as far as defaults go: an object type's
    missing or null optional(T, default) attribute becomes the default (null without one), in
    nested map/list/set/object types too. Primitive types are taken as given."""
    if value is None or type_node.kind != "call":
        return value
    name, args = type_node.args
    if name == "object":
        (attributes,) = args
        out = dict(value)
        for key_node, attr_type in attributes.args:
            key = H.evaluate(key_node, H.Scope())
            if attr_type.kind == "call" and attr_type.args[0] == "optional":
                inner, *default = attr_type.args[1]
                if out.get(key) is None:
                    out[key] = conform(inner, H.evaluate(default[0], H.Scope())) if default else None
                else:
                    out[key] = conform(inner, out[key])
            elif key in out:
                out[key] = conform(attr_type, out[key])
        return out
    if name == "map":
        return {k: conform(args[0], v) for k, v in value.items()}
    if name in ("list", "set"):
        return [conform(args[0], v) for v in value]
    return value


def _apply(value: Any, accessors: list) -> Any:
    for pos, step in enumerate(accessors):
        if step[0] == "attr":
            value = H._attr(value, step[1])
        elif step[0] == "index":
            value = H._index(value, step[1])
        else:
            if value is H.UNKNOWN:
                return H.UNKNOWN
            items = (
                value
                if isinstance(value, list)
                else list(value.values())
                if isinstance(value, dict) and not isinstance(value, _Lazy)
                else [value]
            )
            return [_apply(item, accessors[pos + 1 :]) for item in items]
    return value
