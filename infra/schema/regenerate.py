#!/usr/bin/env python3
"""Rebuild the provider schema snapshots that tests/infra/test_provider_schema.py checks infra/ against.

`terraform validate` needs the provider binaries, which cannot be downloaded where CI runs. The
CDK Terrain prebuilt provider wheels on PyPI (cdktn-provider-google, -google-beta, -archive,
-time) are generated from those providers' schemas, and each ships its jsii assembly,
`<pkg>/_jsii/provider-<name>@<version>.jsii.tgz`, whose `package/.jsii` is JSON describing every
resource and data source:

* a class per resource/data source whose docs summary links the registry page and names the
  Terraform type: "Represents a {@link
  https://registry.terraform.io/providers/hashicorp/google/8.7.0/docs/resources/pubsub_topic google_pubsub_topic}."
  Its getters are everything a reference may read: the arguments and the computed attributes
  (`createTime`, `serviceConfig` -> an OutputReference class with its own getters, ...).
* an interface `<Class>Config` whose properties are the arguments, with their types; each
  property's docs link `...#<terraform_name> ...` gives the exact Terraform name, a property not
  marked optional is required, a property typed as another struct is a nested block (an array
  of it: a list block; the struct itself: a single block), recursively. Docs of the form
  `Possible values: ["A", "B"]` are the provider's enum validation.

Enums the provider leaves to the API (it accepts any string and the API refuses it at apply)
are taken from Google's API discovery documents that google-api-python-client ships
(googleapiclient/discovery_cache/documents, the version pinned in requirements.txt), for the
arguments listed in DISCOVERY_ENUMS.

Only the types infra/**/*.tf uses are kept, so the snapshots stay small and reviewable.

    python3 infra/schema/regenerate.py            # download the pinned wheels (pip), rewrite the snapshots
    python3 infra/schema/regenerate.py --check    # exit 1 if the committed snapshots are stale
    python3 infra/schema/regenerate.py --wheel-dir DIR   # use wheels already in DIR (no download)
    python3 infra/schema/regenerate.py --cache-dir DIR   # keep each snapshot made, keyed by its inputs

Reading google's assembly takes ~7 CPU-s, and the gate checks the same inputs up to three times
(its suite, and the mutation suite's unmutated copy and snapshot edit): with --cache-dir a snapshot
is made once per digest of everything it is made from (this script, the wheel, the types infra/
uses, the discovery documents), and a change to any of them makes it anew.

Run it with the repository's .venv python (it reads googleapiclient from there). After bumping a
wheel below, pin the same provider version (printed, and recorded in the snapshot as
provider.version) in infra/modules/safesend/versions.tf; tests/infra checks that they agree.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

INFRA = Path(__file__).resolve().parents[1]
SCHEMA_DIR = INFRA / "schema"

# (PyPI wheel pin, provider local name, snapshot file). The wheel's registry links name the
# provider version it was generated from; the snapshot records it.
WHEELS = [
    ("cdktn-provider-google==21.1.0", "google", "google-provider-snapshot.json"),
    ("cdktn-provider-google-beta==21.1.0", "google-beta", "google-beta-provider-snapshot.json"),
    ("cdktn-provider-archive==14.0.1", "archive", "archive-provider-snapshot.json"),
    ("cdktn-provider-time==14.0.2", "time", "time-provider-snapshot.json"),
]

# (Terraform type, argument path) -> (discovery document, schema, property path): enums the
# provider does not validate itself.
DISCOVERY_ENUMS = {
    ("google_artifact_registry_repository", "format"): ("artifactregistry.v1", "Repository", "format"),
    ("google_cloud_scheduler_job", "http_target.http_method"): ("cloudscheduler.v1", "HttpTarget", "httpMethod"),
    ("google_compute_global_address", "purpose"): ("compute.v1", "Address", "purpose"),
    ("google_sql_database_instance", "database_version"): ("sqladmin.v1", "DatabaseInstance", "databaseVersion"),
    ("google_sql_database_instance", "settings.edition"): ("sqladmin.v1", "Settings", "edition"),
    ("google_sql_database_instance", "settings.availability_type"): ("sqladmin.v1", "Settings", "availabilityType"),
    ("google_sql_database_instance", "settings.disk_type"): ("sqladmin.v1", "Settings", "dataDiskType"),
    ("google_sql_database_instance", "settings.ip_configuration.ssl_mode"): (
        "sqladmin.v1",
        "IpConfiguration",
        "sslMode",
    ),
    ("google_sql_database_instance", "settings.ip_configuration.server_ca_mode"): (
        "sqladmin.v1",
        "IpConfiguration",
        "serverCaMode",
    ),
    ("google_sql_database_instance", "settings.backup_configuration.backup_retention_settings.retention_unit"): (
        "sqladmin.v1",
        "BackupRetentionSettings",
        "retentionUnit",
    ),
    ("google_sql_database_instance", "settings.maintenance_window.update_track"): (
        "sqladmin.v1",
        "MaintenanceWindow",
        "updateTrack",
    ),
    ("google_sql_user", "type"): ("sqladmin.v1", "User", "type"),
}

LINK = re.compile(
    r"\{@link https://registry\.terraform\.io/providers/([\w-]+)/([\w-]+)/([\w.\-]+)/docs/"
    r"(resources|data-sources)/(\w+) (\w+)\}"
)
ANCHOR = re.compile(r"\{@link https://registry\.terraform\.io/providers/[^ #]+#(\w+) ")
POSSIBLE = re.compile(r"Possible values: \[([^\]]*)\]")
SKIP_GETTERS = {"tfResourceType", "internalValue", "fqn", "terraformResourceType", "terraformGeneratorMetadata"}


# ------------------------------------------------------------------ which types infra/ uses
def _blocks_of(text: str):
    """(kind, type, body text) of every top-level resource/data block, strings and comments skipped."""
    head = re.compile(r'^\s*(resource|data)\s+"([\w-]+)"\s+"[\w-]+"\s*\{', re.M)
    for match in head.finditer(text):
        depth, i, n = 1, match.end(), len(text)
        while i < n and depth:
            ch = text[i]
            if ch == '"':
                i += 1
                while i < n and text[i] != '"':
                    i += 2 if text[i] == "\\" else 1
            elif ch == "#" or text.startswith("//", i):
                while i < n and text[i] != "\n":
                    i += 1
            elif ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            i += 1
        yield match.group(1), match.group(2), text[match.end() : i]


def used_types() -> dict[str, dict[str, set[str]]]:
    """{provider: {"resource": {...}, "data": {...}}} as declared in infra/**/*.tf; a block with
    `provider = google-beta` belongs to google-beta, others to their type's prefix."""
    found: dict[str, dict[str, set[str]]] = {name: {"resource": set(), "data": set()} for _, name, _ in WHEELS}
    for path in sorted(INFRA.rglob("*.tf")):
        if ".terraform" in path.parts:
            continue
        for kind, tf_type, body in _blocks_of(path.read_text(encoding="utf-8")):
            override = re.search(r"^\s*provider\s*=\s*([\w-]+)", body, re.M)
            provider = override.group(1) if override else tf_type.split("_", 1)[0]
            found.setdefault(provider, {"resource": set(), "data": set()})[kind].add(tf_type)
    return found


