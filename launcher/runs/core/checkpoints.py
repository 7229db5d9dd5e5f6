"""A run's checkpoints where their whole copies are: listed, deleted, exported, chosen to resume from.

Where that is comes from the run's record (the place its launch found, :mod:`launcher.workload.ckpt_place`):
node 0's folder (one shared disk, or the gathers' default), another node's folder or this machine
(``checkpoint.gather_to``), or a bucket read from here with the run's credentials. A node that is gone
says so; it is never "no checkpoints".

A folder may hold other runs' checkpoints too (a fixed ``output_dir`` shared by a workload's runs): what
is the run's is :mod:`trainer.wire.ckpt_owner`'s rule, asked here as the trainer asks it. A listing is
the run's own checkpoints and, marked, the ones it continued (:class:`RunCheckpoints`); only its own are
deleted, exported or resumed as the run's.
"""

from __future__ import annotations

import asyncio
import posixpath
from dataclasses import dataclass
from pathlib import Path

from launcher.backends.base import Backend, CheckpointListing, ExportResult, NodeError
from launcher.backends.registry import backend_for, export_here_checkpoint, here_checkpoint_files
from launcher.paths import run_dir
from launcher.runs.core.bucket import (
    BucketError,
    bucket_env,
    list_bucket,
    remove_from_bucket,
    verify_in_bucket,
)
from launcher.runs.core.layout import Brought, load_plan
from launcher.runs.core.store import RunStore
from launcher.workload.ckpt_place import Holder
from launcher.workload.overrides import SetValue
from launcher.workload.plan import RunPlan
from trainer.wire import ckpt_owner
from trainer.wire.ckpt_digest import Differs, words
from trainer.wire.ckpt_layout import CheckpointInfo
from trainer.wire.ckpt_owner import Lineage, Whose
from trainer.wire.ckpt_paths import checkpoints_root

__all__ = ["CheckpointInfo", "list_checkpoints", "delete_checkpoint", "RunCheckpoints", "lineage_of",
           "remove_own_checkpoints", "BytesChecked", "verify_checkpoints",
           "export_checkpoint", "NoOutputDir", "CheckpointError", "resume_override",
           "resume_runs_override", "ResumeChoice", "resume_choice", "here_root"]

HOLDER_DIR = "checkpoints"
"""Where ``gather_to: here`` keeps a run's whole copies: in its record folder."""


def here_root(directory: Path, holder: Holder) -> str:
    """This machine's folder for a run's whole copies (``here``: the run's record; ``here:PATH``)."""
    return str(Path(holder.root).expanduser().resolve()) if holder.root else str(directory / HOLDER_DIR)


def lineage_of(plan: RunPlan) -> Lineage:
    """The run's claim on checkpoints, from its plan: its id, ``checkpoint.resume_runs``, ``output_dir``."""
    ckpt = plan.workload.parameters.get("checkpoint")
    runs = ckpt.get("resume_runs", []) if isinstance(ckpt, dict) else []
    return Lineage.of(plan.run_id, runs, plan.output_dir)


