#!/usr/bin/env python3
"""Rebuild the provider schema snapshots that tests/infra/test_provider_schema.py checks infra/ against.

`terraform validate` needs the provider binaries, which cannot be downloaded where CI runs. The
CDK Terrain prebuilt provider wheels on PyPI (cdktn-provider-google, -archive, -time) are
generated from those providers' schemas, and each ships its jsii assembly,
`<pkg>/_jsii/provider-<name>@<version>.jsii.tgz`, whose `package/.jsii` is JSON describing every
resource and data source:

* a class per resource/data source whose docs summary links the registry page and names the
  Terraform type: "Represents a {@link https://registry.terraform.io/providers/hashicorp/google/8.7.0/docs/resources/pubsub_topic google_pubsub_topic}."
* an interface `<Class>Config` whose properties are the arguments; each property's docs link
  `...#<terraform_name> ...` gives the exact Terraform name, a property not marked optional is
  required, and a property typed as another struct of the assembly is a nested block (its docs
  summary reads "<name> block.") whose own properties are that block's arguments, recursively.

Only the types that infra/**/*.tf uses are kept, so the snapshots stay small and reviewable.

    python3 infra/schema/regenerate.py            # download the pinned wheels (pip), rewrite the snapshots
    python3 infra/schema/regenerate.py --check    # exit 1 if the committed snapshots are stale
    python3 infra/schema/regenerate.py --wheel-dir DIR   # use wheels already in DIR (no download)

After bumping a wheel below, pin the same provider version (printed, and recorded in the
snapshot as provider.version) in infra/envs/*/versions.tf; tests/infra checks that they agree.
"""

from __future__ import annotations

import argparse
import io
import json
import re
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

INFRA = Path(__file__).resolve().parents[1]
SCHEMA_DIR = INFRA / "schema"

# (PyPI wheel pin, Terraform type prefix, snapshot file). The wheel's README/metadata names the
# provider version it was generated from; the snapshot records it.
WHEELS = [
    ("cdktn-provider-google==21.1.0", "google_", "google-provider-snapshot.json"),
    ("cdktn-provider-archive==14.0.1", "archive_", "archive-provider-snapshot.json"),
    ("cdktn-provider-time==14.0.2", "time_", "time-provider-snapshot.json"),
]

LINK = re.compile(r"\{@link https://registry\.terraform\.io/providers/([\w-]+)/([\w-]+)/([\w.\-]+)/docs/"
                  r"(resources|data-sources)/(\w+) (\w+)\}")
ANCHOR = re.compile(r"\{@link https://registry\.terraform\.io/providers/[^ #]+#(\w+) ")
BLOCK_DECL = re.compile(r'^\s*(resource|data)\s+"([\w-]+)"\s+"[\w-]+"', re.M)


def used_types() -> dict[str, set[str]]:
    """{"resource": {...}, "data": {...}} as declared in infra/**/*.tf."""
    found: dict[str, set[str]] = {"resource": set(), "data": set()}
    for path in sorted(INFRA.rglob("*.tf")):
        if ".terraform" in path.parts:
            continue
        for kind, tf_type in BLOCK_DECL.findall(path.read_text(encoding="utf-8")):
            found[kind].add(tf_type)
    return found


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


def struct_ref(type_ref: dict, types: dict) -> str | None:
    """fqn of the struct a property refers to (directly, in a list/set/map, or in a union), else None."""
    if "fqn" in type_ref:
        target = types.get(type_ref["fqn"])
        return type_ref["fqn"] if target and target["kind"] == "interface" and target.get("datatype") else None
    if "collection" in type_ref:
        return struct_ref(type_ref["collection"]["elementtype"], types)
    if "union" in type_ref:
        for member in type_ref["union"]["types"]:
            ref = struct_ref(member, types)
            if ref:
                return ref
    return None


