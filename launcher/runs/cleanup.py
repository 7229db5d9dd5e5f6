"""A run's files removed from its nodes: each node's run directory (code, parameters, its log there, and
the outputs a relative ``output_dir`` put under it), over the run's own backend, and the run's folder on
this machine. ``fsdp-tui clean`` keeps the run's record (its logs, metrics and config here); ``fsdp-tui rm
--files`` and the app's ``d`` forget it too, once every node said its folder is gone.

A fixed ``output_dir`` (outside the run's folders, maybe shared by the workload's runs) keeps what is not
the run's: ``clean`` removes the run's own checkpoints there, where their whole copies are held, and
nothing of another run (:mod:`trainer.wire.ckpt_owner`); the folder itself, its exports and the other
runs' checkpoints stay, and the report says so with the folder as the node sees it. The dependency venvs
every run with the same requirements reuses stay too."""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from launcher.backends.base import RemovedFiles
from launcher.runs.core.housekeeping import Cleaned, read_cleaned, save_cleaned
from launcher.runs.core.layout import load_plan
from launcher.runs.core.store import RunStore
from launcher.words import node_at, plural
from launcher.workload.load import LOCAL_NODES_DIR

QUICK_SSH = {"connect_timeout_s": 10.0, "lost_after_s": 10.0}
"""An errand, not a run: a node that does not answer is reported, not waited for."""


@dataclass(frozen=True)
class CleanReport:
    run_id: str
    nodes: tuple[RemovedFiles, ...] = ()
    stays: tuple[str, ...] = field(default=())
    """What is the run's but outside its folders, in words (an absolute output_dir)."""

    @property
    def ok(self) -> bool:
        return all(not n.error for n in self.nodes)

    def lines(self) -> list[str]:
        from launcher.words import fmt_bytes

        out = []
        for n in self.nodes:
            if n.error:
                out.append(f"{n.label}: not removed: {n.error}")
            elif n.files:
                out.append(f"{n.label}: removed {n.path} ({fmt_bytes(n.bytes)}, {_files(n.files)})")
            else:
                out.append(f"{n.label}: nothing left in {n.path}")
        return out + list(self.stays)


def _files(n: int) -> str:
    return plural(n, "file")


async def remove_run_files(home: Path, run_id: str) -> CleanReport:
    """Remove ``run_id``'s directory on every node and its folder here; ``ValueError`` for a live run."""
    from launcher.backends.registry import backend_for

    store = RunStore(home)
    record = store.get_run(run_id)
    if record is None:
        raise LookupError(f"no run '{run_id}'")
    if not record.summary.state.is_final:
        raise ValueError(f"run {run_id} is {record.summary.state.value}: cancel it first (fsdp-tui cancel {run_id})")
    here = Path(home) / LOCAL_NODES_DIR / run_id
    try:
        plan = load_plan(record.directory)
    except (OSError, ValueError, KeyError):
        plan = None  # recorded before plans were kept: only its folder here is known
    nodes: list[RemovedFiles] = []
    stays: list[str] = []
    if plan is not None:
        ssh = plan.workload.ssh.model_copy(update=QUICK_SSH)
        plan = dataclasses.replace(plan, workload=plan.workload.model_copy(update={"ssh": ssh}))
        backend = backend_for(plan)
        try:
            nodes = list(await asyncio.gather(*(backend.remove_files(n.node_rank) for n in plan.nodes)))
        finally:
            await backend.close()
        stays += await _own_checkpoints_removed(home, run_id, plan)
    if here.is_dir():  # what a node's agent did not remove (a run recorded before plans), or nothing at all
        size = await asyncio.to_thread(_size, here)
        await asyncio.to_thread(shutil.rmtree, here, True)
        if size[1]:
            nodes.append(RemovedFiles(-1, "this machine", str(here), size[0], size[1]))
    report = CleanReport(run_id, tuple(nodes), tuple(stays))
    save_cleaned(record.directory, Cleaned(time.time(), tuple(report.lines())))
    return report


async def _own_checkpoints_removed(home: Path, run_id: str, plan) -> list[str]:
    """The run's own checkpoints in an ``output_dir`` outside its folders, removed where their whole copies
    are (the ownership rule keeps every other run's); what stays, in words."""
    from launcher.runs.core.checkpoints import NoOutputDir, remove_own_checkpoints
    from launcher.runs.core.output_dirs import node_view
    from trainer.wire.ckpt_owner import inside_run_folder

    output_dir = plan.output_dir if plan.uses_builtin_trainer else None
    if output_dir is None or inside_run_folder(output_dir):
        return []  # a relative output_dir is inside the run's folders: gone with them
    where = f"{node_view(output_dir, plan.workload.env_variables, run_id)} on {plan.nodes[0].host_display}"
    try:
        removed, kept, error = await remove_own_checkpoints(home, run_id)
    except (NoOutputDir, LookupError, OSError, ValueError) as err:
        removed, kept, error = 0, 0, str(err)
    out = []
    if error:
        out.append(f"its checkpoints in {where} could not be removed: {error}")
    elif removed:
        out.append(f"removed its {plural(removed, 'checkpoint')} from {where}")
    others = f"; {plural(kept, 'checkpoint')} of other runs stay there" if kept else ""
    out.append(f"its output_dir stays: {where} (outside the run's folder: its exports, if any{others})")
    return out


def _size(folder: Path) -> tuple[int, int]:
    import os

    total = count = 0
    for root, _dirs, names in os.walk(folder):
        for name in names:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
                count += 1
            except OSError:
                pass
    return total, count


def cleaned(directory: Path) -> Cleaned | None:
    """When the run's files were removed from its nodes, and what each said (``None``: never)."""
    return read_cleaned(directory)


@dataclass(frozen=True)
class Left:
    """A folder of a run that stays where it is once its record is forgotten (``rm`` without ``--files``)."""

    where: str
    """``here``, or ``node 1 (gpu-b)``."""
    path: str
    rank: int | None
    """The node whose own ``ssh`` removes it; ``None``: this machine."""
    host: str = ""
    """The node's host as the record names it."""
    size: str = ""
    """Its size, where it is measured (this machine's)."""


def files_left(home: Path, run_id: str) -> list[Left]:
    """Where a run's files are, and stay once its record is forgotten; empty when its folders were removed
    already (or it has none, or this data dir does not know the run). The door adds the command that
    removes each, which needs no record (:meth:`launcher.api.run_files.RunFiles.left_behind`)."""
    from launcher.words import fmt_bytes

    record = RunStore(home).get_run(run_id)
    if record is None or cleaned(record.directory) is not None:
        return []
    out = []
    here = Path(home) / LOCAL_NODES_DIR / run_id
    if here.is_dir():
        out.append(Left("here", str(here), None, size=fmt_bytes(folder_bytes(here))))
    for node in record.nodes:
        if not node.node_dir.startswith(str(home)):
            out.append(Left(node_at(node.node_rank, node.host), node.node_dir, node.node_rank, node.host))
    return out


def folder_bytes(folder: Path) -> int:
    """Bytes of the regular files under ``folder`` (links are not followed: they hold no space of the run's)."""
    import os

    total = 0
    for root, _dirs, names in os.walk(folder):
        for name in names:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
    return total
