"""A comparison as text for a report: an aligned table, CSV, Markdown or JSON (``sweep show``,
``compare``). CSV and JSON carry every number as measured; the table and Markdown round them."""

from __future__ import annotations

import csv
import io
import json
from typing import Literal

from launcher.runs.read.comparison import COLUMNS, Column, RunStats, fmt

Format = Literal["table", "csv", "md", "json"]
FORMATS: tuple[str, ...] = ("table", "csv", "md", "json")


def shown_columns(rows: list[RunStats]) -> list[Column]:
    """The columns with at least one value (a CPU sweep has no GPU memory, no MFU)."""
    return [c for c in COLUMNS if any(getattr(r, c.key) not in (None, "") for r in rows) or c.key == "run_id"]


def render(rows: list[RunStats], form: Format) -> str:
    if form == "json":
        return json.dumps([{**r.row(), "losses": [list(p) for p in r.losses]} for r in rows], indent=2) + "\n"
    if form == "csv":
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow([c.key for c in COLUMNS])
        for r in rows:
            writer.writerow(["" if v is None else v for v in r.row().values()])
        return out.getvalue()
    columns = shown_columns(rows)
    cells = [[fmt(getattr(r, c.key), c.spec) for c in columns] for r in rows]
    if form == "md":
        head = "| " + " | ".join(c.label for c in columns) + " |"
        rule = "|" + "|".join("---:" if c.spec else "---" for c in columns) + "|"
        body = ["| " + " | ".join(x.replace("|", "\\|") for x in row) + " |" for row in cells]
        return "\n".join([head, rule, *body]) + "\n"
    widths = [max(len(c.label), *(len(row[i]) for row in cells)) if cells else len(c.label)
              for i, c in enumerate(columns)]
    lines = ["  ".join(c.label.rjust(w) if c.spec else c.label.ljust(w) for c, w in zip(columns, widths, strict=True))]
    for row in cells:
        lines.append("  ".join(x.rjust(w) if c.spec else x.ljust(w)
                               for x, c, w in zip(row, columns, widths, strict=True)).rstrip())
    return "\n".join(lines) + "\n"
