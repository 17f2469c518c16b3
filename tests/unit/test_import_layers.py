"""The layers are the folders of functions/safesend, and the gate keeps them: import-linter's
contracts (pyproject.toml, [tool.importlinter]) hold on this checkout, and fail on a scratch copy
of the package into which one upward import is planted (never in this checkout, which other tests
read)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.unit.test_quality_gate import BIN, ROOT, run

PACKAGE = ROOT / "functions" / "safesend"
LAYERS = ("core", "usecases", "adapters", "entrypoints", "bootstrap")


def lint_imports(tree: Path) -> tuple[int, str]:
    """lint-imports with the repository's contracts on the `safesend` found under tree/functions."""
    result = run(
        [
            "env",
            f"PYTHONPATH={tree / 'functions'}",
            str(BIN / "lint-imports"),
            "--config",
            str(ROOT / "pyproject.toml"),
            "--no-cache",
            "--no-logo",
        ],
        tree,
    )
    return result.returncode, result.stdout + result.stderr


def scratch_package(tmp_path: Path) -> Path:
    shutil.copytree(PACKAGE, tmp_path / "functions" / "safesend", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def test_the_package_is_laid_out_in_layer_folders():
    assert all((PACKAGE / layer / "__init__.py").is_file() for layer in LAYERS)
    loose = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert loose == ["__init__.py", "config.py", "logs.py"]  # read by every layer; the rest is in a layer


def test_the_contracts_hold_on_this_checkout():
    code, output = lint_imports(ROOT)  # --no-cache: nothing is written here
    assert code == 0, output
    assert "Contracts: 2 kept, 0 broken." in output, output


def test_the_gate_runs_the_contracts():
    lint = (ROOT / "scripts" / "lint.sh").read_text()
    assert 'step "import layers" env PYTHONPATH=functions "$BIN/lint-imports"' in lint


@pytest.mark.parametrize(
    ("module", "planted", "broken"),
    [
        (
            "core/keys.py",
            "from ..adapters import gmail_mailer",
            "safesend.core is not allowed to import safesend.adapters",
        ),
        ("core/policy.py", "from ..usecases import send", "safesend.core is not allowed to import safesend.usecases"),
        ("core/model.py", "from .. import config", "safesend.core is not allowed to import safesend.config"),
        ("adapters/cloud_tasks.py", "from ..usecases import sweep", "safesend.adapters is not allowed to import"),
        ("usecases/send.py", "from ..adapters import gmail_mailer", "safesend.usecases is not allowed to import"),
        ("usecases/review.py", "from ..entrypoints import views", "safesend.usecases is not allowed to import"),
        ("core/mime.py", "import requests", "safesend.core.mime -> requests"),
    ],
)
def test_one_upward_import_breaks_the_contracts(tmp_path, module, planted, broken):
    tree = scratch_package(tmp_path)
    assert lint_imports(tree)[0] == 0  # the copy is clean before the plant
    target = tree / "functions" / "safesend" / module
    target.write_text(target.read_text() + f"\n{planted}  # planted\n")
    code, output = lint_imports(tree)
    assert code != 0, output
    assert broken in output, output
