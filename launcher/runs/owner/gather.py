"""Checkpoints made whole when each node keeps ``output_dir`` on its own disk.

The trainer's rank 0 marks a save done by writing ``meta.json`` (with the list of shards and the node
that wrote each) in node 0's folder; the other nodes' shards are in the same-named folder on their own
disks. The :class:`Gatherer`, run by the run's owner beside the job (its own connections, never the
training's path), sees each such save and copies the missing shards into the holder
(``parameters.checkpoint.gather_to``: node 0's folder by default), each verified before it takes its
name, so the checkpoint becomes whole (:mod:`trainer.wire.ckpt_layout`'s rule) only once every shard is
there. Then the nodes' leftovers are removed and ``keep_last`` is applied to the whole copies. A node
lost during a copy leaves that checkpoint not whole, named in the run's record (``gathers.jsonl``), and
the previous whole one stays the one to resume from.

A gather checks the bytes as well as the sizes: every copied file's SHA-256 against the digest the
trainer recorded for it, and node 0's own shards hashed where they lie. Bytes that differ make the
checkpoint not whole (marked in its folder, named with the node and file, in ``gathers.jsonl`` too). It
checks the holder's free space before it copies, and a gather that fails removes what it had copied.

The gathers touch only the run's own checkpoints (:mod:`trainer.wire.ckpt_owner`): another run's in the
same folder (the one this run resumed from, a run that shares ``output_dir``) is never gathered, pruned,
moved or dropped; a copy brought to node 0 to resume from is the run's own copy, left alone while the
run may need it and removed when it ends (:meth:`Gatherer.bring_newest`, the keeper's ``finish``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from pathlib import Path

from launcher.backends.base import Backend, CheckpointListing, NodeError, NodeLost
from launcher.runs.core.gathers import Gather, GatherNote, append_gather
from launcher.runs.owner.ckpt_copy import (
    BytesDiffer,
    Copied,
    Endpoint,
    can_send_directly,
    copy_checkpoint,
    copy_direct,
)
from launcher.words import plural
from launcher.workload.ckpt_place import CheckpointPlace
from trainer.wire.ckpt_digest import expected, words
from trainer.wire.ckpt_layout import CheckpointInfo, judge
from trainer.wire.ckpt_owner import Lineage, resume_from, safe_step, to_prune

POLL_S = 2.0
"""How often node 0's folder is looked at for a save the trainer has marked done."""