# ------------------------------------------------------------------ jsii -> schema
def snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


def load_assembly(wheel: Path) -> tuple[dict, str]:
    with zipfile.ZipFile(wheel) as zf:
        members = [n for n in zf.namelist() if re.search(r"/_jsii/[^/]+\.jsii\.tgz$", n)]
        if len(members) != 1:
            raise SystemExit(f"{wheel.name}: expected one _jsii/*.jsii.tgz, found {members}")
        with tarfile.open(fileobj=io.BytesIO(zf.read(members[0])), mode="r:gz") as tf:
            handle = tf.extractfile("package/.jsii")
            if handle is None:
                raise SystemExit(f"{wheel.name}: {members[0]} has no package/.jsii")
            return json.load(handle), f"{members[0]}:package/.jsii"


def _is_struct(fqn: str, types: dict) -> bool:
    target = types.get(fqn)
    return bool(target and target["kind"] == "interface" and target.get("datatype"))


def struct_ref(type_ref: dict, types: dict) -> tuple[str, str] | None:
    """(struct fqn, "list" | "single") when a property is a nested block, else None."""
    if "fqn" in type_ref:
        return (type_ref["fqn"], "single") if _is_struct(type_ref["fqn"], types) else None
    if "collection" in type_ref:
        inner = struct_ref(type_ref["collection"]["elementtype"], types)
        return (inner[0], "list") if inner else None
    if "union" in type_ref:
        for member in type_ref["union"]["types"]:
            ref = struct_ref(member, types)
            if ref:
                return ref
    return None