def describe(fqn: str, types: dict, depth: int = 0) -> dict:
    """{"arguments": [...], "blocks": {name: {...}}, "required": [...]} of a Config interface or block struct.

    "required" lists the arguments and blocks a configuration must set (jsii: not optional)."""
    if depth > 20:
        raise SystemExit(f"{fqn}: nesting deeper than 20 levels")
    arguments: list[str] = []
    blocks: dict[str, dict] = {}
    required: list[str] = []
    for prop in types[fqn].get("properties", []):
        docs = prop.get("docs", {})
        anchor = ANCHOR.search(docs.get("remarks", "") + "\n" + docs.get("summary", ""))
        name = anchor.group(1) if anchor else snake(prop["name"])
        if depth == 0 and name == "id":
            continue  # added to every cdktn Config by the SDKv2 convention; not an argument to set
        if not prop.get("optional"):
            required.append(name)
        ref = struct_ref(prop["type"], types)
        if ref:
            blocks[name] = describe(ref, types, depth + 1)
        else:
            arguments.append(name)
    return {"arguments": sorted(arguments), "blocks": dict(sorted(blocks.items())), "required": sorted(required)}


def snapshot(wheel: Path, prefix: str, wanted: dict[str, set[str]]) -> dict:
    assembly, member = load_assembly(wheel)
    types = assembly["types"]
    found: dict[str, dict[str, dict]] = {"resource": {}, "data": {}}
    provider = None
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
        if tf_type in wanted[kind] and tf_type.startswith(prefix):
            config = fqn + "Config"
            if config not in types:
                raise SystemExit(f"{wheel.name}: {fqn} has no {config}")
            found[kind][tf_type] = describe(config, types)
    if provider is None:
        raise SystemExit(f"{wheel.name}: no resource classes found in {member}")
    missing = sorted(f"{k} {t}" for k in wanted for t in wanted[k] if t.startswith(prefix) and t not in found[k])
    package_version = wheel.name.split("-")[1]
    return {
        "generated_by": "infra/schema/regenerate.py (do not edit by hand)",
        "source": {"wheel": wheel.name, "assembly": member, "package_version": package_version},
        "provider": provider,
        # Types infra/ uses that this provider version does not have (the test fails on them).
        "unknown_types": missing,
        "resources": dict(sorted(found["resource"].items())),
        "data_sources": dict(sorted(found["data"].items())),
    }


def download(requirement: str, into: Path) -> Path:
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                    "--disable-pip-version-check", "-d", str(into), requirement], check=True)
    name = requirement.split("==")[0].replace("-", "_")
    wheels = sorted(into.glob(f"{name}-{requirement.split('==')[1]}-*.whl"))
    if not wheels:
        raise SystemExit(f"pip did not leave a wheel for {requirement} in {into}")
    return wheels[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed snapshots, write nothing")
    parser.add_argument("--wheel-dir", type=Path, help="directory that already holds the pinned wheels")
    args = parser.parse_args()
    wanted = used_types()
    stale = []
    with tempfile.TemporaryDirectory(prefix="safesend-schema-") as tmp:
        for requirement, prefix, filename in WHEELS:
            if not any(t.startswith(prefix) for kind in wanted for t in wanted[kind]):
                continue
            if args.wheel_dir:
                name, version = requirement.split("==")
                matches = sorted(args.wheel_dir.glob(f"{name.replace('-', '_')}-{version}-*.whl"))
                if not matches:
                    raise SystemExit(f"no wheel for {requirement} in {args.wheel_dir}")
                wheel = matches[0]
            else:
                wheel = download(requirement, Path(tmp))
            data = snapshot(wheel, prefix, wanted)
            text = json.dumps(data, indent=1, sort_keys=False) + "\n"
            target = SCHEMA_DIR / filename
            print(f"{filename}: {data['provider']['source']} {data['provider']['version']} "
                  f"({len(data['resources'])} resources, {len(data['data_sources'])} data sources"
                  f"{', UNKNOWN: ' + ', '.join(data['unknown_types']) if data['unknown_types'] else ''})")
            if args.check:
                if not target.exists() or target.read_text(encoding="utf-8") != text:
                    stale.append(filename)
            else:
                target.write_text(text, encoding="utf-8")
    if stale:
        print("stale (run python3 infra/schema/regenerate.py): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
