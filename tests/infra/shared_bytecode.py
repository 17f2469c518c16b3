"""Compiled bytecode shared by the mutation suite's scratch copies (tests/infra/test_mutations.py).

Python keys a .pyc by its source's absolute path, so each of the ~92 copies compiled the same
tests/infra modules (and pytest rewrote their assertions) again: ~0.3 CPU-s per nested run. One
copy (the template) is compiled once; every other copy gets the template's .pyc files, standard
and pytest's assertion-rewritten, for the source files whose bytes are the template's. A file
whose bytes differ (the mutated one) gets nothing and is compiled from its own bytes; the
interpreter and pytest still check each .pyc against its source's size and mtime (copy2 keeps it).
"""

from __future__ import annotations

import importlib.util
import marshal
import os
import types
from collections.abc import Iterator
from pathlib import Path

from _pytest.assertion.rewrite import PYC_TAIL, get_cache_dir

HEADER = 16  # magic, flags, source mtime, source size: the same layout in both kinds of .pyc


def bytecode_paths(source: Path) -> tuple[Path, Path]:
    """Where the interpreter and pytest's assertion rewriter keep `source`'s .pyc (honours
    PYTHONPYCACHEPREFIX, as the nested runs, which inherit this process's environment, do)."""
    return Path(importlib.util.cache_from_source(str(source))), get_cache_dir(source) / f"{source.stem}{PYC_TAIL}"


def sources(tree: Path) -> Iterator[Path]:
    """The .py files of a copy, its symlinked virtualenvs left out (os.walk follows no symlink)."""
    for directory, names, files in os.walk(tree):
        names[:] = [n for n in names if n != "__pycache__"]
        for name in files:
            if name.endswith(".py"):
                yield Path(directory, name)


def relocated(code: types.CodeType, old: str, new: str) -> types.CodeType:
    """`code` with the file name its tracebacks show moved from the template's source to the copy's."""
    consts = tuple(relocated(c, old, new) if isinstance(c, types.CodeType) else c for c in code.co_consts)
    return code.replace(co_filename=new if code.co_filename == old else code.co_filename, co_consts=consts)


def share_bytecode(template: Path, tree: Path) -> list[Path]:
    """Gives `tree` the template's .pyc of each source file with the same bytes; returns those files
    (relative to the tree). Files that differ, or that the template never compiled, are left out."""
    shared = []
    for source in sources(template):
        relative = source.relative_to(template)
        twin = tree / relative
        compiled = [
            (pyc, dest) for pyc, dest in zip(bytecode_paths(source), bytecode_paths(twin), strict=True) if pyc.is_file()
        ]
        if not compiled or not twin.is_file() or twin.read_bytes() != source.read_bytes():
            continue
        for pyc, dest in compiled:
            data = pyc.read_bytes()
            code = relocated(marshal.loads(data[HEADER:]), str(source), str(twin))  # noqa: S302 - a .pyc of this run
            dest.parent.mkdir(parents=True, exist_ok=True)
            partial = dest.with_name(f"{dest.name}.{os.getpid()}.tmp")  # a parallel reader never sees half a file
            partial.write_bytes(data[:HEADER] + marshal.dumps(code))
            os.replace(partial, dest)
        shared.append(relative)
    return shared
