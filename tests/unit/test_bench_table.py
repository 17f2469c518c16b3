"""bench/table.py, the one plain-text table both benchmark reports print (the suite's and --micro's), and the
shape issue 13 asks of bench/: no function longer than 60 lines."""

from __future__ import annotations

from bench.table import render_text_table

HEADERS = ("bench", "variant", "n", "checks")


def test_columns_padded_numbers_right_last_column_free() -> None:
    text = render_text_table(
        HEADERS,
        [[("1. latency", "direct", "20", "ok"), ("", "safesend /send", "5", "a long free-text check")]],
        right={2},
        rule_tail=10,
    )
    lines = text.splitlines()
    assert lines[0] == "bench       variant          n  checks"
    assert lines[2] == "1. latency  direct          20  ok"
    assert lines[3] == "            safesend /send   5  a long free-text check"
    # The rules span the padded columns and `rule_tail` characters of the last one.
    assert lines[1] == lines[-1] == "-" * (len("1. latency  safesend /send  20  ") + 10)


def test_groups_are_separated_by_one_blank_line_and_trailing_spaces_dropped() -> None:
    text = render_text_table(HEADERS, [[("a", "x", "1", "")], [("b", "y", "2", "")]], right={2}, rule_tail=5)
    lines = text.splitlines()
    assert lines[2:5] == ["a      x        1", "", "b      y        2"]
    assert all(line == line.rstrip() for line in lines)


def test_both_reports_render_through_it() -> None:
    """The suite (report.render_text) and the micro suite (results.render_table) share the renderer:
    no second formatter to drift."""
    from bench import report, results

    assert report.render_text_table is render_text_table
    assert results.render_text_table is render_text_table


def test_no_bench_function_is_longer_than_60_lines() -> None:
    """Issue 13: benchmark functions are split into named helpers (ten once ran 65-127 lines)."""
    import ast
    from pathlib import Path

    bench_dir = Path(__file__).resolve().parents[2] / "bench"
    long = []
    for path in sorted(bench_dir.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > 60:
                    long.append(f"{path.relative_to(bench_dir.parent)}:{node.lineno} {node.name} ({lines} lines)")
    assert not long
