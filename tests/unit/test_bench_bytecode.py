"""bench/bytecode.py: every function the bench spawns imports its source from bytecode, as a
deployed instance does (the Cloud Functions buildpack runs `python3 -m compileall` at build), even
where PYTHONDONTWRITEBYTECODE keeps the interpreter from writing any: otherwise each cold start of
safesend compiled ~40 modules that hello world's one-line main.py does not have."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench import stackctl
from bench.bytecode import BytecodeError, compile_like_the_buildpack


def source_tree(root: Path) -> list[Path]:
    (root / "pkg" / "sub").mkdir(parents=True)
    files = [root / "main.py", root / "pkg" / "__init__.py", root / "pkg" / "sub" / "mod.py"]
    for path in files:
        path.write_text("VALUE = 1\n")
    return files


def test_every_module_below_the_source_gets_its_bytecode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    files = source_tree(tmp_path)
    compile_like_the_buildpack(tmp_path)
    assert all(Path(importlib.util.cache_from_source(str(f))).is_file() for f in files)


def test_a_source_that_does_not_compile_is_refused(tmp_path: Path) -> None:
    (tmp_path / "main.py").write_text("def broken(:\n")
    with pytest.raises(BytecodeError, match="compileall failed"):
        compile_like_the_buildpack(tmp_path)


def test_a_spawned_function_s_source_is_compiled_before_it_starts(tmp_path: Path) -> None:
    files = source_tree(tmp_path)
    stack = SimpleNamespace(service_env=dict, log_dir=tmp_path / "logs")
    stack.log_dir.mkdir()
    proc, url = stackctl.functions_process(stack, files[0], "hello", None, "probe")  # type: ignore[arg-type]
    assert url.startswith("http://127.0.0.1:") and proc is not None  # built, never started
    assert all(Path(importlib.util.cache_from_source(str(f))).is_file() for f in files)
