"""Runs side by side as text: the aligned table shows only the columns with a value, numbers right-aligned
and rounded by their column; the exported row keeps every column (CSV, JSON and Markdown against the records:
tests/runs/read/test_comparison.py)."""

from __future__ import annotations

from launcher.present.comparison import COLUMNS, exported, fmt, render, shown_columns
from launcher.runs.read.comparison import RunStats

ROWS = [RunStats("r1", "a", "succeeded", world_size=2, tokens_per_s=1234.4),
        RunStats("r2", "b", "failed", world_size=4, signature="OOM")]


def test_the_table_shows_the_columns_with_a_value_aligned():
    assert [c.key for c in shown_columns(ROWS)] == ["run_id", "label", "state", "world_size", "tokens_per_s",
                                                    "signature"]
    assert render(ROWS, "table") == (
        "run  variant  state      procs  tok/s  why\n"
        "r1   a        succeeded      2   1234  -\n"
        "r2   b        failed         4      -  OOM\n")


def test_a_cell_and_the_exported_row():
    assert [fmt(None, ".2f"), fmt("", ""), fmt(0.4123, ".1%"), fmt("x", "")] == ["-", "-", "41.2%", "x"]
    assert list(exported(ROWS[0])) == [c.key for c in COLUMNS]
    assert exported(ROWS[0])["tokens_per_s"] == 1234.4 and exported(ROWS[1])["mfu"] is None
