"""The environments copy the module's variable and output blocks (Terraform has no way to
forward a module's variables), and a copy that drifts is a bug real Terraform may refuse: issue 23
was the envs' `"\\s"` where the module has `"\\\\s"`. Compared as raw text, before any HCL
library normalises escapes: every variable an environment shares with the module is the module's
block, byte for byte, except `default` and `description` (the environment's own choice and
wording) and `validation` blocks the environment adds (prod may be stricter); every environment
output is the module's output of the same name, passed on."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .support import ENVS, INFRA, MODULE

# Lines an environment may word or choose for itself.
ENV_OWNED = re.compile(r"^\s*(default|description)\s*=")


def raw_blocks(text: str, kind: str) -> dict[str, str]:
    """{name: text} of every top-level `kind "name" { ... }` block; strings and comments skipped."""
    head = re.compile(rf'^{kind}\s+"([\w-]+)"\s*\{{', re.M)
    found: dict[str, str] = {}
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
        found[match.group(1)] = text[match.start() : i]
    return found


def shared_lines(block: str) -> list[str]:
    """The block without the lines an environment owns (a multi-line default is compared whole)."""
    lines = block.splitlines()
    out: list[str] = []
    skipping = 0
    for line in lines:
        if skipping:
            skipping += line.count("{") + line.count("[") - line.count("}") - line.count("]")
            continue
        if ENV_OWNED.match(line):
            skipping = max(0, line.count("{") + line.count("[") - line.count("}") - line.count("]"))
            continue
        out.append(line)
    return out


def split_validations(lines: list[str]) -> tuple[list[str], list[str]]:
    """(lines outside `validation { ... }` blocks, each validation block joined as one string)."""
    rest: list[str] = []
    validations: list[str] = []
    current: list[str] | None = None
    for line in lines:
        if current is None and re.match(r"^\s*validation\s*\{", line):
            current = []
        if current is None:
            rest.append(line)
            continue
        current.append(line)
        if re.match(r"^  \}\s*$", line):
            validations.append("\n".join(current))
            current = None
    return [line for line in rest if line.strip()], validations


def drift(module_block: str, copy_block: str) -> str | None:
    """Why the copy is not the module's block (None when it is)."""
    module_rest, module_checks = split_validations(shared_lines(module_block))
    copy_rest, copy_checks = split_validations(shared_lines(copy_block))
    if module_rest != copy_rest:
        return f"module: {module_rest}\n  copy:   {copy_rest}"
    missing = [check for check in module_checks if check not in copy_checks]
    return f"validation missing or changed: {missing}" if missing else None


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


@pytest.mark.parametrize("env", ENVS)
def test_every_shared_variable_is_the_modules_block(env):
    module = raw_blocks(read(MODULE / "variables.tf"), "variable")
    copies = raw_blocks(read(INFRA / "envs" / env / "variables.tf"), "variable")
    shared = sorted(set(copies) & set(module))
    assert len(shared) > 50, shared  # the parser found the blocks
    drifted = [f"{name}: {why}" for name in shared if (why := drift(module[name], copies[name]))]
    assert not drifted, f"infra/envs/{env}/variables.tf drifted from the module:\n" + "\n".join(drifted)


@pytest.mark.parametrize("env", ENVS)
def test_every_module_output_is_passed_on_unchanged(env):
    module = raw_blocks(read(MODULE / "outputs.tf"), "output")
    copies = raw_blocks(read(INFRA / "envs" / env / "outputs.tf"), "output")
    assert copies and not set(copies) - set(module), sorted(set(copies) - set(module))
    for name, block in copies.items():
        assert re.search(rf"^\s*value\s*=\s*module\.safesend\.{name}\s*$", block, re.M), block
        sensitive = re.compile(r"^\s*sensitive\s*=\s*(\w+)", re.M)
        assert sensitive.findall(block) == sensitive.findall(module[name]), name


def test_the_comparison_sees_an_escape_drift():
    module = 'variable "x" {\n  default = 1\n  validation {\n    condition = can(regex("\\\\s", var.x))\n  }\n}\n'
    copy = module.replace("\\\\s", "\\s").replace("default = 1", "default = 2")
    original = raw_blocks(module, "variable")["x"]
    assert drift(original, raw_blocks(copy, "variable")["x"])
    assert drift(original, raw_blocks(module.replace("default = 1", "default = 2"), "variable")["x"]) is None
    stricter = module.replace("\n}\n", "\n  validation {\n    condition = var.x > 0\n  }\n}\n")
    assert drift(original, raw_blocks(stricter, "variable")["x"]) is None
    assert drift(raw_blocks(stricter, "variable")["x"], original)
