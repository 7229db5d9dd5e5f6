"""A small world of runs and their checkpoints, for the model-based test of whose a checkpoint is.

Hosts are folders here; a fixed ``output_dir`` is one folder every host sees (``shared``), one folder per
host (``per_node``: gathered into node 0's), or a bucket (fsspec's memory filesystem); a sweep variant's
is a folder of its own. What acts on the folders is the product's own code, only the transport is left
out: the trainer's prune and ``resume: auto`` (:class:`trainer.ckpt.checkpoint.Checkpointer`, on its
stores), the launcher's gathers, copies and the copy a resume brings (:mod:`launcher.runs.owner`), the
node agent's delete and drop (run on this machine), and the listings every tool reads
(:class:`launcher.runs.core.checkpoints.RunCheckpoints`, :func:`launcher.runs.core.continuing.continued_by`).
The trainer's save is written as it leaves its files (each node's shards, node 0's ``meta.json``)."""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

from launcher.backends.base import CheckpointListing
from launcher.backends.ckpt_files import HereCheckpointFiles
from launcher.runs.core.checkpoints import RunCheckpoints
from launcher.runs.owner.ckpt_copy import Endpoint
from launcher.runs.owner.gather import Gatherer, bring
from launcher.runs.owner.keeper import CheckpointKeeper
from launcher.workload.ckpt_place import judge_marks, with_holder
from tests.support.ckpt_disks import Disks, NodeFiles, save
from trainer.wire import ckpt_layout
from trainer.wire.ckpt_owner import Lineage

HOSTS = ("h0", "h1", "h2")
FIXED = "two"
EVERY = 50


@dataclass
class Run:
    run_id: str
    kind: str
    """``shared``, ``per_node``, ``bucket`` or ``own`` (a sweep variant's folder of its own)."""
    hosts: tuple[str, ...]
    keep_last: int
    continues: tuple[str, ...] = ()
    step: int = 0
    forgotten: bool = False
    brought: list[tuple[str, str]] = field(default_factory=list)
    """Copies it brought to its node 0 to resume from: (checkpoints folder, name)."""

    @property
    def folder(self) -> str:
        return f"own-{self.run_id}" if self.kind == "own" else FIXED

    def lineage(self) -> Lineage:
        return Lineage.of(self.run_id, list(self.continues), "/o/$FSDP_TUI_RUN_ID" if self.kind == "own" else "/o")