@dataclass(frozen=True)
class RunCheckpoints:
    """One run's checkpoints where their whole copies are, each known by whose it is: the run's own, the
    ones it continued (marked), and the folder's others (another run's: shown only when asked)."""

    run_id: str
    listing: CheckpointListing
    """Everything the folder holds, as the holder listed it."""
    lineage: Lineage

    @property
    def label(self) -> str:
        return self.listing.label

    @property
    def root(self) -> str:
        return self.listing.root

    @property
    def exists(self) -> bool:
        return self.listing.exists

    @property
    def error(self) -> str:
        return self.listing.error

    @property
    def checkpoints(self) -> tuple[CheckpointInfo, ...]:
        """The run's own and the ones it continued, oldest first."""
        return tuple(ckpt_owner.readable(self.listing.checkpoints, self.lineage))

    @property
    def own(self) -> tuple[CheckpointInfo, ...]:
        return tuple(ckpt_owner.own(self.listing.checkpoints, self.lineage))

    @property
    def others(self) -> tuple[CheckpointInfo, ...]:
        """The folder's checkpoints that are not the run's nor its lineage's."""
        return tuple(c for c in self.listing.checkpoints if not self.lineage.may_read(c))

    def whose(self, c: CheckpointInfo) -> Whose:
        return self.lineage.whose(c)

    def whose_words(self, c: CheckpointInfo) -> str:
        return ckpt_owner.whose_words(c, self.lineage)

    def safe(self) -> CheckpointInfo | None:
        """The run's safe step: its own newest whole checkpoint."""
        return ckpt_owner.safe_step(list(self.listing.checkpoints), self.lineage)

    def why_kept(self, c: CheckpointInfo) -> str:
        """Why the run may not delete ``c`` ("" when it may)."""
        return ckpt_owner.why_kept(list(self.listing.checkpoints), c, self.lineage)

    def chosen(self, step: int | None = None, name: str | None = None) -> CheckpointInfo | None:
        """The run's own newest whole checkpoint (of ``step``, or named ``name``): what its export and
        resume take; another run's never."""
        return ckpt_owner.resume_from(list(self.listing.checkpoints), self.lineage, step=step, name=name,
                                      own_only=True)

    def held(self) -> str:
        """What the folder holds that is whole, and whose: ``run B's steps 200, 250 (continued); run A's step
        100``; ``nothing whole`` when none is."""
        by_run: dict[str, list[int]] = {}
        for c in ckpt_owner.whole(self.listing.checkpoints):
            if not self.lineage.owns(c):
                by_run.setdefault(self.whose_words(c), []).append(c.step)
        if not by_run:
            return "nothing whole of another run"
        return "; ".join(f"{who} step{'s' if len(steps) > 1 else ''} {', '.join(map(str, steps))}"
                         for who, steps in by_run.items())

    def none_of_its_own(self, what: str = "") -> str:
        """The words for a run without a whole checkpoint of its own (``what``: ``at step 5``): what the
        folder holds and whose, and the run's own whole ones when it has some."""
        suffix = f" {what}" if what else ""
        mine = [str(c.step) for c in ckpt_owner.whole(self.own)]
        have = f"; its own complete ones: {', '.join(mine)}" if mine else ""
        return (f"run {self.run_id} has no complete checkpoint of its own{suffix} in {self.label}: {self.root} "
                f"(the folder holds {self.held()}){have}")


def resume_override(path: str) -> SetValue:
    """``parameters.checkpoint.resume`` set to ``path`` as data: a folder named ``a #b`` or ``a: b`` is that
    folder, never YAML."""
    return SetValue("parameters.checkpoint.resume", path)


def resume_runs_override(run_id: str, workload_text: str) -> SetValue:
    """``parameters.checkpoint.resume_runs``: the run a resume continues and the runs that one continued
    (its own recorded ``resume_runs``), so the trainer's resume check flags a checkpoint another run wrote."""
    import yaml

    try:
        recorded = (((yaml.safe_load(workload_text) or {}).get("parameters") or {}).get("checkpoint") or {})
    except (yaml.YAMLError, AttributeError):
        recorded = {}
    before = recorded.get("resume_runs") if isinstance(recorded, dict) else None
    earlier = [r for r in before if isinstance(r, str) and r != run_id] if isinstance(before, list) else []
    return SetValue("parameters.checkpoint.resume_runs", [run_id, *earlier])


class CheckpointError(RuntimeError):
    """A checkpoint operation failed on the node; the message names the node and why."""


class NoOutputDir(LookupError):
    """The run has no ``parameters.output_dir``: its script keeps its own checkpoints."""


@dataclass
class Holding:
    """Where a run's whole checkpoints are, opened for one operation (close it after)."""

    plan: RunPlan
    output_dir: str
    backend: Backend
    rank: int | None
    """The node that holds them; ``None``: this machine (``gather_to: here``) or a bucket."""
    root: str | None
    """Their folder there when it is not ``output_dir``'s own (a gather's holder), else ``None``."""
    bucket: bool

    @property
    def folder(self) -> str:
        """Their folder where this machine or a bucket holds them (``root`` is always set then)."""
        if self.root is None:
            raise ValueError("the checkpoints are in node 0's own output_dir: ask its node")
        return self.root

    async def close(self) -> None:
        await self.backend.close()


