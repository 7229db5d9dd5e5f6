"""DCP checkpoints that are complete only once finalised, resume, keep-last-K and Hugging Face export.

Layout: ``<output_dir>/checkpoints/step-00000100/`` holds DCP's shard files, its ``.metadata``
(written last by DCP) and our ``meta.json`` (written after that, stdlib-readable). A folder without
both is incomplete and never chosen for resume; a save never reuses an existing folder.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.staging import AsyncStager
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_state_dict,
)
from torch.distributed.checkpoint.stateful import Stateful

from trainer import ckpt_layout
from trainer.ckpt_layout import DCP_META, META, is_complete
from trainer.ckpt_write import RankDeviceWriter, tensor_bytes, writer_share
from trainer.config import CheckpointConfig, SettingError
from trainer.optim import resume_refusal
from trainer.parallel import Dist
from trainer.protocol import RUN_ID_ENV


def list_checkpoints(root: Path) -> list[ckpt_layout.CheckpointInfo]:
    return ckpt_layout.list_checkpoints(str(root))


def newest_complete(root: Path) -> Path | None:
    found = ckpt_layout.newest_complete(ckpt_layout.list_checkpoints(str(root)))
    return Path(found.path) if found else None


class AppState(Stateful):
    """Model, optimiser, scheduler and trainer position, as DCP saves and restores them."""

    def __init__(self, model, optimizer, scheduler, trainer: dict[str, Any],
                 options: StateDictOptions | None = None) -> None:
        self.model, self.optimizer, self.scheduler, self.trainer = model, optimizer, scheduler, trainer
        self.options = options
        """What of the model is saved and restored (LoRA: the trainable weights only)."""
        self.with_cuda_rng = True
        """Off while loading a checkpoint saved without a CUDA generator (on CPU, or by an older trainer):
        the state DCP loads into must not ask for what the checkpoint does not hold."""

    def state_dict(self) -> dict[str, Any]:
        model_sd, optim_sd = get_state_dict(self.model, self.optimizer, options=self.options)
        return {"model": model_sd, "optim": optim_sd, "sched": self.scheduler.state_dict(),
                "trainer": dict(self.trainer), "rng": torch.get_rng_state(),
                **(_cuda_rng() if self.with_cuda_rng else {})}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        refusal = resume_refusal(state["optim"], self.optimizer)
        if refusal is not None:
            raise SettingError(refusal)
        set_state_dict(self.model, self.optimizer, model_state_dict=state["model"],
                       optim_state_dict=state["optim"], options=self.options)
        self.scheduler.load_state_dict(state["sched"])
        self.trainer.update(state["trainer"])
        torch.set_rng_state(state["rng"])
        if "cuda_rng" in state and torch.cuda.is_available():
            torch.cuda.set_rng_state(state["cuda_rng"])


def _holds(path: Path, key: str) -> bool:
    """Whether the DCP checkpoint at ``path`` has an entry ``key`` (read from its metadata only)."""
    try:
        return key in dcp.FileSystemReader(str(path)).read_metadata().state_dict_metadata
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
        self.meta = {**meta, "run_id": self.run_id}
        self.root = Path(output_dir).expanduser() / "checkpoints"
        self.staging = Path(cfg.staging_dir).expanduser() if cfg.staging_dir else None
        # Async saves run collectives from a background thread: give them their own group.
        self.group = dist.new_group(backend="gloo") if cfg.async_save else None
        self.stager = ReusingStager(d.device) if cfg.async_save else None
        self.pending: tuple[Any, Path, Path, int] | None = None
        self.staged: Any = None
        """Completes when the last async save's copy to host memory is done."""
        self.submit_s = 0.0
        """How long the last async save's submit blocked training (its copy is waited for later)."""
        self.saved_step: int | None = None
        """The step of the checkpoint this run last saved or resumed from."""

    def resume_path(self) -> Path | None:
        """The checkpoint to resume from, decided by rank 0 and shared, so every rank agrees."""
        choice = [None]
        if self.d.is_main:
            if self.cfg.resume == "never":
                choice[0] = None
            elif self.cfg.resume == "auto":
                choice[0] = newest_complete(self.root)
            else:
                path = Path(self.cfg.resume).expanduser()
                if not is_complete(path):
                    choice[0] = SettingError(f"parameters.checkpoint.resume: '{path}' is not a complete checkpoint "
                                           f"(it needs {DCP_META} and {META})")
                else:
                    choice[0] = path
        dist.broadcast_object_list(choice, src=0)
        if isinstance(choice[0], Exception):
            raise choice[0]
        return choice[0]

    def load(self, state: AppState, path: Path) -> None:
        state.with_cuda_rng = _holds(path, "app.cuda_rng")  # a CPU run's checkpoint resumes on a GPU
        try:
            dcp.load({"app": state}, checkpoint_id=str(path))
        except SettingError:  # AppState's own one line
            raise
        except (CheckpointException, ValueError, KeyError) as err:
            raise SettingError(self._cannot_resume(path, err)) from None
        finally:
            state.with_cuda_rng = True
        self.saved_step = state.trainer["step"]

    def _cannot_resume(self, path: Path, err: BaseException) -> str:
        """Why ``path`` does not fit this run (another model, another optimiser), and what to do."""
        if isinstance(err, CheckpointException) and err.failures:
            err = next(iter(err.failures.values()))[0]
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        try:
            saved = json.loads((path / META).read_text()).get("model_name", "?")
        except (OSError, ValueError):
            saved = "?"
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
        name = [None]
        if self.d.is_main:
            name[0] = self._free_name(step)
        dist.broadcast_object_list(name, src=0)
        self.saved_step = step
        target = self.root / name[0]
        write_dir = (self.staging / name[0]) if self.staging else target
        # Only what this rank writes: an async save stages it in host memory before DCP plans.
        share = {"app": writer_share(state.state_dict(), self.d.rank, self.d.world)}
        writer = self.writer(write_dir)
        if self.cfg.async_save:
            response = dcp.async_save(share, checkpoint_id=str(write_dir), storage_writer=writer,
                                      process_group=self.group, async_stager=self.stager)
            self.staged = response.staging_completion
            self.pending = (response.upload_completion, write_dir, target, step)
            self.submit_s = time.perf_counter() - start
        else:
            dcp.save(share, checkpoint_id=str(write_dir), storage_writer=writer)
            self._finalize(write_dir, target, step)
        return time.perf_counter() - start

    def writer(self, write_dir: Path) -> RankDeviceWriter:
        """DCP's file writer for ``write_dir``, writing from this rank's GPU in every thread."""
        return RankDeviceWriter(str(write_dir), self.d.device)

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
        future, write_dir, target, step = self.pending
        self.pending = None
        future.result()
        self._finalize(write_dir, target, step)

    def _free_name(self, step: int) -> str:
        n = 0
        while ((self.root / ckpt_layout.step_name(step, n)).exists()
               or (self.staging and (self.staging / ckpt_layout.step_name(step, n)).exists())):
            n += 1
        return ckpt_layout.step_name(step, n)

    def _finalize(self, write_dir: Path, target: Path, step: int) -> None:
        if self.staging is not None:
            dist.barrier()
            if self.d.local_rank == 0:  # each node moves its own shard files
                target.mkdir(parents=True, exist_ok=True)
                for f in write_dir.iterdir():
                    if f.name != DCP_META:
                        shutil.move(str(f), target / f.name)
            dist.barrier()
            if self.d.is_main:
                shutil.move(str(write_dir / DCP_META), target / DCP_META)
                shutil.rmtree(write_dir, ignore_errors=True)
        if self.d.is_main:
            meta = {**self.meta, "step": step, "time": time.time(), "world_size": self.d.world}
            tmp = target / f".{META}.tmp"
            tmp.write_text(json.dumps(meta, indent=2))
            os.replace(tmp, target / META)
            self._prune()

    def _prune(self) -> None:
        """``keep_last``: this run's own complete checkpoints beyond the newest K go; another run's (one
        this run resumed from, one of a run that shares ``output_dir``) are never this run's to delete."""
        if not self.cfg.keep_last:
            return
        own = [c for c in ckpt_layout.list_checkpoints(str(self.root))
               if ckpt_layout.written_by(c.path) == self.run_id]
        for old in ckpt_layout.to_prune(own, self.cfg.keep_last):
            shutil.rmtree(old.path, ignore_errors=True)


