"""DCP checkpoints that are complete only once whole, resume, keep-last-K and Hugging Face export.

Layout: ``<output_dir>/checkpoints/step-00000100/`` holds DCP's shard files, its ``.metadata``
(written last by DCP) and our ``meta.json`` (written after that, stdlib-readable, listing every shard
and the node that wrote it). The rule of completeness is :mod:`trainer.wire.ckpt_layout`'s: a folder is
resumed from only when every shard is in it (with one disk per node, once the launcher has gathered
them); a save never reuses a folder on any node. ``output_dir`` may be a bucket URL
(:mod:`trainer.ckpt.store`).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_state_dict,
)
from torch.distributed.checkpoint.stateful import Stateful

from trainer.ckpt.spread import local_copy, node_index
from trainer.ckpt.stager import ReusingStager
from trainer.ckpt.store import open_store
from trainer.ckpt.write import RankDeviceWriter, writer_share, written_sums
from trainer.loop.optim import resume_refusal
from trainer.loop.state import TrainState
from trainer.parallel import Dist
from trainer.wire import ckpt_digest, ckpt_layout, ckpt_owner, ckpt_paths
from trainer.wire.ckpt_layout import DCP_META, META, SHARDS
from trainer.wire.config import CheckpointConfig, SettingError
from trainer.wire.protocol import RUN_ID_ENV


def list_checkpoints(root: Path | str) -> list[ckpt_layout.CheckpointInfo]:
    return open_store(str(root)).list()


def newest_complete(root: Path | str) -> Path | str | None:
    found = ckpt_owner.newest_whole(list_checkpoints(root))
    if found is None:
        return None
    return found.path if ckpt_paths.url_scheme(found.path) else Path(found.path)


class AppState(Stateful):
    """Model, optimiser, scheduler and trainer position, as DCP saves and restores them."""

    def __init__(self, model, optimizer, scheduler, trainer: TrainState,
                 options: StateDictOptions | None = None) -> None:
        self.model, self.optimizer, self.scheduler, self.trainer = model, optimizer, scheduler, trainer
        """The trainer's position: the run's :class:`trainer.loop.state.TrainState`."""
        self.options = options
        """What of the model is saved and restored (LoRA: the trainable weights only)."""
        self.with_cuda_rng = True
        """Off while loading a checkpoint saved without a CUDA generator (on CPU, or by an older trainer):
        the state DCP loads into must not ask for what the checkpoint does not hold."""

    def state_dict(self) -> dict[str, Any]:
        model_sd, optim_sd = get_state_dict(self.model, self.optimizer, options=self.options)
        return {"model": model_sd, "optim": optim_sd, "sched": self.scheduler.state_dict(),
                "trainer": self.trainer.state_dict(), "rng": torch.get_rng_state(),
                **(_cuda_rng() if self.with_cuda_rng else {})}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        refusal = resume_refusal(state["optim"], self.optimizer)
        if refusal is not None:
            raise SettingError(refusal)
        set_state_dict(self.model, self.optimizer, model_state_dict=state["model"],
                       optim_state_dict=state["optim"], options=self.options)
        self.scheduler.load_state_dict(state["sched"])
        self.trainer.load_state_dict(state["trainer"])
        torch.set_rng_state(state["rng"])
        if "cuda_rng" in state and torch.cuda.is_available():
            torch.cuda.set_rng_state(state["cuda_rng"])

    @property
    def step(self) -> int:
        """The step this state stands at."""
        return self.trainer.step


def _holds(reader, key: str) -> bool:
    """Whether the DCP checkpoint ``reader`` reads has an entry ``key`` (read from its metadata only)."""
    try:
        return key in reader.read_metadata().state_dict_metadata
    except (OSError, ValueError, EOFError):
        return True  # unreadable metadata: the load itself says why


def _cuda_rng() -> dict[str, torch.Tensor]:
    """This rank's CUDA generator (dropout on the device), when there is one."""
    return {"cuda_rng": torch.cuda.get_rng_state()} if torch.cuda.is_available() else {}


