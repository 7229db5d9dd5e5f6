"""One vocabulary in every message: a count and its noun agree (``1 node``, ``2 nodes``: never ``node(s)``
or ``1 nodes``), and a node with no output is ``quiet`` in the app, the CLI and the docs alike.

The messages are found where they are written: every f-string of the operator's side (``launcher/``, ``tui/``)
that puts a count before a noun, and every page of the docs."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from launcher.words import (
    fmt_bandwidth,
    fmt_bytes,
    fmt_duration,
    fmt_message_size,
    node_at,
    node_name,
    plural,
    plural_of,
)

ROOT = Path(__file__).resolve().parents[2]
NOUNS = ("node", "run", "rank", "file", "line", "step", "checkpoint", "variant", "process", "GPU", "error", "warning",
         "problem", "sweep", "host", "attempt", "folder", "entry", "byte", "time", "test", "value", "secret", "job",
         "row", "token", "replica", "resubmission", "export", "dump", "accelerator", "link")
ANY_NOUN = "|".join(NOUNS)
COUNTED = re.compile(rf"^ ({ANY_NOUN})(s|es|ies)\b(?!/)")
"""A literal that starts with a plural noun (``" nodes x"``), not a rate (``" lines/s"``)."""
BY_HAND = re.compile(r"\w\((s|es|ies)\)")
NOT_COUNTS = {
    ("launcher/nettest/figures.py", "name"): "a scope's name before the word 'ranks' in an error about them",
}
"""Formatted values before a plural noun that are not counts, with why."""


def _messages() -> list[tuple[str, int, ast.JoinedStr]]:
    out = []
    for package in ("launcher", "tui"):
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = str(path.relative_to(ROOT))
            for node in ast.walk(ast.parse(path.read_text("utf-8"))):
                if isinstance(node, ast.JoinedStr):
                    out.append((rel, node.lineno, node))
    return out


def test_no_message_counts_by_hand():
    wrong = []
    for rel, line, node in _messages():
        parts = node.values
        for before, after in zip(parts, parts[1:], strict=False):
            if (isinstance(before, ast.FormattedValue) and isinstance(after, ast.Constant)
                    and isinstance(after.value, str) and COUNTED.match(after.value)
                    and (rel, ast.unparse(before.value)) not in NOT_COUNTS):
                wrong.append(f"{rel}:{line}: {{{ast.unparse(before.value)}}}{after.value[:20]!r}: use plural()")
        for part in parts:
            if isinstance(part, ast.Constant) and isinstance(part.value, str) and BY_HAND.search(part.value):
                wrong.append(f"{rel}:{line}: {part.value[:40]!r}: use plural()")
    assert not wrong, "\n".join(wrong)


def test_the_docs_count_as_the_messages_do():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    wrong = [f"{p.name}:{i}: {line.strip()[:80]}" for p in pages
             for i, line in enumerate(p.read_text("utf-8").splitlines(), 1)
             if BY_HAND.search(line.replace("http(s)", "")) or re.search(rf"\b1 ({ANY_NOUN})s\b", line)]
    assert not wrong, "\n".join(wrong)


def test_a_node_without_output_is_quiet_everywhere():
    """The overview's column, its mark, ``show --nodes`` and the docs use one word."""
    from launcher.runs.read.nodes import THRESHOLDS
    from tui.widgets.node_overview import COLUMNS

    assert "quiet" in [c.title for c in COLUMNS] and "quiet_min_s" in THRESHOLDS
    said = []
    for package in ("launcher/runs", "launcher/cli", "tui"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text("utf-8"))):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and re.search(r"\bsilent\b", node.value):
                    said.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value[:60]!r}")
    node_silent = re.compile(r"silent nodes?\b|nodes? (?:is |was |went |stays? |looks? )?silent|\| silent \||`silent`")
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        said += [f"{page.name}:{i}" for i, line in enumerate(page.read_text("utf-8").splitlines(), 1)
                 if node_silent.search(line)]
    assert not said, "one word for a node with no output: quiet\n" + "\n".join(said)


@pytest.mark.parametrize("count, noun, said", [
    (1, "node", "1 node"), (2, "node", "2 nodes"), (0, "run", "0 runs"), (1, "process", "1 process"),
    (8, "process", "8 processes"), (3, "entry", "3 entries"), (2, "GPU", "2 GPUs"), (12000, "line", "12,000 lines"),
    (2, "run folder", "2 run folders"), (2, "day", "2 days"), (2, "match", "2 matches"),
])
def test_plural(count, noun, said):
    assert plural(count, noun) == said
    assert plural_of("Xid line") == "Xid lines"


@pytest.mark.parametrize("said, expected", [
    (fmt_duration(None), "-"), (fmt_duration(59.9), "0:59"), (fmt_duration(245), "4:05"),
    (fmt_duration(3909), "1:05:09"),
    (fmt_bytes(512), "512 B"), (fmt_bytes(12 << 10), "12.0 KiB"), (fmt_bytes(3 << 19), "1.5 MiB"),
    (fmt_bytes(5 << 30), "5.0 GiB"),
    (fmt_bandwidth(12.5e9), "12.50 GB/s"), (fmt_bandwidth(1e9), "1.00 GB/s"), (fmt_bandwidth(28e6), "28.0 MB/s"),
    (fmt_message_size(512), "0.5 KiB"), (fmt_message_size(64 << 20), "64 MiB"), (fmt_message_size(3 << 29), "1.5 GiB"),
    (node_name(1, ("h0", "h1")), "node 1 (h1)"), (node_name(5, ("h0",)), "node 5"), (node_name(-1, ("h0",)), "node -1"),
])
def test_quantities_read_the_same_everywhere(said, expected):
    assert said == expected


def test_no_message_names_a_node_by_hand():
    """``node 1 (h1)`` is written by :func:`launcher.words.node_at` alone: an f-string with ``node {rank} (``
    followed by a value and ``)`` elsewhere is a second copy of the rule."""
    wrong = []
    for rel, line, node in _messages():
        if rel == "launcher/words.py":
            continue
        parts = node.values
        for a, b, c, d in zip(parts, parts[1:], parts[2:], parts[3:], strict=False):
            if (isinstance(a, ast.Constant) and str(a.value).endswith("node ") and isinstance(b, ast.FormattedValue)
                    and isinstance(c, ast.Constant) and c.value == " (" and isinstance(d, ast.FormattedValue)):
                wrong.append(f"{rel}:{line}: use node_at()")
    assert not wrong, "\n".join(wrong)


def test_a_node_reads_by_its_rank_and_host():
    assert node_at(1, "h1") == "node 1 (h1)" == node_name(1, ("h0", "h1"))
    assert node_name(5, ("h0",)) == "node 5"
