"""A run's files removed from its nodes: each node's run directory (code, parameters, its log there, and
the outputs a relative ``output_dir`` put under it), over the run's own backend, and the run's folder on
this machine. ``fsdp-tui clean`` keeps the run's record (its logs, metrics and config here); ``fsdp-tui rm
--files`` and the app's ``d`` forget it too, once every node said its folder is gone.

What lies outside the run directory stays, and the report says so: an absolute ``output_dir`` (shared by
runs, maybe), and the dependency venvs every run with the same requirements reuses."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from launcher.backends.base import RemovedFiles
from launcher.runs.core.layout import load_plan
from launcher.runs.core.store import RunStore
from launcher.workload.load import LOCAL_NODES_DIR

CLEANED = "cleaned.json"
"""In the run's record: when its files were removed from the nodes, and what each node said."""
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
        from launcher.runs.core.space import fmt_bytes

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
    from launcher.words import plural

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
        output_dir = plan.workload.parameters.get("output_dir") if plan.uses_builtin_trainer else None
        if isinstance(output_dir, str) and output_dir.startswith(("/", "~")):
            stays.append(f"its output_dir stays: {output_dir} on {plan.nodes[0].host_display} (outside the run's "
                         "folder: remove it there yourself once nothing else uses it)")
    if here.is_dir():  # what a node's agent did not remove (a run recorded before plans), or nothing at all
        size = await asyncio.to_thread(_size, here)
        await asyncio.to_thread(shutil.rmtree, here, True)
        if size[1]:
            nodes.append(RemovedFiles(-1, "this machine", str(here), size[0], size[1]))
    report = CleanReport(run_id, tuple(nodes), tuple(stays))
    (record.directory / CLEANED).write_text(json.dumps({"at": time.time(), "said": report.lines()}))
    return report


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


def cleaned(directory: Path) -> dict | None:
    """When the run's files were removed from its nodes, and what each said (``None``: never)."""
    try:
        data = json.loads((directory / CLEANED).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def files_left(home: Path, run_id: str) -> list[str]:
    """Where a run's files stay once its record is forgotten (``rm`` without ``--files``), each with the
    command that removes it; empty when its folders were removed already (or it has none)."""
    import shlex

    from launcher.runs.core.space import fmt_bytes

    record = RunStore(home).get_run(run_id)
    if record is None or cleaned(record.directory) is not None:
        return []
    out = []
    here = Path(home) / LOCAL_NODES_DIR / run_id
    if here.is_dir():
        size = fmt_bytes(folder_bytes(here))
        out.append(f"its files here stay: {here} ({size}: checkpoints, exports, outputs); remove them: "
                   f"rm -r {shlex.quote(str(here))}")
    for node in record.nodes:
        if not node.node_dir.startswith(str(home)):
            out.append(f"its files on node {node.node_rank} ({node.host}) stay there: {node.node_dir}")
    if out:
        out.append(f"(fsdp-tui clean {run_id}, or rm --files, removes a run's folders on every node; run it "
                   "before rm, while the record still knows the nodes)")
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