class World:
    """The folders, the runs, and every checkpoint seen, with the run that wrote it."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.bucket = f"memory://ckpt-{uuid.uuid4().hex}"
        self.runs: dict[str, Run] = {}
        self.count = 0

    # -- where things are ---------------------------------------------------------------------------

    def root(self, run: Run, host: str) -> str:
        """The checkpoints folder ``host`` sees for ``run`` (the bucket's URL for a bucket run)."""
        if run.kind == "bucket":
            return f"{self.bucket}/{run.folder}/checkpoints"
        if run.kind == "per_node":
            return str(self.tmp / host / run.folder / "checkpoints")
        return str(self.tmp / "shared" / run.folder / "checkpoints")

    def roots(self) -> list[str]:
        seen = {self.root(r, h) for r in self.runs.values() for h in r.hosts}
        return sorted(seen)

    def holder(self, run: Run) -> str:
        return self.root(run, run.hosts[0])

    def listing(self, root: str) -> list[ckpt_layout.CheckpointInfo]:
        if root.startswith("memory://"):
            import fsspec

            fs, bare = fsspec.core.url_to_fs(root)
            return ckpt_layout.list_in_bucket(fs, bare, root)
        return ckpt_layout.list_checkpoints(root)

    def view(self, run: Run) -> RunCheckpoints:
        """What ``fsdp-tui ckpt``, ``export``, ``resume`` and the checkpoints screen read of the run."""
        root = self.holder(run)
        return RunCheckpoints(run.run_id, CheckpointListing(0, "node 0", root, tuple(self.listing(root))),
                              run.lineage())

    def snapshot(self) -> dict[tuple[str, str], tuple[bool, str | None]]:
        """Every checkpoint folder anywhere: (folder, name) -> (whole, its writer)."""
        return {(root, c.name): (c.complete, c.run_id) for root in self.roots() for c in self.listing(root)}

    # -- what the trainer does --------------------------------------------------------------------------

    def store(self, run: Run):
        from trainer.ckpt.store import open_store

        return open_store(self.holder(run))

    def trainer(self, run: Run):
        """The run's checkpointer on node 0, as far as its prune and ``resume: auto`` go (no process group)."""
        from trainer.ckpt.checkpoint import Checkpointer
        from trainer.wire.config import CheckpointConfig

        ckpt = Checkpointer.__new__(Checkpointer)
        ckpt.cfg = CheckpointConfig(keep_last=run.keep_last)
        ckpt.run_id, ckpt.lineage, ckpt.store = run.run_id, run.lineage(), self.store(run)
        return ckpt

    def new_run(self, kind: str, hosts: tuple[str, ...], keep_last: int, continues: tuple[str, ...] = ()) -> Run:
        self.count += 1
        run = Run(f"run-{self.count}", kind, hosts, keep_last, continues)
        self.runs[run.run_id] = run
        return run

    def saves(self, run: Run, count: int, *, last_gathered: bool = True) -> None:
        """``count`` saves of the run: each written on its nodes, pruned by the trainer, gathered (and
        pruned again) by the launcher where the nodes keep their own folders."""
        for i in range(count):
            run.step += EVERY
            self._write(run, run.step)
            self.trainer(run)._prune()
            if self._gathers(run) and (last_gathered or i < count - 1):
                gatherer = self.gatherer(run)
                asyncio.run(gatherer.pass_once(final=False))

    def _gathers(self, run: Run) -> bool:
        return run.kind == "per_node" and len(run.hosts) > 1

    def _write(self, run: Run, step: int) -> None:
        roots = [self.root(run, h) for h in run.hosts]
        taken = set()
        for root in set(roots):
            taken |= {c.name for c in self.listing(root)} | self._names(root)
        n = 0
        while ckpt_layout.step_name(step, n) in taken:
            n += 1
        name = ckpt_layout.step_name(step, n)
        if run.kind == "bucket":
            self._write_bucket(roots[0], name, step, run.run_id)
        else:
            save([Path(r) for r in roots], step, run.run_id, name=name)

    def _names(self, root: str) -> set[str]:
        if root.startswith("memory://"):
            return set()
        try:
            return {p.name for p in Path(root).iterdir()}
        except OSError:
            return set()

    def _write_bucket(self, root: str, name: str, step: int, run_id: str) -> None:
        import fsspec

        from tests.support.ckpt_disks import SHARDS, meta_text, shard_bytes

        fs, bare = fsspec.core.url_to_fs(root)
        sums = {}
        for file, (size, _node) in SHARDS.items():
            data = shard_bytes(step, file, size, run_id)
            fs.pipe_file(f"{bare}/{name}/{file}", data)
            sums[file] = hashlib.sha256(data).hexdigest()
        fs.pipe_file(f"{bare}/{name}/.metadata", b"m")
        sums[".metadata"] = hashlib.sha256(b"m").hexdigest()
        fs.pipe_file(f"{bare}/{name}/meta.json", meta_text(step, run_id, None, sums).encode())

    def gatherer(self, run: Run) -> Gatherer:
        roots = [Path(self.root(run, h)) for h in run.hosts]
        files = [NodeFiles(r, label=f"node {r} ({h})") for r, h in enumerate(run.hosts)]
        place = with_holder(judge_marks(FIXED, [str(r) for r in roots], [True] + [False] * (len(roots) - 1),
                                        [""] * len(roots)), "node0")
        return Gatherer(Disks(roots, files), place, Endpoint(files[0], str(roots[0])), keep_last=run.keep_last,
                        journal=self.tmp / f"{run.run_id}-gathers.jsonl", lineage=run.lineage())

    # -- what the launcher does -----------------------------------------------------------------------

    def resume_auto(self, run: Run) -> str | None:
        """The checkpoint the run's trainer resumes from with ``resume: auto`` (node 0's folder)."""
        return self.trainer(run)._newest_readable()

    def continued_by_auto(self, kind: str, hosts: tuple[str, ...]):
        """What a new launch's ``resume: auto`` would continue in the fixed folder of ``kind``."""
        from launcher.runs.core.continuing import continued_by

        probe = Run("run-next", kind, hosts, 1)
        listed = self.listing(self.root(probe, hosts[0]))
        return continued_by(SimpleNamespace(run_id="run-next", workload=SimpleNamespace(parameters={})), listed)

    def bring_for(self, old: Run, new: Run, name: str) -> None:
        """``fsdp-tui resume`` onto another node 0: the checkpoint copied there first (the keeper's bring),
        recorded as the new run's own copy."""
        src, dst = self.holder(old), self.holder(new)
        if src == dst or new.kind == "bucket":
            return
        files = HereCheckpointFiles()
        if asyncio.run(bring(Endpoint(files, src), Endpoint(files, dst), name)) is not None:
            keeper = self.keeper(new)
            asyncio.run(keeper._brought(Endpoint(files, dst), name))
            new.brought.append((dst, name))

    def keeper(self, run: Run) -> CheckpointKeeper:
        directory = self.tmp / "records" / run.run_id
        directory.mkdir(parents=True, exist_ok=True)
        return CheckpointKeeper(directory, lambda plan: None, HereCheckpointFiles)

    def finish(self, run: Run) -> None:
        """The run's end: the copies it brought are removed (the keeper's ``finish``)."""
        class Node0:
            def checkpoint_files(self, rank: int):
                return HereCheckpointFiles()

        asyncio.run(self.keeper(run).finish(Node0()))
        run.brought.clear()

    def delete(self, run: Run, name: str) -> str:
        """``fsdp-tui``'s delete of a checkpoint of the run (the app's ``d``): the node's agent applies the
        rule; what it said when it refused."""
        from launcher.backends.agent import checkpoints

        root = self.holder(run)
        if run.kind == "bucket":
            view = self.view(run)
            target = next(c for c in view.listing.checkpoints if c.name == name)
            why = view.why_kept(target)
            if not why:
                self.store(run).remove(target.path)
            return why
        try:
            checkpoints.delete(FIXED, {}, "/", name, root, run.run_id, list(run.continues))
        except ValueError as err:
            return str(err)
        return ""

    def clean(self, run: Run) -> None:
        """``fsdp-tui clean``: the run's own checkpoints removed where they are held, nothing else."""
        view = self.view(run)
        for c in view.own:
            if run.kind == "bucket":
                self.store(run).remove(c.path)
            else:
                asyncio.run(HereCheckpointFiles().drop(view.root, c.name, run.run_id if c.run_id else None))
