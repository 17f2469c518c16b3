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
