"""What a stop makes a job print, folded away in the panes: a cancelled run reads as cancelled, not crashed.

SIGTERM to torchrun makes it log that it got the signal and is closing its workers, then raise and print a
chained traceback that ends in ``SignalException: Process N got signal: 15``; workers print their own
``KeyboardInterrupt`` or ``SignalException`` tracebacks. Once a run is being stopped, each node's lines go
through a :class:`StopOutput`: those lines are counted and left out, everything else is shown as it came
(a checkpoint the trainer saves on the way out, an error that is not the stop's). The panes then end with
one line that says the run was cancelled and how much was folded; the node's log keeps every line. Pure."""

from __future__ import annotations

import re
from collections.abc import Iterable

TRACEBACK = "Traceback (most recent call last):"
_CONNECTORS = frozenset({"During handling of the above exception, another exception occurred:",
                         "The above exception was the direct cause of the following exception:"})
_STOP_EXCEPTION = re.compile(r"^(?:[\w.]+\.)?(?:SignalException|KeyboardInterrupt)\b|\bgot signal: ?\d+\s*$")
"""The last line of a traceback a stop causes (torchrun's ``SignalException``, a worker's ``KeyboardInterrupt``)."""
_TORCHRUN_STOP = re.compile(r"torch/distributed/elastic/\S*\] .*(?:death signal|closing signal|via signal|"
                            r"shutting down workers)")
"""torchrun's own log lines about the signal and the workers it closes."""


class StopOutput:
    """One node's lines once its run is being stopped: :meth:`feed` returns what to show (a traceback is
    held until its last line says whether the stop caused it), :meth:`end` what is left at the run's end;
    :attr:`folded` counts the lines left out."""

    def __init__(self) -> None:
        self.block: list[str] = []
        """A traceback (or a chain of them) being read."""
        self.after: list[str] = []
        """Blank lines and "During handling ..." after a traceback's last line, until it is known whether
        another traceback of the chain follows."""
        self.in_traceback = False
        self.stop_chain = False
        """The block's last exception is one a stop causes."""
        self.folded = 0

    def feed(self, lines: Iterable[str]) -> list[str]:
        out: list[str] = []
        for line in lines:
            out += self._one(line)
        return out

    def end(self) -> list[str]:
        """What is held at the run's end: a stop's traceback is folded, anything else shown."""
        return self._close() if self.block else []

    def _one(self, line: str) -> list[str]:
        if self.block:
            if self.in_traceback:
                self.block.append(line)
                if not line.startswith((" ", "\t")) and line.strip():  # the exception: the traceback's end
                    self.in_traceback = False
                    self.stop_chain = bool(_STOP_EXCEPTION.search(line))
                return []
            if not line.strip() or line.strip() in _CONNECTORS:
                self.after.append(line)
                return []
            if line.startswith(TRACEBACK):  # the next traceback of a chain
                self.block += [*self.after, line]
                self.after, self.in_traceback, self.stop_chain = [], True, False
                return []
            return self._close() + self._one(line)
        if line.startswith(TRACEBACK):
            self.block, self.in_traceback, self.stop_chain = [line], True, False
            return []
        if _TORCHRUN_STOP.search(line):
            self.folded += 1
            return []
        return [line]

    def _close(self) -> list[str]:
        held, after = self.block, self.after
        stop = self.stop_chain and not self.in_traceback
        self.block, self.after, self.in_traceback, self.stop_chain = [], [], False, False
        if stop:
            self.folded += len(held) + len(after)
            return []
        return held + after


def stopped_line(state: str, folded: int, run_id: str, node_rank: int | None) -> str:
    """The one line a stopped run's pane ends with: that it was cancelled (or stopped at its time limit) and
    what was folded, with where every line is."""
    what = "run cancelled" if state == "cancelled" else "run stopped at its time limit (timeout_minutes)"
    if not folded:
        return f"── {what}"
    where = f"fsdp-tui logs {run_id}" + (f" --node {node_rank}" if node_rank is not None else "")
    noun = "line" if folded == 1 else "lines"
    return f"── {what}; {folded} {noun} of the stop's output (torchrun's tracebacks) folded: {where} has them"
