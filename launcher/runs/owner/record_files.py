"""How the owner writes and reads its record's files byte by byte, so that a write the disk refuses
leaves no torn record: whole lines or nothing, a line ended, and the tails read
back (the bytes after the last newline, the last bytes of a log)."""

from __future__ import annotations

from pathlib import Path

from launcher.runs.core.layout import file_size


def tail_after_newline(path: Path) -> bytes:
    """The bytes after the last newline of ``path`` (a line still being written)."""
    size = file_size(path)
    if not size:
        return b""
    with open(path, "rb") as f:
        f.seek(max(0, size - (1 << 20)))
        data = f.read()
    return data[data.rfind(b"\n") + 1:]


def tail_text(path: Path, max_bytes: int) -> str:
    size = file_size(path)
    with open(path, "rb") as f:
        f.seek(max(0, size - max_bytes))
        return f.read().decode("utf-8", "replace")


def end_line(path: Path) -> None:
    """``path`` ends with a newline (nothing to do when it is empty or ends with one)."""
    size = file_size(path)
    if not size:
        return
    with open(path, "rb+") as f:
        f.seek(size - 1)
        if f.read(1) != b"\n":
            f.write(b"\n")


def append_lines(path: Path, lines: list[str]) -> None:
    """Whole lines or nothing: a write the disk refused halfway is undone, so a later retry leaves no
    torn line behind."""
    with open(path, "ab") as f:
        size = f.tell()
        try:
            f.write("".join(x + "\n" for x in lines).encode())
            f.flush()
        except OSError:
            f.truncate(size)
            raise