MAP_CLASSES = {
    "cdktn.StringMap": "map(string)",
    "cdktn.NumberMap": "map(number)",
    "cdktn.BooleanMap": "map(bool)",
    "cdktn.AnyMap": "map(any)",
    "cdktn.StringMapList": "list(map(string))",
    "cdktn.NumberMapList": "list(map(number))",
    "cdktn.BooleanMapList": "list(map(bool))",
    "cdktn.AnyMapList": "list(map(any))",
}


def value_type(type_ref: dict) -> str:
    """Terraform type of a primitive-ish jsii type ("any" when only IResolvable says it)."""
    if "primitive" in type_ref:
        return {
            "string": "string",
            "number": "number",
            "boolean": "bool",
            "any": "any",
            "date": "string",
            "json": "any",
        }[type_ref["primitive"]]
    if "collection" in type_ref:
        inner = value_type(type_ref["collection"]["elementtype"])
        return f"{'list' if type_ref['collection']['kind'] == 'array' else 'map'}({inner})"
    if "union" in type_ref:
        kinds = [value_type(t) for t in type_ref["union"]["types"] if t.get("fqn") != "cdktn.IResolvable"]
        return kinds[0] if kinds else "any"
    return MAP_CLASSES.get(type_ref.get("fqn", ""), "any")


def enum_of(docs: dict) -> list[str] | None:
    match = POSSIBLE.search(docs.get("summary", "") + "\n" + docs.get("remarks", ""))
    if not match:
        return None
    return [v.strip().strip('"') for v in match.group(1).split(",") if v.strip()]


def getters(class_fqn: str, types: dict, depth: int) -> dict[str, dict]:
    """Readable attributes of a resource / OutputReference class: {name: {"type": ...} or nested}."""
    if depth > 20:
        raise SystemExit(f"{class_fqn}: nesting deeper than 20 levels")
    out: dict[str, dict] = {}
    cls = types.get(class_fqn)
    if not cls:
        return out
    for prop in cls.get("properties", []):
        name = prop["name"]
        if name in SKIP_GETTERS or name.endswith("Input") or prop.get("static"):
            continue
        tf_name = snake(name)
        ref = prop["type"].get("fqn", "")
        target = types.get(ref)
        if target and target["kind"] == "class" and ref.endswith("OutputReference"):
            out[tf_name] = {"object": getters(ref, types, depth + 1), "nesting": "single"}
        elif target and target["kind"] == "class" and any(m["name"] == "get" for m in target.get("methods", [])):
            get = next(m for m in target["methods"] if m["name"] == "get")
            element = get.get("returns", {}).get("type", {}).get("fqn", "")
            if element.endswith("OutputReference"):
                nesting = "map" if ref.endswith("Map") else "list"
                out[tf_name] = {"object": getters(element, types, depth + 1), "nesting": nesting}
            else:
                out[tf_name] = {"type": MAP_CLASSES.get(ref, "any")}
        else:
            out[tf_name] = {"type": value_type(prop["type"])}
    return out


def describe(fqn: str, readable: dict[str, dict], types: dict, depth: int = 0) -> dict:
    """Schema of a Config interface or block struct:
    {"arguments": {name: {"type", "required"[, "enum"]}}, "attributes": {name: type or nested},
     "blocks": {name: {"nesting", ...same...}}}. `readable` are the getters of the matching class."""
    if depth > 20:
        raise SystemExit(f"{fqn}: nesting deeper than 20 levels")
    arguments: dict[str, dict] = {}
    blocks: dict[str, dict] = {}
    for prop in types[fqn].get("properties", []):
        docs = prop.get("docs", {})
        anchor = ANCHOR.search(docs.get("remarks", "") + "\n" + docs.get("summary", ""))
        name = anchor.group(1) if anchor else snake(prop["name"])
        if depth == 0 and name == "id":
            continue  # added to every cdktn Config by the SDKv2 convention; not an argument to set
        ref = struct_ref(prop["type"], types)
        if ref:
            nested = readable.get(name, {}).get("object", {})
            blocks[name] = {
                "nesting": ref[1],
                "required": not prop.get("optional"),
                **describe(ref[0], nested, types, depth + 1),
            }
        else:
            spec = {"type": value_type(prop["type"]), "required": not prop.get("optional")}
            values = enum_of(docs)
            if values:
                spec["enum"] = values
                spec["enum_source"] = "provider"
            arguments[name] = spec
    attributes = {
        name: (
            value if "object" not in value else {"nesting": value["nesting"], "attributes": _flatten(value["object"])}
        )
        for name, value in readable.items()
        if name not in arguments and name not in blocks
    }
    return {
        "arguments": dict(sorted(arguments.items())),
        "attributes": dict(sorted(attributes.items())),
        "blocks": dict(sorted(blocks.items())),
    }


