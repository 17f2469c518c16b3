"""SafeSendService is a facade: each use case is its own small module under usecases/, and the
facade joins them without logic of its own (issue 21, part 3)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from safesend.usecases.service import SafeSendService

USECASES = Path(__file__).resolve().parents[2] / "functions" / "safesend" / "usecases"
USE_CASES = {
    "send": ("SendJobs", {"submit"}),
    "notify": ("ReviewerNotices", {"notify", "notify_incident"}),
    "reconcile": ("Reconciler", {"advance"}),
    "review": ("ReviewDecisions", {"decide", "open_reviews"}),
    "sweep": ("Sweeper", {"sweep"}),
    "health": ("HealthViews", {"health", "mailboxes_report", "queue_place"}),
}
MAX_LINES = 400


@pytest.mark.parametrize("module", sorted(USE_CASES))
def test_each_use_case_lives_in_its_own_module(module):
    name, public = USE_CASES[module]
    use_case = getattr(importlib.import_module(f"safesend.usecases.{module}"), name)
    assert public <= set(vars(use_case)), f"{module}.py's {name} should define {public}"
    assert issubclass(SafeSendService, use_case)


def test_the_facade_has_no_logic_of_its_own():
    tree = ast.parse((USECASES / "service.py").read_text())
    (facade,) = [node for node in tree.body if isinstance(node, ast.ClassDef)]
    assert facade.name == "SafeSendService"
    assert [type(node) for node in facade.body] == [ast.Expr]  # its docstring only
    functions = [node for node in tree.body if isinstance(node, ast.FunctionDef)]
    assert functions == []


@pytest.mark.parametrize("path", sorted(USECASES.glob("*.py")), ids=lambda p: p.name)
def test_no_use_case_module_is_over_the_limit(path):
    assert len(path.read_text().splitlines()) <= MAX_LINES
