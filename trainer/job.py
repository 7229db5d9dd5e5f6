"""The run's parts, assembled from the rooms in the order the entry (``__main__.py``) calls them: the
choices made before the process group exists, the data and its order, the sharded model, the optimiser
with its checkpoints and their resume, the metrics, the steps, the export and the end of the job. Every
rank builds every part the same way.

Importing this module imports torch, transformers' pieces and every room: the entry does it with cyclic
garbage collection off (``__main__._start_up_without_gc``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from trainer import assets, parallel
from trainer.ckpt import checkpoint, resume_facts
from trainer.ckpt.resume import resume
from trainer.data import dataset
from trainer.data.mixture import MixedOrder
from trainer.data.rows import GlobalOrder
from trainer.data.stream import StreamOrder
from trainer.loop import loss, memory, metrics, optim, samples
from trainer.loop.steps import Steps
from trainer.lora import adapters as lora
from trainer.lora import qlora
from trainer.model import attention, packed_sdpa, router_loss
from trainer.model import build as model
from trainer.model.learned_logits import install as learned_logits_only
from trainer.wire import fit_advice
from trainer.wire.config import SettingError, TrainerConfig, torch_refusal
from trainer.wire.model_size import ModelSize
from trainer.wire.protocol import RUN_ID_ENV


@dataclass(frozen=True)
class Choices:
    """What the run settles before the process group exists (built-in assets are written then: Hugging Face
    writes files only on rank 0 once there is a group)."""

    hf_config: Any
    attention: attention.AttentionChoice
    router_coefficient: float | None
    router_note: str | None
    cross_entropy: loss.LossChoice
    """How the loss meets the vocabulary (``model.cross_entropy``)."""


def choose(cfg: TrainerConfig) -> Choices:
    """Refuse a torch or a node that cannot run ``cfg`` (one line, every rank), then make the built-in
    assets and choose the attention and the router loss from the model's config."""
    if torch_refusal(torch.__version__):
        raise SettingError(torch_refusal(torch.__version__))
    if qlora.refusal(cfg, torch.cuda.is_available()):
        raise SettingError(qlora.refusal(cfg, torch.cuda.is_available()))
    for name in (cfg.model_name, cfg.model.tokenizer or cfg.model_name):
        assets.resolve_model(name)
    hf_config = model.hf_config(cfg.model_name, cfg.model)
    device_kind = "cuda" if torch.cuda.is_available() else "cpu"
    support = model.attention_support(hf_config, cfg.model_name, cfg.model)
    coefficient, note = router_loss.choose(hf_config, cfg.model.router_aux_loss, support.router_loss)
    choice = attention.choose(cfg, hf_config.to_dict(), support, torch.device(device_kind))
    cross_entropy = loss.choose(cfg.model.cross_entropy, hf_config.to_dict(), cfg.per_device_batch_size,
                                cfg.max_seq_len, device_kind == "cuda")
    return Choices(hf_config, choice, coefficient, note, cross_entropy)


def start(cfg: TrainerConfig) -> parallel.Dist:
    """The process group, and the run's seed on every rank."""
    d = parallel.init_distributed()
    torch.manual_seed(cfg.seed)
    return d


@dataclass
class Data:
    tokenizer: Any
    rows: dataset.RunData
    order: GlobalOrder
    total: int
    """Optimiser steps of the whole run."""