def _flatten(obj: dict) -> dict:
    return {
        k: (v if "object" not in v else {"nesting": v["nesting"], "attributes": _flatten(v["object"])})
        for k, v in sorted(obj.items())
    }


# ------------------------------------------------------------------ discovery enums
def discovery_documents() -> Path:
    spec = importlib.util.find_spec("googleapiclient")
    if spec is None or not spec.origin:
        raise SystemExit("googleapiclient is not importable: run with the repository's .venv python")
    return Path(spec.origin).parent / "discovery_cache" / "documents"


def apply_discovery_enums(tf_type: str, schema: dict, used: dict[str, dict]) -> None:
    for (enum_type, path), (doc, schema_name, prop_path) in DISCOVERY_ENUMS.items():
        if enum_type != tf_type:
            continue
        data = json.loads((discovery_documents() / f"{doc}.json").read_text(encoding="utf-8"))
        node = data["schemas"][schema_name]["properties"][prop_path]
        values = node.get("enum")
        if not values:
            raise SystemExit(f"{doc} {schema_name}.{prop_path} has no enum")
        target = schema
        *blocks, argument = path.split(".")
        for block in blocks:
            target = target["blocks"][block]
        spec = target["arguments"][argument]
        if "enum" in spec:
            raise SystemExit(f"{tf_type}.{path}: the provider has an enum now; drop it from DISCOVERY_ENUMS")
        spec["enum"] = values
        spec["enum_source"] = f"discovery {doc} (revision {data.get('revision')}) {schema_name}.{prop_path}"
        used[doc] = {"revision": data.get("revision")}


def snapshot(wheel: Path, provider_name: str, wanted: dict[str, set[str]]) -> dict:
    assembly, member = load_assembly(wheel)
    types = assembly["types"]
    found: dict[str, dict[str, dict]] = {"resource": {}, "data": {}}
    provider = None
    discovery_used: dict[str, dict] = {}
    for fqn, cls in types.items():
        if cls["kind"] != "class" or cls.get("base") not in ("cdktn.TerraformResource", "cdktn.TerraformDataSource"):
            continue
        link = LINK.search(cls.get("docs", {}).get("summary", ""))
        if not link:
            continue
        namespace, name, version, section, _, tf_type = link.groups()
        provider = provider or {"source": f"{namespace}/{name}", "version": version}
        if (provider["source"], provider["version"]) != (f"{namespace}/{name}", version):
            raise SystemExit(f"{wheel.name}: links to two providers ({provider} and {namespace}/{name} {version})")
        kind = "resource" if section == "resources" else "data"
        if tf_type in wanted[kind]:
            config = fqn + "Config"
            if config not in types:
                raise SystemExit(f"{wheel.name}: {fqn} has no {config}")
            schema = describe(config, getters(fqn, types, 0), types)
            schema["attributes"].setdefault("id", {"type": "string"})
            apply_discovery_enums(tf_type, schema, discovery_used)
            found[kind][tf_type] = schema
    if provider is None:
        raise SystemExit(f"{wheel.name}: no resource classes found in {member}")
    if provider["source"].split("/")[1] != provider_name:
        raise SystemExit(f"{wheel.name}: is {provider['source']}, expected {provider_name}")
    missing = sorted(f"{k} {t}" for k in wanted for t in wanted[k] if t not in found[k])
    package_version = wheel.name.split("-")[1]
    return {
        "generated_by": "infra/schema/regenerate.py (do not edit by hand)",
        "source": {
            "wheel": wheel.name,
            "assembly": member,
            "package_version": package_version,
            "discovery_documents": dict(sorted(discovery_used.items())),
        },
        "provider": provider,
        # Types infra/ uses that this provider version does not have (the test fails on them).
        "unknown_types": missing,
        "resources": dict(sorted(found["resource"].items())),
        "data_sources": dict(sorted(found["data"].items())),
    }