def holding(home: Path, run_id: str) -> Holding:
    record = RunStore(home).get_run(run_id)
    if record is None:
        raise LookupError(f"no run '{run_id}'")
    if not record.summary.output_dir:
        raise NoOutputDir(f"run {run_id} has no parameters.output_dir: its script keeps its own checkpoints")
    directory = run_dir(home, run_id)
    plan = load_plan(directory)
    place, output_dir = plan.ckpt_place, record.summary.output_dir
    backend = backend_for(plan)
    if place is not None and place.kind == "bucket":
        return Holding(plan, output_dir, backend, None, checkpoints_root(place.roots[0]), True)
    holder = place.holder if place is not None else None
    if holder is None or not holder.gathered or (place is not None and holder.node == 0
                                                 and holder.root == place.roots[0]):
        return Holding(plan, output_dir, backend, 0, None, False)  # node 0's own folder, as the job saw it
    if holder.node is None:
        return Holding(plan, output_dir, backend, None, here_root(directory, holder), False)
    return Holding(plan, output_dir, backend, holder.node, holder.root, False)


async def list_checkpoints(home: Path, run_id: str) -> RunCheckpoints:
    """The run's checkpoints where their whole copies are, each known by whose it is."""
    h = holding(home, run_id)
    try:
        return RunCheckpoints(run_id, await _listing(home, h), lineage_of(h.plan))
    finally:
        await h.close()


async def _listing(home: Path, h: Holding) -> CheckpointListing:
    if h.bucket:
        try:
            found = await asyncio.to_thread(list_bucket, h.folder, bucket_env(home, h.plan))
        except BucketError as err:
            return CheckpointListing(-1, "the bucket", h.folder, error=str(err))
        return CheckpointListing(-1, "the bucket", h.folder, tuple(found))
    if h.rank is None:
        return await here_checkpoint_files().listing(h.folder)
    return await h.backend.checkpoints(h.output_dir, h.rank, h.root)


async def delete_checkpoint(home: Path, run_id: str, name: str) -> None:
    """The run's own checkpoint ``name`` removed where it is held; :class:`CheckpointError` when the rule
    keeps it (another run's, or the run's safe step) or the holder cannot."""
    h = holding(home, run_id)
    lineage = lineage_of(h.plan)
    try:
        listing = await _listing(home, h)
        target = next((c for c in listing.checkpoints if c.name == name), None)
        if listing.error or target is None:
            raise CheckpointError(listing.error or f"no checkpoint {name!r} in {listing.root}")
        why = ckpt_owner.why_kept(list(listing.checkpoints), target, lineage)
        if why:
            raise CheckpointError(why)
        if h.bucket:
            await asyncio.to_thread(remove_from_bucket, target.path, bucket_env(home, h.plan))
        elif h.rank is None:
            await here_checkpoint_files().drop(h.folder, name, lineage.run_id if target.run_id else None)
        else:  # the node applies the same rule again to what it holds
            await h.backend.delete_checkpoint(h.output_dir, name, h.rank, h.root, writer=lineage.run_id,
                                              continues=lineage.continues)
    except (NodeError, BucketError) as err:
        raise CheckpointError(str(err)) from None
    finally:
        await h.close()


async def remove_own_checkpoints(home: Path, run_id: str) -> tuple[int, int, str]:
    """Every checkpoint of the run's own where its whole copies are held (``clean``: the newest too), none of
    another run's; ``(removed, the others' that stay, why not)`` (``why not`` empty when the holder
    answered)."""
    h = holding(home, run_id)
    lineage = lineage_of(h.plan)
    try:
        listing = await _listing(home, h)
        if listing.error:
            return 0, 0, listing.error
        mine = ckpt_owner.own(listing.checkpoints, lineage)
        files = None if h.bucket else here_checkpoint_files() if h.rank is None else h.backend.checkpoint_files(h.rank)
        for c in mine:
            if files is None:
                await asyncio.to_thread(remove_from_bucket, c.path, bucket_env(home, h.plan))
            else:  # the holder checks again that the folder names this run (or none, in its own folder)
                await files.drop(listing.root, c.name, lineage.run_id if c.run_id else None)
        return len(mine), len(listing.checkpoints) - len(mine), ""
    except (NodeError, BucketError) as err:
        return 0, 0, str(err)
    finally:
        await h.close()


@dataclass(frozen=True)
class BytesChecked:
    """One whole checkpoint's files hashed where they lie against the digests the trainer recorded."""

    name: str
    step: int
    differs: tuple[Differs, ...] = ()

    def words(self) -> str:
        if not self.differs:
            return f"{self.name}: its bytes are the ones the trainer wrote"
        return f"{self.name}: NOT whole now: {words(self.differs)}"


