"""Where the nodes that go on after a swap find the checkpoint they resume from.

The trainer resumes from the newest whole checkpoint in node 0's own checkpoints folder (and sends it on
to the nodes that lack one). After a swap that folder may be new (a spare in node 0's place, or the node
after a dropped node 0), so the newest whole checkpoint is looked for wherever the run kept one and can
still be read: the new node 0's folder, each surviving node's folder as it was, the gathers' holder on
this machine, and the failed node's folder read through the new node 0 (a shared disk). What is found
elsewhere is brought to node 0 with the checked copy of a resume (:func:`launcher.runs.owner.gather.bring`).
A checkpoint that was whole only on the failed node's own disk cannot be read: it is said, and the run
resumes from the newest one left (or starts again from step 0)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from launcher.backends.base import Backend, CheckpointFiles, NodeError
from launcher.runs.core.checkpoints import here_root, lineage_of
from launcher.runs.core.gathers import read_gathers, whole_steps
from launcher.runs.owner.ckpt_copy import Endpoint
from launcher.runs.owner.gather import bring
from launcher.words import node_at
from launcher.workload.plan import RunPlan
from trainer.wire import ckpt_owner


@dataclass(frozen=True)
class ResumePoint:
    """The checkpoint the nodes that go on resume from (``step`` ``None``: none, they start from step 0)."""

    step: int | None
    note: str


async def place_for_resume(old: RunPlan, backend: Backend, old_rank: dict[int, int | None], failed: int,
                           directory: Path, here: Callable[[], CheckpointFiles]) -> ResumePoint:
    """The newest whole checkpoint in the new node 0's folder (``backend.plan``, its place located), brought
    there when it is elsewhere. ``old_rank``: each new rank's rank in ``old`` (``None``: swapped in);
    ``failed``: the failed node's rank in ``old``."""
    new = backend.plan
    place, before = new.ckpt_place, old.ckpt_place
    if new.output_dir is None or place is None:
        return ResumePoint(None, "")
    if place.kind == "bucket":
        listing = await backend.checkpoints(new.output_dir, 0)
        newest = newest_resumable(listing.checkpoints, new)
        return ResumePoint(newest[0] if newest else None, f"from the bucket {place.output_dir}" if newest else
                           "no whole checkpoint in the bucket yet: the run starts again from step 0")
    target = Endpoint(backend.checkpoint_files(0), place.roots[0] if place.roots else new.output_dir)
    sources = [target]
    roots = before.roots if before is not None else ()
    for rank, was in sorted(old_rank.items()):
        if was is not None and was < len(roots):
            sources.append(Endpoint(backend.checkpoint_files(rank), roots[was]))
    if failed < len(roots):
        sources.append(Endpoint(backend.checkpoint_files(0), roots[failed]))  # readable where the disk is shared
    if before is not None and before.holder is not None and before.holder.node is None:
        sources.append(Endpoint(here(), here_root(directory, before.holder)))
    best: tuple[int, str, Endpoint] | None = None
    seen: set[tuple[str, str]] = set()
    for src in sources:
        if (src.label, src.root) in seen:
            continue
        seen.add((src.label, src.root))
        listing = await src.files.listing(src.root)
        found = newest_resumable(listing.checkpoints, new) if not listing.error else None
        if found is not None and (best is None or found[0] > best[0]):
            best = (found[0], found[1], src)
    lost = _lost_note(directory, best[0] if best else None, failed, old)
    if best is None:
        return ResumePoint(None, "no whole checkpoint is left on the nodes that go on: the run starts again "
                                 "from step 0" + lost)
    step, name, src = best
    if src is target:
        return ResumePoint(step, f"{name} in node 0's folder" + lost)
    try:
        await bring(src, target, name)
    except NodeError as err:
        return ResumePoint(None, f"{name} could not be brought to node 0 ({err}): the run starts again from step 0")
    return ResumePoint(step, f"{name} brought from {src.label} ({src.root}) to node 0" + lost)


def newest_resumable(checkpoints, plan: RunPlan) -> tuple[int, str] | None:
    """The newest whole checkpoint the run may resume from (its own or its lineage's: one rule,
    :func:`trainer.wire.ckpt_owner.resume_from`); a folder that is a link is never one."""
    listed = sorted((c for c in checkpoints if not c.link), key=lambda c: c.step)
    c = ckpt_owner.resume_from(listed, lineage_of(plan))
    return (c.step, c.name) if c is not None else None


def _lost_note(directory: Path, found: int | None, failed: int, old: RunPlan) -> str:
    """Whole checkpoints newer than ``found`` the gathers had made, now unreadable (on the failed node's disk)."""
    gathered = whole_steps(read_gathers(directory))
    newer = sorted(s for s in gathered if found is None or s > found)
    if not newer:
        return ""
    host = old.nodes[failed].host_display if failed < len(old.nodes) else "?"
    steps = ", ".join(str(s) for s in newer)
    return f"; step {steps} was whole only on {node_at(failed, host)}'s disk, lost with it"
