"""scripts/n8n-node-build.sh reuses a passing build of the same inputs (issue 21.5): the same bytes
skip npm ci, lint, the type check and the pack; any changed input builds again, and a build that
failed is never kept. The script runs in a scratch tree whose n8n install, node, npm and npx are
stubs that record their calls (a real build is ~70 CPU-s)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

INSTALL = """#!/usr/bin/env bash
printf 'export SAFESEND_N8N_HOME=%q\\nexport SAFESEND_N8N_NODE=%q\\n' "{home}" "{bin}/node"
"""
NODE = """#!/usr/bin/env bash
[[ "$1" == --version ]] && echo v24.22.3
"""
NPM = """#!/usr/bin/env bash
echo "npm $1" >> "{log}"
case "$1" in
    ci) mkdir -p node_modules ;;
    pack) out="${@: -1}"; printf 'tarball of %s\\n' "$(cat src/node.ts)" > "$out/n8n-nodes-safesend-1.0.0.tgz"
          echo n8n-nodes-safesend-1.0.0.tgz ;;
esac
"""
NPX = """#!/usr/bin/env bash
echo "npx $3" >> "{log}"
[[ "$3" == lint && -n "${STUB_LINT_FAILS:-}" ]] && { echo "lint: 1 problem"; exit 1; }
exit 0
"""


def scratch(tmp_path: Path) -> tuple[Path, Path]:
    """(the tree, the call log): the real build script beside stubs."""
    tree, log, stubs = tmp_path / "tree", tmp_path / "calls.log", tmp_path / "bin"
    (tree / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "n8n-node-build.sh", tree / "scripts")
    pkg = tree / "integrations" / "n8n"
    (pkg / "src").mkdir(parents=True)
    (pkg / "package.json").write_text('{"name": "n8n-nodes-safesend", "version": "1.0.0"}\n')
    (pkg / "package-lock.json").write_text("{}\n")
    (pkg / "src" / "node.ts").write_text("export const version = 1;\n")
    stubs.mkdir()
    scripts = {
        tree / "scripts" / "n8n-install.sh": INSTALL.format(home=tmp_path / "home", bin=stubs),
        stubs / "node": NODE,
        stubs / "npm": NPM.replace("{log}", str(log)),
        stubs / "npx": NPX.replace("{log}", str(log)),
    }
    for path, text in scripts.items():
        path.write_text(text)
        path.chmod(0o755)
    return tree, log


def build(tree: Path, out: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("SAFESEND_")}
    return subprocess.run(
        ["bash", str(tree / "scripts" / "n8n-node-build.sh"), str(out)],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def calls(log: Path) -> list[str]:
    found = log.read_text().splitlines() if log.exists() else []
    log.unlink(missing_ok=True)
    return found


def test_the_same_inputs_reuse_the_passing_build(tmp_path):
    tree, log = scratch(tmp_path)
    first = build(tree, tmp_path / "out1")
    assert first.returncode == 0, first.stderr
    assert calls(log) == ["npm ci", "npx lint", "npx build", "npm pack"]
    second = build(tree, tmp_path / "out2")
    assert second.returncode == 0, second.stderr
    assert calls(log) == [] and "reused" in second.stderr  # no npm, no lint, no type check, no pack
    tarball = "n8n-nodes-safesend-1.0.0.tgz"
    assert second.stdout.strip() == str((tmp_path / "out2" / tarball).resolve())
    assert (tmp_path / "out2" / tarball).read_bytes() == (tmp_path / "out1" / tarball).read_bytes()


@pytest.mark.parametrize(
    "change",
    ["integrations/n8n/src/node.ts", "integrations/n8n/package-lock.json", "integrations/n8n/src/new.ts"],
)
def test_any_changed_input_builds_again(tmp_path, change):
    tree, log = scratch(tmp_path)
    assert build(tree, tmp_path / "out1").returncode == 0
    calls(log)
    (tree / change).write_text("export const version = 2;\n")
    again = build(tree, tmp_path / "out2")
    assert again.returncode == 0, again.stderr
    assert {"npx lint", "npx build", "npm pack"} <= set(calls(log))


def test_a_failed_build_is_never_kept(tmp_path):
    tree, log = scratch(tmp_path)
    failed = build(tree, tmp_path / "out1", STUB_LINT_FAILS="1")
    assert failed.returncode == 1 and "lint (n8n-node lint) failed" in failed.stderr
    calls(log)
    again = build(tree, tmp_path / "out2")
    assert again.returncode == 0 and "npx lint" in calls(log)  # checked again, not taken from a cache


def test_fresh_builds_anyway(tmp_path):
    tree, log = scratch(tmp_path)
    assert build(tree, tmp_path / "out1").returncode == 0
    calls(log)
    fresh = build(tree, tmp_path / "out2", SAFESEND_N8N_NODE_BUILD_FRESH="1")
    assert fresh.returncode == 0 and calls(log)[-3:] == ["npx lint", "npx build", "npm pack"]


def test_a_clone_elsewhere_with_the_same_bytes_reuses_the_build(tmp_path):
    """The key is the inputs' bytes, not where the checkout lives: every fresh clone (the gate's, a
    second worktree) has another path, and a key naming the script's path built again each time."""
    tree, log = scratch(tmp_path)
    assert build(tree, tmp_path / "out1").returncode == 0
    calls(log)
    elsewhere = tmp_path / "another-clone"
    shutil.copytree(tree, elsewhere, symlinks=True)
    again = build(elsewhere, tmp_path / "out2")
    assert again.returncode == 0, again.stderr
    assert calls(log) == [] and "reused" in again.stderr