class ReusingStager(AsyncStager):
    """Copies the state to host memory on a side thread, into host buffers allocated at the first save
    and reused by every later one (pinned on CUDA), so the copy overlaps the next step's compute.

    torch's ``DefaultStager`` does the same on 2.13+, but on 2.11 it closes its ``StateDictStager``
    after every stage: that empties the copier's type table (the next save dies with ``KeyError:
    <class 'type'>``) and drops the buffers. This one keeps its copier until :meth:`close`. On a GPU the
    copy runs on its own stream, after the compute stream's work up to the save (an event), with the
    thread on this rank's device (not a new context on GPU 0)."""

    _synchronize_after_execute = False

    def __init__(self, device: torch.device) -> None:
        from concurrent.futures import ThreadPoolExecutor

        from torch.distributed.checkpoint._state_dict_stager import StateDictStager

        self.cuda = device.type == "cuda"
        self.staged_bytes = 0
        """The tensor bytes the last save copied to host memory on this rank."""
        self.copier = StateDictStager(pin_memory=self.cuda, share_memory=False)
        if self.cuda:
            self.stream = torch.cuda.Stream(device)
            self.executor = ThreadPoolExecutor(1, initializer=torch.cuda.set_device, initargs=(device,))
        else:
            self.stream = None
            self.executor = ThreadPoolExecutor(1)

    def stage(self, state_dict: dict[str, Any]) -> Future:
        ready = torch.cuda.current_stream().record_event() if self.cuda else None
        return self.executor.submit(self._copy, state_dict, ready)

    def _copy(self, state_dict: dict[str, Any], ready) -> dict[str, Any]:
        if self.stream is None:
            out = self.copier.stage(state_dict, non_blocking=False)
        else:
            self.stream.wait_event(ready)
            with torch.cuda.stream(self.stream):
                out = self.copier.stage(state_dict, non_blocking=True)
            self.stream.synchronize()
        self.staged_bytes = tensor_bytes(out)
        return out

    def synchronize_staging(self) -> None:
        """Nothing here: the trainer waits for the copy's future before the optimiser step."""

    def close(self) -> None:
        self.executor.shutdown(wait=True)
        self.copier.close()


def export_hf(model, tokenizer, out_dir: Path, d: Dist) -> Path | None:
    """Gather a full state dict to rank 0 and write a Hugging Face folder (safetensors + tokenizer)."""
    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if not d.is_main:
        return None
    out_dir = out_dir.expanduser()
    tmp = out_dir.with_name(f".{out_dir.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, state_dict=state, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    if out_dir.exists():
        out_dir = out_dir.with_name(f"{out_dir.name}-{int(time.time())}")
    tmp.rename(out_dir)
    return out_dir
