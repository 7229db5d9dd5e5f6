"""What a run's owner does for its checkpoints, beside the run policy.

At launch it asks the nodes where ``output_dir`` lands (:meth:`Backend.checkpoint_place`) and puts the
answer in the run's plan, which every checkpoint tool reads later. When the nodes keep separate folders
it runs a :class:`~launcher.runs.owner.gather.Gatherer` beside each attempt (on connections of its
own) and one last pass after it. Before an attempt that resumes, it brings the checkpoint to node 0
when it is elsewhere: another run's holder (``fsdp-tui resume`` onto other nodes), or this run's own
holder when that is not node 0's folder (a retry with ``gather_to: here``). Each copy it brings is the
run's own copy (recorded in the run's folder, ``brought.json``): removed when the run ends, and nothing
else is; the checkpoint it was copied from is never moved or touched.
"""

from __future__ import annotations

import asyncio
import traceback
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from launcher.backends.base import Backend, CheckpointFiles, NodeError
from launcher.notify.summary import CheckpointFact
from launcher.runs.core.checkpoints import here_root, lineage_of
from launcher.runs.core.housekeeping import BroughtCopy, read_brought, save_brought
from launcher.runs.core.layout import GATHERS
from launcher.runs.core.safe_step import save_safe_step
from launcher.runs.owner.ckpt_copy import Endpoint
from launcher.runs.owner.gather import Gatherer, bring
from launcher.runs.owner.outcome import LaunchFailed
from launcher.words import plural
from launcher.workload.ckpt_place import CheckpointPlace, with_holder
from launcher.workload.plan import RunPlan
from trainer.wire.ckpt_layout import CheckpointInfo, run_of


