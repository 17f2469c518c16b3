#!/usr/bin/env python3
"""Build the functions' deploy artifact the way Terraform's archive_file does (modules/safesend/storage.tf).

    python3 infra/package_source.py [--source functions] [--out functions-source.zip]

prints "<sha256> <path>". The zip holds functions/ (main.py, requirements.txt, channels.toml,
safesend/) minus EXCLUDES, which must equal the `excludes` of data.archive_file.functions_source
(tests/infra/test_deploy_artifact.py checks that). The rules follow the archive provider 2.8:
walk the tree in lexical order, match each path relative to the source directory against every
pattern with doublestar semantics (`**` = any number of path segments, `*` and `?` within one
segment), skip a matching directory whole, store files deflated with a fixed modification time
and mode 0644. Used by the tests and by cloudbuild-gcloud.yaml, so both deploy paths upload the
same artifact.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import stat
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

EXCLUDES = [
    "**/__pycache__",
    "**/*.pyc",
    "**/.pytest_cache",
    "**/.mypy_cache",
    "**/.ruff_cache",
    "**/.hypothesis",
    "**/tests",
    "**/.venv",
    "**/*.egg-info",
    "**/.DS_Store",
]

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


def excluded(relpath: str, patterns: list[re.Pattern[str]]) -> bool:
    return any(p.match(relpath) for p in patterns)


def files_to_zip(source: Path, excludes: list[str] = EXCLUDES) -> list[str]:
    """Paths (relative, "/"-separated) in the order the archive provider's filepath.Walk visits them."""
    patterns = [pattern_regex(p) for p in excludes]
    found: list[str] = []

    def walk(directory: Path, prefix: str) -> None:
        for name in sorted(os.listdir(directory)):
            path = directory / name
            rel = f"{prefix}{name}"
            if excluded(rel, patterns):
                continue
            if path.is_dir():
                walk(path, rel + "/")
            elif path.is_file():
                found.append(rel)

    walk(source, "")
    if not found:
        raise SystemExit(f"{source}: archive would be empty")
    return found


def build_zip(source: Path, out: Path, excludes: list[str] = EXCLUDES) -> str:
    """Write the zip and return its SHA-256 (hex)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for rel in files_to_zip(source, excludes):
            info = zipfile.ZipInfo(rel, date_time=_FIXED_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = (stat.S_IFREG | _MODE) << 16
            zf.writestr(info, (source / rel).read_bytes())
    return hashlib.sha256(out.read_bytes()).hexdigest()


def main() -> int:
    parser = argparse.ArgumentParser(description="Zip functions/ as Terraform deploys it.")
    parser.add_argument("--source", type=Path, default=ROOT / "functions")
    parser.add_argument("--out", type=Path, default=Path("functions-source.zip"))
    args = parser.parse_args()
    digest = build_zip(args.source, args.out)
    print(f"{digest} {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
