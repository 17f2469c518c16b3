"""The one plain-text table renderer of the benchmarks: the suite (report.py) and --micro (results.py)."""

from __future__ import annotations

from collections.abc import Collection, Sequence

Cells = Sequence[str]


def render_text_table(headers: Cells, groups: Sequence[Sequence[Cells]], right: Collection[int], rule_tail: int) -> str:
    """`headers`, then each group of rows with a blank line between groups, between two rules.

    Every column but the last is padded to its widest cell (`right`: the indices aligned right,
    numbers); the last column is free text, never padded. The rules are as wide as the padded
    columns plus `rule_tail` characters of the last one."""
    widths = [len(h) for h in headers]
    for group in groups:
        for row in group:
            for i, cell in enumerate(row[:-1]):
                widths[i] = max(widths[i], len(cell))

    def line(cells: Cells) -> str:
        parts = []
        for i, cell in enumerate(cells):
            if i == len(cells) - 1:
                parts.append(cell)
            else:
                parts.append(cell.rjust(widths[i]) if i in right else cell.ljust(widths[i]))
        return "  ".join(parts).rstrip()

    rule = "-" * (sum(widths[:-1]) + 2 * (len(widths) - 1) + rule_tail)
    body = [line(headers), rule]
    for g, group in enumerate(groups):
        if g:
            body.append("")
        body += [line(row) for row in group]
    body.append(rule)
    return "\n".join(body)