class Checkpointer:
    def __init__(self, cfg: CheckpointConfig, output_dir: str, d: Dist, meta: dict[str, Any]) -> None:
        self.cfg, self.d = cfg, d
        self.run_id = os.environ.get(RUN_ID_ENV) or None
        """The fsdp-tui run this job belongs to, recorded in each checkpoint: its prune touches only its own."""
        self.lineage = ckpt_owner.Lineage.of(self.run_id, cfg.resume_runs)
        """Whose checkpoints this run may read (its own and the runs it continues) and prune (its own):
        :mod:`trainer.wire.ckpt_owner`'s rule, the one the launcher asks too."""
        self.meta = {**meta, "run_id": self.run_id}
        self.root = ckpt_paths.checkpoints_root(output_dir)
        self.store = open_store(self.root)
        """Where the checkpoints are: this node's folder, or a bucket every rank writes directly."""
        if self.store.is_bucket and cfg.staging_dir:
            raise SettingError(f"parameters.checkpoint.staging_dir: a bucket output_dir ({output_dir}) is written "
                               "by every rank directly; remove staging_dir")
        self.staging = Path(cfg.staging_dir).expanduser() if cfg.staging_dir else None
        # Async saves run collectives from a background thread: give them their own group.
        self.group = dist.new_group(backend="gloo") if cfg.async_save else None
        self.stager = ReusingStager(d.device) if cfg.async_save else None
        self.pending: tuple[Any, str, str, int, dict[str, Any] | None, Any] | None = None
        self.staged: Any = None
        """Completes when the last async save's copy to host memory is done."""
        self.submit_s = 0.0
        """How long the last async save's submit blocked training (its copy is waited for later)."""
        self.saved_step: int | None = None
        """The step of the checkpoint this run last saved or resumed from."""
        self.resume_facts: Callable[[], dict[str, Any] | None] | None = None
        """What a save records for a later resume to check (``meta.json``'s ``resume``), asked at the save."""
        self.loaded_meta: dict[str, Any] | None = None
        """The ``meta.json`` of the checkpoint this run resumed from (read on rank 0)."""

    def resume_path(self) -> str | None:
        """The checkpoint to resume from, decided by rank 0 and shared, so every rank agrees: with ``auto``
        the newest whole one this run may read (its own or its lineage's, :mod:`trainer.wire.ckpt_owner`)
        whose bytes are the ones written; a named one must be whole and hold them too."""
        choice: list = [None]
        if self.d.is_main:
            if self.cfg.resume == "never":
                choice[0] = None
            elif self.cfg.resume == "auto":
                choice[0] = self._newest_readable()
            else:
                path = self.cfg.resume
                path = path if ckpt_paths.url_scheme(path) else os.path.expanduser(path)
                store = open_store(os.path.dirname(path.rstrip("/")))
                verdict = store.judge(path)
                differs = store.verify(path) if verdict.complete else ()
                if not verdict.complete:
                    choice[0] = SettingError(f"parameters.checkpoint.resume: '{path}' is not a whole checkpoint: "
                                             f"{verdict.why_not()}{_where_missing(verdict)}")
                elif differs:
                    choice[0] = SettingError(f"parameters.checkpoint.resume: '{path}' is not a whole checkpoint: "
                                             f"{ckpt_digest.words(differs)}; resume from another one "
                                             "(fsdp-tui ckpt RUN lists them)")
                else:
                    choice[0] = path
        dist.broadcast_object_list(choice, src=0)
        if isinstance(choice[0], Exception):
            raise choice[0]
        return choice[0]

    def _newest_readable(self) -> str | None:
        """``resume: auto`` on rank 0: the newest whole checkpoint of this run or its lineage whose bytes
        check out (one that does not is marked, said, and passed over); another run's is said and skipped."""
        listed = self.store.list()
        newest = ckpt_owner.newest_whole(listed)
        if newest is not None and not self.lineage.may_read(newest):
            print(f"resume: auto: {newest.name} is run {newest.run_id or '(not recorded)'}'s, which this run does "
                  "not continue (checkpoint.resume_runs): it is not read", flush=True)
        for c in ckpt_owner.resume_candidates(listed, self.lineage):
            differs = self.store.verify(c.path)
            if not differs:
                return c.path
            print(f"resume: auto: {c.name} is not whole: {ckpt_digest.words(differs)}; trying an older one",
                  flush=True)
        return None

    def load(self, state: AppState, path: Path | str) -> None:
        path = str(path)
        local, done = local_copy(path, self.root, self.d) if self.d.world > 1 else (path, lambda: None)
        state.with_cuda_rng = _holds(self.store.reader(local), "app.cuda_rng")  # a CPU run's checkpoint on a GPU
        try:
            dcp.load({"app": state}, storage_reader=self.store.reader(local))
        except SettingError:  # AppState's own one line
            raise
        except (CheckpointException, ValueError, KeyError, OSError) as err:
            raise SettingError(self._cannot_resume(path, local, err)) from None
        finally:
            state.with_cuda_rng = True
        done()
        self.saved_step = state.step
        if self.d.is_main:
            self.loaded_meta = ckpt_layout.parse_meta(self.store.read_meta(local) or "{}")

    def _cannot_resume(self, path: str, local: str, err: BaseException) -> str:
        """Why ``path`` cannot be loaded, and what to do: a shard that is not there (where it is), or a
        checkpoint of another model or optimiser."""
        if isinstance(err, CheckpointException) and err.failures:
            err = next(iter(err.failures.values()))[0]
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        here = f" (as node {node_index(self.d)} received it: {local})" if local != path else ""
        if isinstance(err, FileNotFoundError):
            verdict = self.store.judge(local) if not self.store.is_bucket else None
            missing = f": {verdict.why_not()}{_where_missing(verdict)}" if verdict and not verdict.complete else ""
            return (f"{path}: parameters.checkpoint.resume: cannot resume, a file of the checkpoint is missing on "
                    f"node {node_index(self.d)}{here}: {err.filename or reason}{missing}")
        saved = (ckpt_layout.parse_meta(self.store.read_meta(local)) or {}).get("model_name", "?")
        return (f"{path}: parameters.checkpoint.resume: cannot resume from this checkpoint: {reason}. It was "
                f"saved for model '{saved}'; this run trains '{self.meta.get('model_name', '?')}'. To start "
                f"afresh, set checkpoint.resume: never or give the run another output_dir.")

    def save_once(self, state: AppState, step: int) -> None:
        """Save ``step`` unless this run already saved it (``every_steps``) or resumed from it."""
        if self.saved_step != step:
            self.save(state, step)

    def save(self, state: AppState, step: int) -> float:
        """Start a save of ``step``; returns the seconds it blocked training here: the whole save when
        synchronous, only the submit when async (the rest is :meth:`wait_staged`'s)."""
        start = time.perf_counter()
        self.wait()
        name = self._free_name(step)
        self.saved_step = step
        facts = self.resume_facts() if self.resume_facts is not None else None  # as of this step, not the finalize
        target = self.store.path(name)
        write_dir = str(self.staging / name) if self.staging else target
        # Only what this rank writes: an async save stages it in host memory before DCP plans.
        share = {"app": writer_share(state.state_dict(), self.d.rank, self.d.world)}
        writer = self.writer(write_dir)
        if self.cfg.async_save:
            response = dcp.async_save(share, checkpoint_id=write_dir, storage_writer=writer,
                                      process_group=self.group, async_stager=self.stager)
            self.staged = response.staging_completion
            self.pending = (response.upload_completion, write_dir, target, step, facts, writer)
            self.submit_s = time.perf_counter() - start
        else:
            dcp.save(share, checkpoint_id=write_dir, storage_writer=writer)
            self._finalize(write_dir, target, step, facts, written_sums(writer))
        return time.perf_counter() - start

    def writer(self, write_dir: Path | str):
        """DCP's writer for ``write_dir`` (a folder, or a bucket URL), writing from this rank's GPU."""
        if self.staging is not None or not self.store.is_bucket:
            return RankDeviceWriter(str(write_dir), self.d.device)
        return self.store.writer(str(write_dir), self.d.device)

    def wait_staged(self) -> tuple[float, float] | None:
        """Block until the last async save has copied the state to host memory: call it before the
        optimiser changes the weights (the copy overlaps the forward and backward before that).
        Returns how long that save blocked training, (its submit, this wait) in seconds, or ``None``
        when no copy was pending: both are checkpoint time, not training time."""
        if self.staged is None:
            return None
        start = time.perf_counter()
        self.staged.result()
        self.staged = None
        return self.submit_s, time.perf_counter() - start

    def close(self) -> None:
        self.wait()
        if self.stager is not None:
            self.stager.close()

    def wait(self) -> None:
        """Finish an async save (collective: every rank calls it at the same point)."""
        self.wait_staged()
        if self.pending is None:
            return
        future, write_dir, target, step, facts, writer = self.pending
        self.pending = None
        future.result()
        self._finalize(write_dir, target, step, facts, written_sums(writer))

    def _free_name(self, step: int) -> str:
        """A name no node has taken (collective): with one disk per node, a folder left on node 1 by an
        earlier attempt must not receive this save's shards."""
        taken = self.store.taken() | (set(os.listdir(self.staging)) if self.staging and self.staging.is_dir() else set())
        every: list = [None] * self.d.world
        dist.all_gather_object(every, sorted(taken))
        names = set().union(*every)
        n = 0
        while ckpt_layout.step_name(step, n) in names:
            n += 1
        return ckpt_layout.step_name(step, n)

    def _finalize(self, write_dir: str, target: str, step: int, facts: dict[str, Any] | None = None,
                  sums: dict[str, str] | None = None) -> None:
        """The save is written on every node: move it from staging, then list its shards (each node's
        own files, collective) with the digest of each (hashed by the rank that wrote it, as it wrote it)
        in ``meta.json``, which marks the save done."""
        if self.staging is not None:
            dist.barrier()
            if self.d.local_rank == 0:  # each node moves its own shard files
                os.makedirs(target, exist_ok=True)
                for f in Path(write_dir).iterdir():
                    if f.name != DCP_META:
                        shutil.move(str(f), os.path.join(target, f.name))
            dist.barrier()
            if self.d.is_main:
                shutil.move(os.path.join(write_dir, DCP_META), os.path.join(target, DCP_META))
                shutil.rmtree(write_dir, ignore_errors=True)
        mine = self.store.files(target) if self.d.local_rank == 0 and not (self.store.is_bucket and not
                                                                            self.d.is_main) else {}
        every: list = [None] * self.d.world
        dist.all_gather_object(every, (node_index(self.d), mine, sums or {}))
        if self.d.is_main:
            digests: dict[str, str] = {}
            for _node, _files, written in every:
                digests.update(written)
            shards: dict[str, dict[str, Any]] = {}
            for node, files, _written in sorted(every, key=lambda e: e[0]):
                for name, size in sorted(files.items()):
                    if name not in (DCP_META, META) and not name.startswith("."):
                        entry = {"bytes": size, "node": node, **({"sha256": digests[name]} if name in digests else {})}
                        shards.setdefault(name, entry)
            meta = {**self.meta, "step": step, "time": time.time(), "world_size": self.d.world,
                    "num_nodes": self.d.num_nodes, SHARDS: shards,
                    **({"metadata_sha256": digests[DCP_META]} if DCP_META in digests else {}),
                    **({"resume": facts} if facts else {})}
            self.store.write_meta(target, json.dumps(meta, indent=2))
            self._prune()

    def _prune(self) -> None:
        """``keep_last``: this run's own complete checkpoints beyond the newest K go; another run's (one
        this run resumed from, one of a run that shares ``output_dir``) are never this run's to delete
        (:func:`trainer.wire.ckpt_owner.to_prune`, the rule the launcher's gathers ask too)."""
        for old in ckpt_owner.to_prune(self.store.list(), self.lineage, self.cfg.keep_last):
            self.store.remove(old.path)