async def verify_checkpoints(home: Path, run_id: str) -> list[BytesChecked]:
    """Every whole checkpoint the run lists (its own and the ones it continued) read back where its whole
    copy is and checked against the trainer's digests; one whose bytes differ is marked there (not whole
    from then on, for every reader). Reads every byte: seconds per GB. :class:`CheckpointError` when the
    holder cannot be asked."""
    h = holding(home, run_id)
    try:
        listing = await _listing(home, h)
        if listing.error:
            raise CheckpointError(listing.error)
        files = None if h.bucket else here_checkpoint_files() if h.rank is None else h.backend.checkpoint_files(h.rank)
        out = []
        for c in ckpt_owner.whole(ckpt_owner.readable(listing.checkpoints, lineage_of(h.plan))):
            if files is None:
                differs = await asyncio.to_thread(verify_in_bucket, c.path, bucket_env(home, h.plan))
            else:
                differs = await files.verify(listing.root, c.name)
            out.append(BytesChecked(c.name, c.step, differs))
        return out
    except (NodeError, BucketError) as err:
        raise CheckpointError(str(err)) from None
    finally:
        await h.close()


async def export_checkpoint(home: Path, run_id: str, name: str, copy_to: Path | None = None,
                            merged: bool = False) -> ExportResult:
    """A Hugging Face folder written where torch is: on the node that holds the checkpoint (a bucket's: on
    node 0, read with the run's credentials), or here for copies kept here; with ``copy_to``, copied here.
    A LoRA checkpoint exports its adapter in PEFT's format, and with ``merged`` also the merged model."""
    h = holding(home, run_id)
    to = str(copy_to) if copy_to else None
    try:
        listing = RunCheckpoints(run_id, await _listing(home, h), lineage_of(h.plan))
        target = next((c for c in listing.listing.checkpoints if c.name == name), None)
        if target is not None and listing.whose(target) == "other":
            raise CheckpointError(f"{name} is {listing.whose_words(target)}, not run {run_id}'s: export it from "
                                  f"that run (fsdp-tui export {target.run_id or 'RUN'} --step {target.step})")
        if h.bucket:
            env = bucket_env(home, h.plan)
            return await h.backend.export_checkpoint(h.output_dir, name, to, merged, 0, url=f"{h.folder}/{name}",
                                                     job_env=env)
        if h.rank is None:
            return await asyncio.to_thread(export_here_checkpoint, h.folder, name, to, merged)
        return await h.backend.export_checkpoint(h.output_dir, name, to, merged, h.rank, h.root)
    except (NodeError, BucketError) as err:
        raise CheckpointError(str(err)) from None
    finally:
        await h.close()


@dataclass(frozen=True)
class ResumeChoice:
    """How a new run resumes from a checkpoint of ``run``."""

    path: str
    """``parameters.checkpoint.resume``: the checkpoint where the new run's node 0 finds it."""
    bring: Brought | None = None
    """What the new run's owner copies to node 0 first (the checkpoint's run, node, folder and name), when
    its node 0 is not the machine that holds it; kept in the new run's launch options."""


async def resume_choice(home: Path, run_id: str, chosen: CheckpointInfo, listing: RunCheckpoints,
                        new_plan: RunPlan) -> ResumeChoice:
    """Resume from ``chosen`` where it lies when the new run's node 0 is the machine that holds it (or it
    is in a bucket); else from the new run's own checkpoints folder, brought there before the start."""
    h = holding(home, run_id)
    await h.close()  # nothing was asked of it: only where the checkpoints are
    if h.bucket or (h.rank is not None and _same_machine(h.plan, h.rank, new_plan)):
        return ResumeChoice(chosen.path)
    output_dir = new_plan.output_dir or h.output_dir
    return ResumeChoice(posixpath.join(output_dir, "checkpoints", chosen.name),
                        Brought(run_id, listing.root, chosen.name, h.rank))


def _same_machine(old: RunPlan, rank: int, new: RunPlan) -> bool:
    a, b = old.nodes[rank].host, new.nodes[0].host
    if a is None or a.is_local or b is None or b.is_local:
        return (a is None or a.is_local) and (b is None or b.is_local)
    return (a.alias, a.hostname, a.port, a.user) == (b.alias, b.hostname, b.port, b.user)