def load_data(cfg: TrainerConfig, choices: Choices, d: parallel.Dist) -> Data:
    """The tokenizer, the rows (packed when the attention allows it), their order over the ranks and the
    number of steps they make."""
    tok = model.load_tokenizer(cfg.model_name, cfg.model)
    rows = dataset.build(cfg, tok, choices.attention.packing)
    try:
        if rows.stream is not None:
            order: GlobalOrder = StreamOrder(rows.stream, d.world, d.rank, cfg.per_device_batch_size)
        elif rows.mix is not None:
            order = MixedOrder(rows.mix, d.world, d.rank, cfg.per_device_batch_size, cfg.seed,
                                            cfg.data.shuffle)
        else:
            order = GlobalOrder(len(rows.train_rows), d.world, d.rank, cfg.per_device_batch_size, cfg.seed,
                                cfg.data.shuffle)
    except SettingError as err:  # too little data for one step
        raise SettingError(f"{cfg.data_label}: {err}") from None
    total = cfg.max_steps or max(1, order.batches_per_epoch * cfg.num_epochs // cfg.gradient_accumulation_steps)
    return Data(tok, rows, order, total)


@dataclass
class Built:
    net: nn.Module
    adapters: lora.Adapters | None
    sharding: parallel.Sharding
    compiled: bool
    compile_note: str | None
    shape: metrics.ModelShape
    size: ModelSize | None = None
    """What the memory prediction sizes (``None``: a model it cannot size)."""
    process_bytes: int = 0
    """This rank's resident memory before the model was built (a CPU rank's memory holds it too)."""


def build_model(cfg: TrainerConfig, choices: Choices, total: int, d: parallel.Dist) -> Built:
    """The model built without weights, given its adapters, activation checkpointing, compile and FSDP2
    sharding, then filled (QLoRA: loaded in 4-bit on this rank's GPU); the output layer runs on learned
    positions only."""
    compiled, compile_note = model.choose_compile(cfg.model.compile, d.device.type, total)
    chosen: list[parallel.Sharding] = []
    sized: list[ModelSize | None] = []
    adapters = lora.Adapters(cfg.lora, cfg.seed, cfg.model_name) if cfg.lora is not None else None
    before = memory.process_bytes()
    quantized = cfg.lora is not None and cfg.lora.quantize is not None

    def prepare(net: nn.Module) -> nn.Module:
        if adapters is not None:
            net = adapters.apply(net)
        sized.append(memory.model_size(choices.hf_config, net, quantized))  # what auto's choice predicts
        vocab = sized[0].vocab if sized[0] is not None else 0
        chosen.append(parallel.choose_sharding(cfg.fsdp, d, sized[0], memory.setup(cfg, d, "no_shard", choices.attention,
                                                                                    vocab),
                                               before if d.device.type == "cpu" else None))
        model.apply_activation_checkpointing(net, cfg.model.activation_checkpointing)
        if compiled:
            model.apply_compile(net)
        return parallel.shard_model(net, cfg.fsdp.model_copy(update={"sharding": chosen[0].sharding}), d,
                                    chosen[0].per_block)

    if choices.attention.per_example:
        packed_sdpa.register()
    if cfg.lora is not None and cfg.lora.quantize is not None:
        net = qlora.build(cfg, choices.attention.hf_name, d, prepare, adapters)
    else:
        net = model.build_model(cfg.model_name, cfg.model, choices.hf_config, choices.attention.hf_name, cfg.seed,
                                parallel.param_device(cfg.fsdp, d), prepare, buffer_device=d.device, adapters=adapters)
    learned_logits_only(net)  # the output layer runs on learned positions only
    loss.keep(net, choices.cross_entropy)  # and the loss over them in chunks, where chosen
    router_loss.keep(net, choices.router_coefficient)
    return Built(net, adapters, chosen[0], compiled, compile_note, metrics.ModelShape.of(net), sized[0], before)


@dataclass
class Training:
    """The optimiser and its schedule, the state a checkpoint keeps (step, epoch, data position), the
    checkpointer and what a resume must continue."""

    optimizer: torch.optim.Optimizer
    scheduler: Any
    state: dict[str, Any]
    app: checkpoint.AppState
    ckpt: checkpoint.Checkpointer
    proof: resume_facts.ResumeWatch

    def resume(self, cfg: TrainerConfig, data: Data, d: parallel.Dist) -> bool:
        """The checkpoint a resume asks for, loaded (:func:`trainer.ckpt.resume.resume`); ``True`` when it
        holds every step already."""
        return resume(self.ckpt, self.app, self.state, data.order, data.total, cfg.max_steps, self.scheduler,
                      self.proof, d.is_main)


def training(cfg: TrainerConfig, built: Built, data: Data, d: parallel.Dist) -> Training:
    opt = optim.build_optimizer(built.net, cfg.learning_rate, cfg.optim, d.device)
    sched = optim.build_scheduler(opt, data.total, cfg.optim)
    state = {"step": 0, "epoch": 0, "position": 0, "per_global": data.order.per_global, "total_steps": data.total}
    if data.rows.stream is not None:  # where the stream stands: rows taken, and its position in each source
        state.update(stream_rows=0, stream="")
    state_of = lora.AdapterState if built.adapters else checkpoint.AppState
    app = state_of(built.net, opt, sched, state)
    ckpt = checkpoint.Checkpointer(cfg.checkpoint, cfg.output_dir, d, {
        "model_name": cfg.model_name, "tokenizer": cfg.model.tokenizer or cfg.model_name,
        "run_id": os.environ.get(RUN_ID_ENV, ""), **lora.checkpoint_meta(cfg)})
    proof = resume_facts.ResumeWatch(order=data.order, rows=data.rows.train_rows,
                                     accum=cfg.gradient_accumulation_steps, seed=cfg.seed,
                                     sharding=built.sharding.sharding, dataset=cfg.data_label,
                                     run_id=os.environ.get(RUN_ID_ENV) or None, epoch_counted=not cfg.max_steps,
                                     is_main=d.is_main, scheduler=sched,
                                     continues=tuple(cfg.checkpoint.resume_runs))  # what a resume must continue
    ckpt.resume_facts = lambda: proof.record(state)
    return Training(opt, sched, state, app, ckpt, proof)


def start_logging(cfg: TrainerConfig, choices: Choices, data: Data, built: Built, run: Training, d: parallel.Dist,
                  start_up_s: tuple[float, float]) -> metrics.MetricsLogger:
    """The metrics logger, once rank 0 has said what the run chose and how long data and model took."""
    log = metrics.MetricsLogger(d, built.shape, data.total, metrics.peak_flops(d, cfg.logging.peak_tflops))
    if d.is_main:
        rows = data.rows
        for note in (*choices.attention.notes, *rows.notes, choices.router_note, choices.cross_entropy.note,
                     built.sharding.note, built.compile_note, built.adapters and built.adapters.summary(built.net),
                     optim.decay_note(run.optimizer)):
            if note:
                print(note, flush=True)
        print(f"data: {rows.summary.words()}", flush=True)
        log.data(rows.summary)
        print(metrics.mfu_note(built.shape, log.peak), flush=True)
        print(f"training {cfg.model_name}: {built.shape.num_params / 1e6:.2f}M params, {d.world} ranks, "
              f"{'streamed' if rows.stream is not None else len(rows.train_rows)} rows "
              f"({rows.summary.format}{', packed' if choices.attention.packing else ''}), "
              f"{data.total} steps; start-up: data {start_up_s[0]:.1f} s, model {start_up_s[1]:.1f} s", flush=True)
    if built.size is not None:  # the memory prediction, beside which each rank's peak is measured
        log.fit(*_fit(cfg, choices, built, d))
    return log


def _fit(cfg: TrainerConfig, choices: Choices, built: Built, d: parallel.Dist):
    """This run's memory prediction as a record, and the lines that say it against the rank's memory."""
    size = built.size
    assert size is not None
    setup = memory.setup(cfg, d, built.sharding.sharding, choices.attention, size.vocab)  # type: ignore[arg-type]
    room = memory.budget(d)
    before = built.process_bytes if d.device.type == "cpu" else None
    said = fit_advice.verdict(size, setup, room, lora_possible=not cfg.model.from_scratch, process_bytes=before)
    return memory.summary(said.prediction, room, built.process_bytes), said.lines()


def steps(cfg: TrainerConfig, choices: Choices, data: Data, built: Built, run: Training, log: metrics.MetricsLogger,
          d: parallel.Dist) -> Steps:
    """The steps with their cadence, and the sampler when ``samples`` asks for one."""
    sampler = samples.build(cfg, data.tokenizer, data.rows, d, choices.hf_config)
    return Steps(cfg, net=built.net, optimizer=run.optimizer, scheduler=run.scheduler, data=data.rows,
                 order=data.order, total=data.total, state=run.state, d=d, log=log, ckpt=run.ckpt, app=run.app,
                 proof=run.proof, sampler=sampler, compiled=built.compiled)


def export(cfg: TrainerConfig, built: Built, data: Data, d: parallel.Dist, step: int) -> None:
    """The Hugging Face export ``checkpoint.export_hf`` asks for (LoRA: the adapter, and merged when
    ``export_merged``), under ``<output_dir>/hf/step-N``."""
    if built.adapters is not None and (cfg.checkpoint.export_hf or cfg.checkpoint.export_merged):
        from trainer.lora import export as lora_export

        lora_export.export_in_job(built.net, data.tokenizer, cfg, Path(cfg.output_dir) / "hf" / f"step-{step:08d}", d)
    elif cfg.checkpoint.export_hf:
        out = checkpoint.export_hf(built.net, data.tokenizer, cfg.output_dir, f"step-{step:08d}", d)
        if out is not None:
            print(f"exported Hugging Face model to {out}", flush=True)


def end() -> None:
    """Every rank here, then the process group gone."""
    dist.barrier()
    dist.destroy_process_group()