def _where_missing(verdict: ckpt_layout.Wholeness) -> str:
    """Where the missing shards of a split checkpoint are, and what makes it whole."""
    nodes = sorted({node for _, node in verdict.missing})
    if not nodes:
        return ""
    which = ", ".join(f"node {n}" for n in nodes)
    return (f"; they are in the same folder on {which}'s own disk (the launcher gathers them after each save "
            f"when the nodes do not share output_dir: fsdp-tui ckpt RUN says which checkpoints are whole)")


def export_hf(model, tokenizer, output_dir: str, name: str, d: Dist) -> str | None:
    """Gather a full state dict to rank 0 and write a Hugging Face folder (safetensors + tokenizer) in
    ``<output_dir>/hf/<name>`` (a new folder; for a bucket, written here first, then uploaded)."""
    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if not d.is_main:
        return None
    bucket = ckpt_paths.url_scheme(output_dir) is not None
    out_dir = Path("hf-export" if bucket else output_dir).expanduser() / "hf" / name
    tmp = out_dir.with_name(f".{out_dir.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, state_dict=state, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    if out_dir.exists():
        out_dir = out_dir.with_name(f"{out_dir.name}-{int(time.time())}")
    tmp.rename(out_dir)
    if not bucket:
        return str(out_dir)
    try:
        return open_store(ckpt_paths.checkpoints_root(output_dir)).upload(str(out_dir), f"hf/{out_dir.name}")
    finally:
        shutil.rmtree(out_dir.parent.parent, ignore_errors=True)
