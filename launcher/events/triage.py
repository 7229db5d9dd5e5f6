"""Why a run ended as it did (:class:`TriageReport`), as its owner found it: kept in the run's ``triage.json``
and carried by the ``RunFinished`` event; encoded by :meth:`TriageReport.to_dict`, decoded once by
:meth:`TriageReport.from_wire`. How a triage is found from the nodes' logs: :mod:`launcher.runs.core.triage`."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from launcher.untrusted import sanitize_line


@dataclass(frozen=True)
class TriageReport:
    """Why a run ended as it did, as the owner found it: the first failing node and rank, exit code, the
    first error signature and its line. Kept in the run's ``triage.json`` (written and read only through
    :mod:`launcher.runs.core.layout`), carried by ``RunFinished``, shown by ``show``, the app, the
    comparison and the notifications."""

    node_rank: int | None = None
    rank: int | None = None
    exit_code: int | None = None
    signature: str | None = None
    """``oom``, ``nccl_timeout``, ``python_error``, ... (:data:`launcher.runs.core.triage.SIGNATURES`), or
    what the launcher saw itself: ``lost``, ``stalled``, ``idle``, ``time_limit``, ``launch``, a scheduler's
    cause."""
    line_no: int | None = None
    excerpt: str = ""
    said: str = ""
    """The summary in the launcher's own words, when it saw the cause itself (a node lost, a stall, the
    scheduler); empty: :attr:`summary` is made from the fields."""
    consequence: str = ""
    """What the logs blamed when another node was the root cause (a survivor's ``Connection reset``)."""
    scheduler: str = ""
    """What the scheduler said of the node (SLURM), beside the node's own log line."""
    slow_ranks: tuple[str, ...] = ()
    """Ranks far slower than the others in the newest steps, in words (added when the run is read)."""
    odd_nodes: tuple[str, ...] = ()
    """Nodes far from the others, in words (added when the run is read)."""

    @property
    def summary(self) -> str:
        if self.said:
            return self.said
        where = f"node {self.node_rank}" if self.node_rank is not None else "unknown node"
        if self.rank is not None:
            where += f" rank {self.rank}"
        what = self.signature or "exited"
        code = f", exit code {self.exit_code}" if self.exit_code is not None else ""
        return f"{where}: {what}{code}" + (f": {self.excerpt}" if self.excerpt else "")

    def to_dict(self) -> dict[str, Any]:
        """The JSON of ``triage.json`` and of ``show --json``: the fields and ``summary``; the extras only
        when set."""
        data: dict[str, Any] = {"node_rank": self.node_rank, "rank": self.rank, "exit_code": self.exit_code,
                                "signature": self.signature, "line_no": self.line_no, "excerpt": self.excerpt,
                                "summary": self.summary}
        for key in ("consequence", "scheduler"):
            if getattr(self, key):
                data[key] = getattr(self, key)
        for key in ("slow_ranks", "odd_nodes"):
            if getattr(self, key):
                data[key] = list(getattr(self, key))
        return data

    @classmethod
    def from_wire(cls, data: object) -> TriageReport | None:
        """A triage as kept in ``triage.json`` or sent in an event, decoded once: fields of the wrong type
        are left out, text comes out printable on one line; ``None`` for what is no triage at all."""
        if not isinstance(data, dict):
            return None

        def num(key: str) -> int | None:
            value = data.get(key)
            return value if type(value) is int else None

        def text(key: str) -> str:
            value = data.get(key)
            return sanitize_line(value) if isinstance(value, str) else ""

        def lines(key: str) -> tuple[str, ...]:
            value = data.get(key)
            return tuple(sanitize_line(v) for v in value if isinstance(v, str)) if isinstance(value, list) else ()

        report = cls(num("node_rank"), num("rank"), num("exit_code"), text("signature") or None, num("line_no"),
                     text("excerpt"), "", text("consequence"), text("scheduler"), lines("slow_ranks"),
                     lines("odd_nodes"))
        said = text("summary")  # kept only where it is not what the fields say anyway
        return replace(report, said=said) if said and said != report.summary else report
