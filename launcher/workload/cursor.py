"""Where the cursor is in a workload being typed: the dotted key path of a line, from indentation
(the text may not parse yet while it is being written)."""

from __future__ import annotations


def key_path_at(text: str, row: int) -> tuple[str, ...]:
    """Dotted key path of the mapping key on line ``row`` (0-based)."""
    lines = text.splitlines()
    if row >= len(lines):
        return ()
    path: list[tuple[int, str]] = []
    for line in lines[: row + 1]:
        stripped = line.lstrip()
        if not stripped or stripped.startswith("#") or ":" not in stripped:
            continue
        indent = len(line) - len(stripped)
        key = stripped.split(":", 1)[0].lstrip("- ").strip().strip("'\"")
        while path and path[-1][0] >= indent:
            path.pop()
        path.append((indent, key))
    return tuple(k for _, k in path)