class Gatherer:
    """Owns the run's gathers: which saves wait for one, the copies, the leftovers and ``keep_last``.

    ``backend`` is a backend of the run's own (its connections are used by nothing else, so a copy never
    waits behind a log read); ``holder`` is where whole copies go (node 0's folder, another node's
    folder, or this machine through ``here``)."""

    def __init__(self, backend: Backend, place: CheckpointPlace, holder: Endpoint, *, keep_last: int | None,
                 journal: Path, lineage: Lineage, say: Callable[[str], None] = lambda text: None,
                 direct_addr: str | None = None,
                 on_safe: Callable[[CheckpointInfo], None] = lambda c: None) -> None:
        self.backend, self.place, self.holder = backend, place, holder
        self.direct_addr = direct_addr
        """The holder's address as the nodes dial it (node 0's ``MASTER_ADDR``): shards go there straight
        from each node; ``None`` (or once a node could not dial it) they go through this machine."""
        self.lineage = lineage
        """Whose checkpoints these are: only the run's own are gathered, dropped and pruned."""
        self.on_safe = on_safe
        """Told the run's own newest whole checkpoint after each pass that gathered one (the safe step)."""
        self.keep_last = keep_last
        self.journal = journal
        self.say = say
        """Told what the gather does when it is worth a line in the run's state (at the end, a failure)."""
        self.in_place = place.holder is not None and place.holder.node == 0 and place.holder.root == place.roots[0]
        """The holder is node 0's own folder: only the other nodes' shards travel."""
        self.done: set[str] = set()
        self.failed: dict[str, str] = {}
        """Checkpoints that could not be made whole, and why (a node lost during the copy)."""
        self.brought: set[str] = set()
        """Copies brought to node 0 to resume from: the run's own copies, never gathered or pruned."""
        self.lost: set[int] = set()
        """Nodes the run lost: their shards cannot come (a checkpoint that needs them is not whole)."""
        self.lost_in_gathers: dict[int, str] = {}
        """Nodes lost while a gather copied from them (or needed them), and the gather's words: the run's
        triage names such a node first, whatever the others' logs blamed after."""

    def node(self, rank: int) -> Endpoint:
        return Endpoint(self.backend.checkpoint_files(rank), self.place.roots[rank])

    # -- the passes --------------------------------------------------------------------------------

    async def watch(self, stop: asyncio.Event) -> None:
        """Gather each save as it is marked done, until ``stop`` is set (the attempt ended): a gather under
        way is finished, not cut."""
        while not stop.is_set():
            await self.pass_once(final=False)
            try:
                await asyncio.wait_for(stop.wait(), POLL_S)
            except asyncio.TimeoutError:
                pass

    async def settle(self, lost: AbstractSet[int] = frozenset()) -> dict[str, str]:
        """One last pass once the attempt's job has ended (its final save), nothing asked of the ``lost``
        nodes; returns what failed."""
        self.lost = set(lost)
        if 0 not in self.lost:
            await self.pass_once(final=True)
        return dict(self.failed)

    async def pass_once(self, final: bool) -> None:
        listing = await self.backend.checkpoints(self.place.output_dir, rank=0)
        if listing.error:
            if final:
                self._failed_all(listing)
            return  # node 0 does not answer now: its own link says so; the next pass tries again
        waiting = [c for c in listing.checkpoints if c.saved and not c.link and self.lineage.owns(c)
                   and c.name not in self.done and c.name not in self.failed and c.name not in self.brought]
        for c in waiting:
            await self.gather(c, final)
        if waiting:
            await self.prune()

    def _failed_all(self, listing: CheckpointListing) -> None:
        self.say(f"checkpoints not gathered: {listing.error}")

    async def gather(self, c: CheckpointInfo, final: bool = False) -> bool:
        """Make ``c`` (saved on node 0) whole in the holder, its bytes checked; ``False`` when a node failed,
        bytes differ or the holder has no room (recorded, and nothing this gather copied is left behind)."""
        node0 = self.node(0)
        copies: list[Copied] = []
        landed: list[str] = []
        """Files this gather named in the holder: removed again if it fails."""
        try:
            files, meta = await node0.files.files(node0.root, c.name)
            verdict = judge(files, meta)
            if not verdict.saved:
                return False  # it changed under us (pruned): nothing to do
            want, node_of = expected(meta), {file: node for file, _size, node in verdict.shards}
            sources: dict[int, dict[str, int]] = {}
            for file, size, node in verdict.shards:
                if (file, node) in verdict.missing:
                    sources.setdefault(node, {})[file] = size
            gone = sorted(n for n in sources if n in self.lost)
            if gone:
                raise NodeLost(f"node {gone[0]} was lost: its {plural(len(sources[gone[0]]), 'shard')} cannot be "
                               "copied", gone[0])
            if self.in_place:
                differs = await node0.files.verify(node0.root, c.name)  # node 0's own shards, hashed there
                if differs:
                    raise BytesDiffer(node0.label, c.name, differs)
            if self.in_place and not sources:
                self.done.add(c.name)  # whole already (the nodes that wrote it share node 0's folder)
                await self._drop_leftovers(c.name)
                return True
            total = sum(sum(s.values()) for s in sources.values()) + (0 if self.in_place else sum(files.values()))
            await self._room(c.name, total)
            if final:
                self.say(f"gathering checkpoint {c.name}: {total / 2**20:.1f} MiB from "
                         f"{', '.join(f'node {n}' for n in sorted(sources) or [0])} into {self.holder.label}")
            start = time.perf_counter()
            copies = await self._copy_from_nodes(c.name, sources, want, node_of, landed)
            if not self.in_place:
                copies.append(await copy_checkpoint(node0, self.holder, c.name, files, want, node_of))  # meta.json last
            await self._drop_leftovers(c.name)
        except NodeError as err:
            await self._undo(c.name, landed, err)
            why = f"not whole: {err}"
            self.failed[c.name] = why
            if isinstance(err, NodeLost) and err.node_rank is not None:
                self.lost_in_gathers.setdefault(err.node_rank, f"lost during the gather of checkpoint {c.name}: {err}")
            self._record(c, ok=False, error=str(err))
            self.say(f"checkpoint {c.name} is {why}")
            return False
        self.done.add(c.name)
        self._record(c, ok=True, copied=copies, seconds=time.perf_counter() - start, nodes=sorted(sources))
        return True

    async def _room(self, name: str, total: int) -> None:
        """``NodeError`` when the holder has less room than the copy needs (asked before anything moves)."""
        try:
            free = await self.holder.files.room(self.holder.root)
        except NodeError:
            return  # the copy itself says what is wrong with the holder
        if free < total:
            raise NodeError(f"{self.holder.label}: {free / 2**20:.1f} MiB free in {self.holder.root}, the gather of "
                            f"{name} needs {total / 2**20:.1f} MiB: make room there (or set "
                            "parameters.checkpoint.gather_to to a larger disk)")

    async def _undo(self, name: str, landed: list[str], err: NodeError) -> None:
        """A failed gather: what it had copied into the holder removed, and bytes that differ marked in the
        folder that holds the checkpoint's ``meta.json`` (node 0's), so it is not whole for any reader."""
        try:
            if landed:
                await self.holder.files.forget(self.holder.root, name, landed)
            if isinstance(err, BytesDiffer):
                node0 = self.node(0)
                await node0.files.mark(node0.root, name, err.differs)
        except NodeError:
            pass  # the holder or node 0 is gone too: the record says why the checkpoint is not whole

    async def _copy_from_nodes(self, name: str, sources: dict[int, dict[str, int]], want: dict[str, str],
                               node_of: dict[str, int], landed: list[str]) -> list[Copied]:
        """Every node's missing shards into the holder, the nodes side by side (each copy's named files
        added to ``landed``); the first failure raised once every copy has stopped."""
        results = await asyncio.gather(*(self._copy(self.node(rank), name, sizes, want, node_of)
                                         for rank, sizes in sorted(sources.items())), return_exceptions=True)
        copied, failure = [], None
        for (_rank, sizes), r in zip(sorted(sources.items()), results, strict=True):
            if isinstance(r, BaseException):
                failure = failure or r
            else:
                copied.append(r)
                landed.extend(sizes)
        if failure is not None:
            raise failure
        return copied

    async def _copy(self, src: Endpoint, name: str, sizes: dict[str, int], want: dict[str, str],
                    node_of: dict[str, int]) -> Copied:
        """Straight from the node to the holder where it can dial it, else through this machine."""
        if self.direct_addr and self.in_place and can_send_directly(src, self.holder):
            try:
                return await copy_direct(src, self.holder, name, sizes, self.direct_addr, want, node_of)
            except NodeError as err:
                if isinstance(err, (NodeLost, BytesDiffer)) or "for a direct copy" not in str(err):
                    raise  # the node itself is gone, or the copy failed otherwise: not a matter of the route
                self.direct_addr = None  # this run's nodes cannot: never again
                self._note(f"{src.label} cannot dial {self.holder.label} ({err}); copying through this machine")
        return await copy_checkpoint(src, self.holder, name, sizes, want, node_of)

    def _note(self, text: str) -> None:
        try:
            append_gather(self.journal, GatherNote(text, time.time()))
        except OSError:
            pass

    async def _drop_leftovers(self, name: str) -> None:
        """What the nodes keep of a checkpoint that is whole in the holder: their own folder of it (never
        through a node that sees node 0's folder, which may be the holder)."""
        ranks = list(self.place.separate_nodes()) if self.in_place else [0, *self.place.separate_nodes()]
        for rank in ranks:
            try:
                await self.backend.checkpoint_files(rank).drop(self.place.roots[rank], name, self.lineage.run_id)
            except NodeError:
                pass  # a node gone since: its leftover goes with it, or with the run's own folders

    async def prune(self) -> None:
        """``keep_last`` on the run's own whole copies in the holder (never its newest whole one, never
        another run's, never a copy brought to resume from): the trainer's rule, asked here too. Then the
        run's safe step as it stands is told (:attr:`on_safe`)."""
        listing = await self.holder.files.listing(self.holder.root)
        if listing.error:
            return
        gone: set[str] = set()
        for old in to_prune(list(listing.checkpoints), self.lineage, self.keep_last, keep=self.brought):
            try:
                await self.holder.files.drop(self.holder.root, old.name, self.lineage.run_id)
            except NodeError:
                break
            gone.add(old.name)
        safe = safe_step([c for c in listing.checkpoints if c.name not in gone], self.lineage)
        if safe is not None:
            self.on_safe(safe)

    async def bring_newest(self) -> tuple[str, bool] | None:
        """Before a retry: the newest whole copy this run may resume from, where it is not node 0's folder,
        copied there so the trainer resumes from it (``checkpoint.resume: auto``); returns its name and
        whether a copy was made (node 0 may have had it whole: then nothing there is this run's copy)."""
        if self.in_place:
            return None
        listing = await self.holder.files.listing(self.holder.root)
        newest = resume_from(list(listing.checkpoints), self.lineage)
        if newest is None:
            return None
        copied = await bring(self.holder, self.node(0), newest.name)
        self.brought.add(newest.name)
        self.done.add(newest.name)
        return newest.name, copied is not None

    def _record(self, c: CheckpointInfo, *, ok: bool, copied: Sequence[Copied] = (), seconds: float = 0.0,
                nodes: Sequence[int] = (), error: str = "") -> None:
        if ok:
            routes = sorted({x.via for x in copied if x.files})
            entry = Gather(c.name, c.step, True, time.time(), self.holder.label, sum(x.bytes for x in copied),
                           sum(x.files for x in copied), round(seconds, 3), tuple(nodes), "+".join(routes) or "none")
        else:
            entry = Gather(c.name, c.step, False, time.time(), self.holder.label, error=error)
        try:
            append_gather(self.journal, entry)
        except OSError:
            pass  # the operator's disk is full: the record's own checks say so


