"""README.md says what the code says: its settings and states tables are generated from the code."""

from __future__ import annotations

import re
from pathlib import Path

from safesend.config import settings_table
from safesend.core.states import states_table

README = Path(__file__).resolve().parents[2] / "README.md"


def block(name: str) -> str:
    match = re.search(rf"<!-- {name}:begin -->\n(.*?)<!-- {name}:end -->", README.read_text(), re.S)
    assert match, f"README.md has no {name} block"
    return match.group(1)


def test_the_settings_table_is_the_one_config_py_generates():
    assert block("settings") == settings_table(), "regenerate it: python -m safesend.config (in functions/)"


def test_the_states_table_is_the_one_states_py_generates():
    assert block("states") == states_table(), "regenerate it: python -m safesend.core.states (in functions/)"


def test_the_two_set_up_commands_come_first_and_ci_runs_the_test_command():
    text = README.read_text()
    commands = text.index("bash scripts/run-local.sh"), text.index("bash scripts/test.sh")
    assert commands[0] < text.index("## n8n") and commands[1] < text.index("## n8n")
    ci = (README.parent / ".ci" / "run").read_text()
    assert "bash scripts/test.sh" in ci


def test_the_n8n_section_follows_the_two_commands_and_names_only_shipped_workflows():
    text = README.read_text()
    sections = re.findall(r"^## (.+)$", text, re.M)
    assert sections.index("n8n") == sections.index("Two commands") + 1
    section = text.split("## n8n", 1)[1].split("\n## ", 1)[0]
    for name in re.findall(r"`([a-z-]+\.json)`", section):
        assert (README.parent / "examples" / "n8n" / name).is_file(), name


def test_where_things_live_maps_every_layer_folder_and_names_real_modules():
    text = README.read_text()
    section = text.split("### Where things live", 1)[1].split("**States**", 1)[0]
    package = README.parent / "functions" / "safesend"
    layers = {p.parent.name for p in package.glob("*/__init__.py")}
    mapped = set(re.findall(r"^  (\w+)/ ", section, re.M))
    assert mapped == layers, "one line per layer folder of functions/safesend"
    named = re.findall(r"`(\w+/\w+\.py)`", section)
    assert {"core/policy.py", "usecases/send.py"} <= set(named)  # where a resend decision happens
    for path in named:
        assert (package / path).is_file(), path


def test_the_guarantee_says_per_provider_what_holds_and_what_it_rests_on():
    """Issue 22: both kinds of mailbox side by side, each assumption named, every proof a real test."""
    text = README.read_text()
    section = text[text.index("## What is guaranteed") : text.index("\n## ", text.index("## What is guaranteed") + 3)]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    assert rows and 'Gmail (`kind = "gmail"`)' in rows[0] and 'Microsoft 365 (`kind = "graph"`)' in rows[0]
    labels = [row.split("|")[1].strip() for row in rows[2:]]
    for needed in (
        "assumption 1: our Message-ID is kept",
        "assumption 2: the copy is saved",
        "assumption 3: index lag",
    ):
        assert any(label.startswith(needed) for label in labels), needed
    assert all(len(row.split("|")) == 5 for row in rows), "each row: what, Gmail, Microsoft 365"
    proofs = next(row for row in rows if row.split("|")[1].strip() == "proven by")
    tests = Path(__file__).resolve().parents[1]
    for name in re.findall(r"`(test_\w+\.py)`", proofs):
        assert list(tests.rglob(name)), f"{name} named as a proof does not exist"
    assert "A pool that mixes both" in section
