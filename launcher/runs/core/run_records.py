"""What the run store says of a run: its summary (one row of the list), its nodes, and its whole record
(state changes, nodes, folder, read offsets)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from launcher.events import NodeState, RunState


@dataclass(frozen=True)
class RunSummary:
    run_id: str
    experiment: str
    state: RunState
    attempt: int
    num_nodes: int
    hosts: tuple[str, ...]
    started_at: float | None
    ended_at: float | None
    last_loss: float | None
    best_eval_loss: float | None
    step: int | None
    max_steps: int | None
    workload_path: str | None
    output_dir: str | None = None
    detail: str = ""
    """What the run's last state change said (for a failed run: why)."""

    @property
    def duration_s(self) -> float | None:
        if self.started_at is None:
            return None
        return (self.ended_at or time.time()) - self.started_at


@dataclass(frozen=True)
class NodeRecord:
    node_rank: int
    host: str
    node_dir: str
    state: NodeState
    exit_code: int | None
    detail: str


@dataclass(frozen=True)
class RunRecord:
    summary: RunSummary
    transitions: list[tuple[float, RunState, int, str]]
    nodes: list[NodeRecord]
    directory: Path
    launcher_pid: int | None = None
    offsets: dict[tuple[int, str], int] = field(default_factory=dict)