def cached_snapshot(wheel: Path, provider_name: str, wanted: dict[str, set[str]], cache: Path | None) -> dict:
    """snapshot(), kept in `cache` (when given) under a digest of everything snapshot() reads."""
    if cache is None:
        return snapshot(wheel, provider_name, wanted)
    digest = hashlib.sha256(Path(__file__).read_bytes())
    digest.update(f"\0{wheel.name}\0{provider_name}\0".encode())
    digest.update(json.dumps({kind: sorted(types) for kind, types in wanted.items()}, sort_keys=True).encode())
    with wheel.open("rb") as wheel_file:
        digest.update(hashlib.file_digest(wheel_file, "sha256").digest())
    for doc in sorted({doc for doc, _, _ in DISCOVERY_ENUMS.values()}):
        digest.update(doc.encode() + (discovery_documents() / f"{doc}.json").read_bytes())
    path = cache / f"{provider_name}-{digest.hexdigest()}.json"
    if path.exists():
        return dict(json.loads(path.read_text(encoding="utf-8")))
    data = snapshot(wheel, provider_name, wanted)
    cache.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.tmp")  # written whole, then renamed: a parallel reader never sees half
    partial.write_text(json.dumps(data), encoding="utf-8")
    partial.replace(path)
    return data


def download(requirement: str, into: Path) -> Path:
    subprocess.run(  # noqa: S603 - fixed argv, pinned requirement
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--only-binary=:all:",
            "--disable-pip-version-check",
            "-d",
            str(into),
            requirement,
        ],
        check=True,
    )
    return find_wheel(requirement, into)


def find_wheel(requirement: str, directory: Path) -> Path:
    name, version = requirement.split("==")
    wheels = sorted(directory.glob(f"{name.replace('-', '_')}-{version}-*.whl"))
    if not wheels:
        raise SystemExit(f"no wheel for {requirement} in {directory}")
    return wheels[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed snapshots, write nothing")
    parser.add_argument("--wheel-dir", type=Path, help="directory that already holds the pinned wheels")
    parser.add_argument("--cache-dir", type=Path, help="directory that keeps the snapshots made, keyed by their inputs")
    args = parser.parse_args()
    wanted = used_types()
    unknown_providers = sorted(
        p for p in wanted if p not in {name for _, name, _ in WHEELS} and (wanted[p]["resource"] or wanted[p]["data"])
    )
    if unknown_providers:
        raise SystemExit(f"infra/ uses providers without a pinned wheel: {unknown_providers}")
    stale = []
    expected_files = set()
    with tempfile.TemporaryDirectory(prefix="safesend-schema-") as tmp:
        for requirement, provider_name, filename in WHEELS:
            if not (wanted[provider_name]["resource"] or wanted[provider_name]["data"]):
                continue
            expected_files.add(filename)
            wheel = find_wheel(requirement, args.wheel_dir) if args.wheel_dir else download(requirement, Path(tmp))
            data = cached_snapshot(wheel, provider_name, wanted[provider_name], args.cache_dir)
            text = json.dumps(data, indent=1, sort_keys=False) + "\n"
            target = SCHEMA_DIR / filename
            print(
                f"{filename}: {data['provider']['source']} {data['provider']['version']} "
                f"({len(data['resources'])} resources, {len(data['data_sources'])} data sources"
                f"{', UNKNOWN: ' + ', '.join(data['unknown_types']) if data['unknown_types'] else ''})"
            )
            if args.check:
                if not target.exists() or target.read_text(encoding="utf-8") != text:
                    stale.append(filename)
            else:
                target.write_text(text, encoding="utf-8")
    leftovers = sorted(p.name for p in SCHEMA_DIR.glob("*-provider-snapshot.json") if p.name not in expected_files)
    if leftovers:
        if args.check:
            stale += leftovers
        else:
            for name in leftovers:
                (SCHEMA_DIR / name).unlink()
    if stale:
        print("stale (run python3 infra/schema/regenerate.py): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
