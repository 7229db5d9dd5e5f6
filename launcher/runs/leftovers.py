"""Lost nodes, cleaned once they are back. A node lost during a run could not be told to stop: its job may
still be running there. The next command that looks at runs (``runs``, ``show``, ``logs``, ``run``,
``doctor``) or the app tries each such node again, briefly; once it answers, that run's processes there are
stopped and swept, and the user is told once. A node still away is tried again 10 s later at the earliest
(each try costs a command up to ``connect_timeout_s`` of 5 s)."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path

from launcher.events import NodeState, RunState
from launcher.paths import run_dir
from launcher.runs.core.housekeeping import SweptNode, read_swept, save_swept
from launcher.runs.core.store import RunStore
from launcher.words import plural

RETRY_S = 10.0
QUICK_SSH = {"connect_timeout_s": 5.0, "lost_after_s": 5.0}
"""A sweep is an errand, not a run: a node still away is given up on quickly."""
GRACE_S = 5.0


@dataclass(frozen=True)
class NodeReaped:
    """A node lost during a run answered again: the run's processes there were stopped and swept."""

    run_id: str
    node: str
    """The node as its backend names it (``node 1 (gpu-b)``)."""
    words: str
    """What was found there, as the sweep adds it to the node's recorded detail."""

    def line(self) -> str:
        """What the user is told once: the run, the node, and the words recorded in its detail."""
        return f"run {self.run_id}, {self.node} (lost during the run): {self.words}"


@dataclass(frozen=True)
class SweepFailed:
    """A run's lost nodes could not be swept (tried again by a later command)."""

    run_id: str
    error: str
    """The error's type and words (``OSError: ...``)."""

    def line(self) -> str:
        """What the user is told: the run, and why its lost nodes were not swept."""
        return f"run {self.run_id}: could not sweep its lost nodes: {self.error}"


@dataclass(frozen=True)
class JobMayLive:
    """A SLURM job of the run may still be running: a relaunch (or resume) now would start a second one
    beside it."""

    run_id: str
    state: RunState
    """The run's state as recorded."""
    login_lost: bool
    """The run ended, but its login node was lost before its job was stopped (a later command stops it once
    the login answers); otherwise the run has not ended."""


def due(home: Path, now: float | None = None) -> list[tuple[str, Path, list[int]]]:
    """Finished runs with lost nodes not swept yet (and not tried in the last ``RETRY_S``)."""
    now = time.time() if now is None else now
    if not (Path(home) / "runs.db").exists():
        return []  # no run yet: nothing to sweep, and no store to create
    out = []
    for run_id, lost in RunStore(home).lost_nodes(limit=200).items():
        directory = run_dir(Path(home), run_id)
        seen = read_swept(directory)
        ranks = [r for r in lost if not (node := seen.get(r, SweptNode())).done
                 and now - (node.tried_at or 0.0) >= RETRY_S]
        if ranks:
            out.append((run_id, directory, ranks))
    return out


