"""The pinned providers' schemas in Terraform's own shape, from the cdktn-provider-* wheels.

The wheels (downloaded by scripts/bootstrap.sh into .venv-infra/schema-wheels) are generated from
the real providers' schemas (infra/schema/regenerate.py explains how they describe them); this
reads every resource, data source and the provider block of one wheel into the JSON shape of
`terraform providers schema -json` (block -> attributes / block_types, cty types), for the plugin
in server.py to serve. Stdlib only: it runs in the plugin's own venv.

What the wheels cannot say, and the choice made so a correct configuration is never refused:

* optional arguments are served optional + computed (the wheels do not mark which are computed);
  a reference to an unset one is then a mock value, not null;
* every repeated block is a list block (set blocks too), a block the provider allows once is a list
  block with max_items 1 (what SDKv2 serves), a required one has min_items 1;
* a computed attribute whose type the wheel gives only as IResolvable is dynamic;
* no attribute is marked sensitive;
* the few types whose wheel classes nest deeper than regenerate.py follows (recursive API
  messages) are left out and listed under "left_out"; infra/ uses none of them (Terraform would
  say the type does not exist).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
REGENERATE = ROOT / "infra" / "schema" / "regenerate.py"

Json = dict[str, Any]


def regenerate() -> ModuleType:
    """infra/schema/regenerate.py, the project's reader of the wheels' jsii assemblies."""
    spec = importlib.util.spec_from_file_location("safesend_schema_regenerate", REGENERATE)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {REGENERATE}")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)
    spec.loader.exec_module(module)
    return module


def cty_type(text: str) -> Any:
    """regenerate.py's type text ("list(map(string))", "any") -> cty JSON type."""
    if text == "any":
        return "dynamic"
    if text in ("string", "number", "bool"):
        return text
    for kind in ("list", "set", "map"):
        if text.startswith(kind + "(") and text.endswith(")"):
            return [kind, cty_type(text[len(kind) + 1 : -1])]
    raise ValueError(f"unknown type {text!r}")


def computed_type(spec: Json) -> Any:
    """Type of a computed attribute: a value type, or a nested object (list of it, or map)."""
    if "type" in spec:
        return cty_type(spec["type"])
    obj = ["object", {name: computed_type(inner) for name, inner in spec["attributes"].items()}]
    return ["map", obj] if spec["nesting"] == "map" else ["list", obj]


def block(described: Json) -> Json:
    """regenerate.describe() output -> a Terraform schema block."""
    attributes: Json = {}
    for name, spec in described["arguments"].items():
        flags = {"required": True} if spec["required"] else {"optional": True, "computed": True}
        attributes[name] = {"type": cty_type(spec["type"]), **flags}
    for name, spec in described["attributes"].items():
        attributes[name] = {"type": computed_type(spec), "computed": True}
    block_types: Json = {}
    for name, spec in described["blocks"].items():
        nested: Json = {"nesting_mode": "list", "block": block(spec)}
        if spec["required"]:
            nested["min_items"] = 1
        if spec["nesting"] == "single":
            nested["max_items"] = 1
        block_types[name] = nested
    return {"attributes": attributes, "block_types": block_types}


def provider_schema(wheel: Path) -> Json:
    """{"address", "version", "provider", "resource_schemas", "data_source_schemas"} of one wheel."""
    regen = regenerate()
    assembly, member = regen.load_assembly(wheel)
    types = assembly["types"]
    resources: Json = {}
    data_sources: Json = {}
    left_out: list[str] = []
    found: tuple[str, str] | None = None
    provider_fqn = None
    for fqn, cls in types.items():
        if cls["kind"] == "class" and cls.get("base") == "cdktn.TerraformProvider":
            provider_fqn = fqn
        if cls["kind"] != "class" or cls.get("base") not in ("cdktn.TerraformResource", "cdktn.TerraformDataSource"):
            continue
        link = regen.LINK.search(cls.get("docs", {}).get("summary", ""))
        if not link:
            continue
        namespace, name, version, section, _, tf_type = link.groups()
        if found is None:
            found = (f"{namespace}/{name}", version)
        elif found != (f"{namespace}/{name}", version):
            raise ValueError(f"{wheel.name}: links to {found} and {namespace}/{name} {version}")
        try:
            described = regen.describe(fqn + "Config", regen.getters(fqn, types, 0), types)
        except SystemExit:  # regenerate.py's "nesting deeper than 20 levels"
            left_out.append(tf_type)
            continue
        described["attributes"].setdefault("id", {"type": "string"})
        schema = {"version": 0, "block": block(described)}
        (resources if section == "resources" else data_sources)[tf_type] = schema
    if found is None or provider_fqn is None:
        raise ValueError(f"{wheel.name}: no provider or resource classes in {member}")
    described = regen.describe(provider_fqn + "Config", {}, types)
    described["arguments"].pop("alias", None)  # a meta-argument, not the provider's
    return {
        "address": f"registry.terraform.io/{found[0]}",
        "version": found[1],
        "wheel": wheel.name,
        "provider": {"version": 0, "block": block(described)},
        "resource_schemas": dict(sorted(resources.items())),
        "data_source_schemas": dict(sorted(data_sources.items())),
        "left_out": sorted(left_out),
    }
