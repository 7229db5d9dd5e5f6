"""Runs side by side as text: the columns a comparison shows, one cell, and the whole comparison as an aligned
table, CSV, Markdown or JSON (``sweep show``, ``compare``, the app's comparison table). CSV and JSON carry
every number as measured; the table and Markdown round them."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from launcher.api.runs import RunStats

Format = Literal["table", "csv", "md", "json"]
FORMATS: tuple[str, ...] = ("table", "csv", "md", "json")


@dataclass(frozen=True)
class Column:
    key: str
    label: str
    spec: str = ""
    """Format of a number; empty for text."""
    bars: bool = False
    """Drawn with inline bars in the sweep view."""


COLUMNS: tuple[Column, ...] = (
    Column("run_id", "run"), Column("label", "variant"), Column("state", "state"),
    Column("world_size", "procs", "d"), Column("tokens_per_s", "tok/s", ".0f", bars=True),
    Column("mfu", "MFU", ".1%"), Column("step_time_s", "step s", ".3f"),
    Column("peak_gib", "peak GiB", ".3f", bars=True), Column("peak_spread_gib", "spread", ".3f"),
    Column("gpu_allocated_gib", "alloc GiB", ".2f"), Column("gpu_reserved_gib", "resv GiB", ".2f"),
    Column("rss_gib", "RSS GiB", ".3f"), Column("final_loss", "loss", ".4f"), Column("best_loss", "best", ".4f"),
    Column("eval_loss", "eval", ".4f"), Column("wall_s", "wall s", ".1f"),
    Column("usage_h", "GPU/CPU-h", ".3f"), Column("speedup", "speed-up", ".2f"),
    Column("efficiency", "eff.", ".0%"), Column("signature", "why"),
)
"""Every column of a comparison, in order: what CSV and JSON export, and what the table shows of them."""


def fmt(value: Any, spec: str) -> str:
    """One cell: ``value`` in its column's number format (``spec``), ``-`` where there is none."""
    if value is None or value == "":
        return "-"
    return format(value, spec) if spec else str(value)


def exported(stats: RunStats) -> dict[str, Any]:
    """The exported columns of one run (every number as measured, unrounded)."""
    return {c.key: getattr(stats, c.key) for c in COLUMNS}


def shown_columns(rows: list[RunStats]) -> list[Column]:
    """The columns with at least one value (a CPU sweep has no GPU memory, no MFU)."""
    return [c for c in COLUMNS if any(getattr(r, c.key) not in (None, "") for r in rows) or c.key == "run_id"]


def render(rows: list[RunStats], form: Format) -> str:
    """The runs as ``form``: an aligned table, CSV, Markdown or JSON (with each run's loss curve)."""
    if form == "json":
        return json.dumps([{**exported(r), "losses": [list(p) for p in r.losses]} for r in rows], indent=2) + "\n"
    if form == "csv":
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow([c.key for c in COLUMNS])
        for r in rows:
            writer.writerow(["" if v is None else v for v in exported(r).values()])
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