async def _sweep_run(home: Path, run_id: str, directory: Path, ranks: list[int]) -> list[NodeReaped]:
    from launcher.backends.registry import backend_for
    from launcher.runs.core.layout import load_plan  # the workload's models: only when a node is swept

    plan = load_plan(directory)
    ssh = plan.workload.ssh.model_copy(update=QUICK_SSH)
    plan = dataclasses.replace(plan, workload=plan.workload.model_copy(update={"ssh": ssh}))
    backend = backend_for(plan)
    seen = read_swept(directory)
    said: list[NodeReaped] = []
    caught: dict[int, int | str] = {}
    try:
        outcomes = await backend.stop(GRACE_S, ranks=tuple(ranks))
        for out in outcomes:
            if not out.error:
                caught[out.rank] = await _catch_up(backend, directory, out.rank)
    finally:
        await backend.close()
    store = RunStore(home)
    for out in outcomes:
        seen[out.rank] = dataclasses.replace(seen.get(out.rank, SweptNode()), tried_at=time.time())
        if out.error:
            continue  # still away: tried again later, quietly
        if out.left:
            words = f"processes still alive after SIGKILL: {list(out.left)}"
        elif out.found:
            words = "it is back; the run's processes still running there were stopped"
        else:
            words = "it is back; nothing of the run was running there"
        got = caught.get(out.rank, 0)
        if isinstance(got, str):
            words += f"; what it logged while away could not be read: {got}"
        elif got:
            words += f"; the {plural(got, 'byte')} it logged while away were added to the record"
        seen[out.rank] = dataclasses.replace(seen[out.rank], done=True, said=words)
        record = store.get_run(run_id)
        before = next((n.detail for n in record.nodes if n.node_rank == out.rank), "") if record else ""
        store.set_node(run_id, out.rank, NodeState.LOST, detail=f"{before}; {words}" if before else words)
        said.append(NodeReaped(run_id, out.label, words))
    save_swept(directory, seen)
    return said


async def _catch_up(backend, directory: Path, rank: int) -> int | str:
    """The node's log (and node 0's metrics) past the record's copies, appended to them, so each copy
    equals the node's file byte for byte again; how many log bytes came, or why none could."""
    import asyncio

    from launcher.backends.base import NodeError
    from launcher.runs.core.layout import METRICS, SAMPLES, mirror_path
    from launcher.runs.owner.settings import READ_CHUNK

    streams = [("log", mirror_path(directory, rank))] + (
        [("metrics", directory / METRICS), ("samples", directory / SAMPLES)] if rank == 0 else [])
    got = 0
    try:
        for stream, path in streams:
            while True:
                offset = path.stat().st_size if path.exists() else 0
                chunk = await backend.read(rank, stream, offset, READ_CHUNK)
                if chunk:
                    await asyncio.to_thread(_append, path, chunk)
                    got += len(chunk) if stream == "log" else 0
                if len(chunk) < READ_CHUNK:
                    break
    except (NodeError, OSError) as err:
        return str(err)
    return got


def _append(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


async def sweep_lost(home: Path) -> list[NodeReaped | SweepFailed]:
    """Try every lost node that is due; the ones that answered (to tell the user once), and the runs whose
    sweep failed."""
    import asyncio

    work = await asyncio.to_thread(due, home)
    results = await asyncio.gather(*(_sweep_run(home, *job) for job in work), return_exceptions=True)
    said: list[NodeReaped | SweepFailed] = []
    for (run_id, _directory, _ranks), result in zip(work, results, strict=True):
        if isinstance(result, BaseException):
            said.append(SweepFailed(run_id, f"{type(result).__name__}: {result}"))
        else:
            said += result
    return said


def sweep_lost_now(home: Path) -> list[NodeReaped | SweepFailed]:
    """:func:`sweep_lost` from synchronous code (the commands, the app's thread workers)."""
    if not due(home):
        return []  # the usual case: no event loop, not even asyncio loaded
    import asyncio

    return asyncio.run(sweep_lost(home))


def job_may_live(record) -> JobMayLive | None:
    """The SLURM job that a relaunch now would start a second one beside (``None``: it would not). A SLURM
    run that has not ended, or one whose login node was lost before its job was stopped, may have its job
    running."""
    if record is None:
        return None
    try:
        from launcher.runs.core.layout import load_plan

        slurm = load_plan(record.directory).workload.compute.slurm
    except (OSError, ValueError):
        return None  # no plan recorded (a run recorded before plans were kept): not a SLURM job of ours
    if slurm is None:
        return None
    summary = record.summary
    if not summary.state.is_final:
        return JobMayLive(summary.run_id, summary.state, login_lost=False)
    swept = read_swept(record.directory)
    if any(n.state == NodeState.LOST and not swept.get(n.node_rank, SweptNode()).done for n in record.nodes):
        return JobMayLive(summary.run_id, summary.state, login_lost=True)
    return None
