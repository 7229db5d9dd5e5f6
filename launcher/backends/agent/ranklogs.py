"""Each rank's output in a file of its own, from the node's one stream of output.

torchrun tees every worker's lines to its own output with a prefix the launcher chose
(``TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE``, an escape sequence naming the rank). The supervisor passes each
line through :meth:`RankFiles.split`: the prefix comes off (``node.log`` reads as the job wrote it) and each
rank's part goes to ``rank-<R>.log`` in the run directory, which ``fsdp-tui logs RUN --rank R`` and the
app's rank picker read. Two ranks' partial lines can share one line of torchrun's output: each part goes
to its own rank's file."""

from __future__ import annotations

import io
import os
import re

NAME = "rank-{rank}.log"


def name_of(rank: int) -> str:
    return NAME.format(rank=rank)


class RankFiles:
    """The open ``rank-<R>.log`` files of one attempt (appended to: a retry adds to them)."""

    def __init__(self, node_dir: str, template: str, marker: bytes = b"") -> None:
        head, _, tail = template.partition("${rank}")
        self.pattern = re.compile(re.escape(head.encode()) + rb"(\d{1,7})" + re.escape(tail.encode()))
        self.first = head.encode()[:2]
        self.node_dir = node_dir
        self.marker = marker
        """Written first into each file this attempt opens (the attempt's line, as in ``node.log``)."""
        self.files: dict[int, io.FileIO] = {}

    def split(self, line: bytes) -> bytes:
        """``line`` without the rank prefixes; each rank's part appended to its file. ``OSError`` on a full
        disk, as the log's own write."""
        if self.first not in line:
            return line
        found = list(self.pattern.finditer(line))
        if not found:
            return line
        kept = [line[:found[0].start()]]
        for tag, after in zip(found, [*found[1:], None], strict=True):
            part = line[tag.end():after.start() if after is not None else len(line)]
            kept.append(part)
            self._file(int(tag.group(1))).write(part)
        return b"".join(kept)

    def _file(self, rank: int):
        f = self.files.get(rank)
        if f is None:
            f = self.files[rank] = open(os.path.join(self.node_dir, name_of(rank)), "ab", buffering=0)  # noqa: SIM115
            if self.marker:
                f.write(self.marker)
        return f

    def close(self) -> None:
        for f in self.files.values():
            try:
                f.close()
            except OSError:
                pass
