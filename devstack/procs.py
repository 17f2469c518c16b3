"""What /proc says about local processes: the one reader shared by the local stack, its tests and
the benchmarks (which children to stop, whether a process is gone, the CPU a process tree used).
Linux only, like the rest of devstack. A zombie counts as gone: it runs nothing and holds no port."""

from __future__ import annotations

import os
from pathlib import Path

PROC = Path("/proc")
MAX_TREE = 10_000  # bound on the processes one walk visits


def stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the parenthesised comm (state, ppid, pgrp, ...); None if gone."""
    try:
        text = (PROC / str(pid) / "stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    fields = text.rsplit(")", 1)[-1].split()
    return fields or None


def alive(pid: int | None) -> bool:
    """The process exists and is not a zombie."""
    fields = stat_fields(pid) if pid else None
    return fields is not None and fields[0] != "Z"


def process_table() -> dict[int, list[str]]:
    """Every live (non-zombie) process's stat fields, read once."""
    table = {}
    for entry in os.listdir(PROC):
        if entry.isdigit() and (fields := stat_fields(int(entry))) and fields[0] != "Z" and len(fields) > 12:
            table[int(entry)] = fields
    return table


def children_of(pid: int) -> list[int]:
    """Live direct children of `pid`, sorted."""
    return sorted(p for p, fields in process_table().items() if int(fields[1]) == pid)


def descendants(pid: int, table: dict[int, list[str]] | None = None) -> set[int]:
    """Every live process below `pid` (emulators run in sessions of their own but stay its children)."""
    table = process_table() if table is None else table
    below: dict[int, list[int]] = {}
    for p, fields in table.items():
        below.setdefault(int(fields[1]), []).append(p)
    found: set[int] = set()
    frontier = [pid]
    while frontier and len(found) < MAX_TREE:
        for child in below.get(frontier.pop(), []):
            if child not in found:
                found.add(child)
                frontier.append(child)
    return found


def tree_cpu_s(pid: int) -> float:
    """User + system CPU seconds of `pid` and its live descendants."""
    table = process_table()
    tick = os.sysconf("SC_CLK_TCK")
    return sum((int(table[p][11]) + int(table[p][12])) / tick for p in {pid} | descendants(pid, table) if p in table)