class CheckpointKeeper:
    """Owns where the run's checkpoints land, their gathers and the copy a resume needs on node 0."""

    def __init__(self, directory: Path, make_backend: Callable[[RunPlan], Backend],
                 here: Callable[[], CheckpointFiles], *, say: Callable[[str], None] = lambda text: None,
                 resume_from: Callable[[], tuple[Endpoint, str] | None] | None = None) -> None:
        self.dir = directory
        self.make_backend = make_backend
        self.here = here
        self.say = say
        self.resume_from = resume_from
        """Another run's holder and the name of the checkpoint this run resumes from, when it must be
        brought to node 0's own checkpoints folder (``fsdp-tui resume`` onto another node 0)."""
        self.backend: Backend | None = None
        self.gatherer: Gatherer | None = None
        self.watching: asyncio.Task | None = None
        self.stopping = asyncio.Event()

    async def locate(self, backend: Backend) -> RunPlan:
        """The plan with where ``output_dir`` lands, asked of the nodes; a node that cannot say stops the
        launch (guessing would split checkpoints without a word)."""
        plan = backend.plan
        if plan.output_dir is None:
            return plan
        place = with_holder(await backend.checkpoint_place(plan.output_dir), plan.gather_to)
        if place.kind == "unchecked":
            raise LaunchFailed(f"cannot tell where parameters.output_dir lands on the nodes: {place.detail}")
        if place.holder is not None and place.holder.node is not None and place.holder.node >= len(plan.nodes):
            raise LaunchFailed(f"parameters.checkpoint.gather_to: node {place.holder.node}, but the run has "
                               f"{plural(len(plan.nodes), 'node')} (node0 to node{len(plan.nodes) - 1})")
        return replace(plan, ckpt_place=place)

    def use(self, plan: RunPlan) -> None:
        """Gathers for ``plan`` (its place as found at launch), on a backend of their own."""
        place = plan.ckpt_place
        if place is None or not place.gathers or not plan.uses_builtin_trainer:
            return
        backend = self.backend = self.make_backend(plan)
        direct = plan.master_addr if plan.workload.compute.slurm is None else None
        self.gatherer = Gatherer(backend, place, self._holder(place, backend), keep_last=_keep_last(plan),
                                 journal=self.dir / GATHERS, lineage=lineage_of(plan), say=self.say,
                                 direct_addr=direct, on_safe=self._safe)

    def _holder(self, place: CheckpointPlace, backend: Backend) -> Endpoint:
        holder = place.holder
        assert holder is not None  # a place that gathers names its holder (with_holder)
        if holder.node is None:
            return Endpoint(self.here(), here_root(self.dir, holder))
        return Endpoint(backend.checkpoint_files(holder.node), holder.root)

    async def before_attempt(self, attempt: int, backend: Backend) -> None:
        """The checkpoint the attempt resumes from, on node 0 (nothing to do where it is there)."""
        try:
            if attempt == 1 and self.resume_from is not None:
                found = self.resume_from()
                if found is not None and backend.plan.output_dir is not None:
                    source, name = found
                    here = await backend.checkpoints(backend.plan.output_dir, 0)  # node 0's own folder
                    if here.error:
                        raise NodeError(here.error)
                    self.say(f"bringing checkpoint {name} from {source.label} to node 0")
                    node0 = Endpoint(backend.checkpoint_files(0), here.root)
                    if await bring(source, node0, name) is not None:
                        await self._brought(node0, name)
            elif attempt > 1 and self.gatherer is not None:
                found = await self.gatherer.bring_newest()
                if found:
                    name, copied = found
                    if copied:
                        await self._brought(self.gatherer.node(0), name)
                    self.say(f"brought checkpoint {name} from {self.gatherer.holder.label} to node 0 to resume from")
        except NodeError as err:
            raise LaunchFailed(f"cannot bring the checkpoint to resume from to node 0: {err}") from None

    def _safe(self, c: CheckpointInfo) -> None:
        """The run's safe step recorded as soon as a gather makes it whole (the monitor reads it here)."""
        import time

        try:
            save_safe_step(self.dir, CheckpointFact(c.name, c.step, max(0.0, time.time() - c.mtime)), time.time())
        except OSError:
            pass  # a full disk: the safe step is asked of the node instead

    async def _brought(self, node0: Endpoint, name: str) -> None:
        """Record a copy this run made on node 0 (and whose checkpoint it copies) before anything else."""
        _files, meta = await node0.files.files(node0.root, name)
        save_brought(self.dir, [*read_brought(self.dir), BroughtCopy(node0.root, name, run_of(meta))])

    async def finish(self, backend: Backend) -> list[str]:
        """The run ended: the copies it brought to node 0 to resume from removed (each only if it is still
        that checkpoint's copy); what could not be, in words."""
        left = []
        for copy in read_brought(self.dir):
            try:
                await backend.checkpoint_files(0).drop(copy.root, copy.name, copy.writer)
            except NodeError as err:
                left.append(f"the copy of {copy.name} brought to node 0 to resume from stays: {err}")
        if not left:
            save_brought(self.dir, [])
        return left

    def start(self) -> None:
        if self.gatherer is not None:
            self.stopping = asyncio.Event()
            self.watching = asyncio.create_task(self.gatherer.watch(self.stopping))

    async def settle(self, lost: set[int]) -> dict[str, str]:
        """The attempt ended: its watch stopped, then the last saves gathered (nothing asked of the
        ``lost`` nodes); what could not be."""
        if self.watching is not None:
            self.stopping.set()  # a gather under way finishes first
            (ended,) = await asyncio.gather(self.watching, return_exceptions=True)
            self.watching = None
            if isinstance(ended, Exception):  # a bug of the gathers: the owner's log says where
                print("the gathers' watch failed:", "".join(traceback.format_exception(ended)), flush=True)
        if self.gatherer is None:
            return {}
        return await self.gatherer.settle(lost)

    async def reset(self) -> None:
        """Before the nodes change (a swap): the gathers of the old node set closed; ``locate`` and ``use``
        the new one's next."""
        await self.close()
        self.backend = self.gatherer = None
    def lost_in_gathers(self) -> dict[int, str]:
        """Nodes lost while a gather needed them, with the gather's words (empty without gathers)."""
        return dict(self.gatherer.lost_in_gathers) if self.gatherer is not None else {}

    async def close(self) -> None:
        if self.backend is not None:
            await self.backend.close()


def _keep_last(plan: RunPlan) -> int | None:
    ckpt = plan.workload.parameters.get("checkpoint")
    value = ckpt.get("keep_last", 3) if isinstance(ckpt, dict) else 3
    return value if isinstance(value, int) and not isinstance(value, bool) else None