async def bring(src: Endpoint, dst: Endpoint, name: str) -> Copied | None:
    """A whole checkpoint copied from ``src`` to ``dst`` (another run's holder to this run's node 0, for a
    resume), its bytes checked against the trainer's digests; ``None`` when ``dst`` has it whole already
    (nothing was copied: nothing of it is this run's to remove later). A folder of that name at ``dst``
    that is not whole is never written into: ``NodeError`` says so (it may be another run's)."""
    there, there_meta = await dst.files.files(dst.root, name)
    if judge(there, there_meta).complete:
        return None
    if there:
        raise NodeError(f"{dst.label}: {dst.root}/{name} exists and is not whole "
                        f"({judge(there, there_meta).why_not()}): it is left as it is; remove it there, or resume "
                        "with another output_dir")
    files, meta = await src.files.files(src.root, name)
    verdict = judge(files, meta)
    if not verdict.complete:
        raise NodeError(f"{src.label}: {name} is not whole there ({verdict.why_not()})")
    try:
        return await copy_checkpoint(src, dst, name, files, expected(meta),
                                     {file: node for file, _size, node in verdict.shards})
    except BytesDiffer as err:
        try:
            await src.files.mark(src.root, name, err.differs)
        except NodeError:
            pass
        raise NodeError(f"{src.label}: {name} is not whole: {words(err.differs)}") from None
