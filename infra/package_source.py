#!/usr/bin/env python3
"""Build the functions' deploy artifact the way Terraform's archive_file does (modules/safesend/storage.tf).

    python3 infra/package_source.py [--source functions] [--store firestore|postgres] [--out functions-source.zip]

prints "<sha256> <path>". The zip holds the files of functions/ that INCLUDES names (main.py,
channels.toml, safesend/'s code, SQL, templates and static files), which must equal
local.functions_globs of modules/safesend/storage.tf (tests/infra/test_deploy_artifact.py checks
that), plus requirements.txt: the job store's hashed lock (REQUIREMENTS), so a Firestore deployment
installs no PostgreSQL driver. The rules follow the archive provider 2.8 with `source` blocks:
Terraform's fileset() (doublestar: `**` = any number of path segments, `*` and `?` within one
segment), entries in lexical order of their names, deflated with a fixed modification time and
mode 0644. Used by the tests and by cloudbuild-gcloud.yaml, so both deploy paths upload the same
artifact.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import stat
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

INCLUDES = [
    "main.py",
    "channels.toml",
    "safesend/**/*.py",
    "safesend/**/*.sql",
    "safesend/**/*.html",
    "safesend/**/*.css",
    "safesend/**/*.js",
    "safesend/**/*.svg",
]
# The lock each job store deploys as requirements.txt (local.functions_requirements).
REQUIREMENTS = {"firestore": "requirements.txt", "postgres": "requirements-postgres.txt"}

# What Go's zip.FileInfoHeader + SetModTime(time.Time{}) + SetMode(0644) produce.
_FIXED_TIME = (1980, 1, 1, 0, 0, 0)
_MODE = 0o644


def _segment_regex(segment: str) -> str:
    if re.search(r"[\[\]{}\\]", segment):
        raise ValueError(f"pattern segment {segment!r}: only *, ? and ** are supported here")
    return "".join("[^/]*" if c == "*" else "[^/]" if c == "?" else re.escape(c) for c in segment)


def pattern_regex(pattern: str) -> re.Pattern[str]:
    """doublestar.PathMatch semantics for patterns made of literal text, *, ? and **."""
    parts = pattern.split("/")
    regex = ""
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        if part == "**":
            regex += ".*" if last else "(?:[^/]+/)*"
        else:
            regex += _segment_regex(part) + ("" if last else "/")
    return re.compile(regex + r"\Z")


def files_to_zip(source: Path, includes: list[str] = INCLUDES) -> list[str]:
    """Paths (relative, "/"-separated) that fileset() finds for any of the globs, in lexical order."""
    patterns = [pattern_regex(p) for p in includes]
    found = sorted(
        rel
        for rel in (p.relative_to(source).as_posix() for p in source.rglob("*") if p.is_file())
        if any(pattern.match(rel) for pattern in patterns)
    )
    if not found:
        raise SystemExit(f"{source}: archive would be empty")
    return found


def build_zip(source: Path, out: Path, store: str = "firestore") -> str:
    """Write the zip for the job store and return its SHA-256 (hex)."""
    entries = {rel: (source / rel).read_bytes() for rel in files_to_zip(source)}
    entries["requirements.txt"] = (source / REQUIREMENTS[store]).read_bytes()
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for rel in sorted(entries):
            info = zipfile.ZipInfo(rel, date_time=_FIXED_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = (stat.S_IFREG | _MODE) << 16
            zf.writestr(info, entries[rel])
    return hashlib.sha256(out.read_bytes()).hexdigest()


def main() -> int:
    parser = argparse.ArgumentParser(description="Zip functions/ as Terraform deploys it.")
    parser.add_argument("--source", type=Path, default=ROOT / "functions")
    parser.add_argument("--store", choices=sorted(REQUIREMENTS), default="firestore")
    parser.add_argument("--out", type=Path, default=Path("functions-source.zip"))
    args = parser.parse_args()
    digest = build_zip(args.source, args.out, args.store)
    print(f"{digest} {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
