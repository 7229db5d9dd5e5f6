"""The run's parts, assembled from the rooms in the order the entry (``__main__.py``) calls them: the
choices made before the process group exists (the model's source, resolved once, and its adaptation:
full fine-tuning, LoRA or QLoRA, one component asked without telling them apart), the data and its
order, the sharded model, the optimiser with its checkpoints and their resume, then the :class:`Run` that
owns them: the metrics, the steps, the export. Every rank builds every part the same way.

Importing this module imports torch, transformers' pieces and every room: the entry does it with cyclic
garbage collection off (``trainer.wire.startup.imports_without_gc``).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from trainer import parallel
from trainer.ckpt import checkpoint, resume_facts
from trainer.ckpt.run import Checkpoints
from trainer.data import dataset
from trainer.data.mixture import MixedOrder
from trainer.data.rows import GlobalOrder
from trainer.data.stream import StreamOrder
from trainer.loop import loss, memory, metrics, optim, samples
from trainer.loop.parts import Around, Data, Trained
from trainer.loop.state import TrainState
from trainer.loop.steps import Steps
from trainer.lora import adaptation
from trainer.model import attention, packed_sdpa, router_loss
from trainer.model import build as model
from trainer.model.learned_logits import install as learned_logits_only
from trainer.model.source import ModelSource
from trainer.wire import fit_advice
from trainer.wire.config import SettingError, TrainerConfig, torch_refusal
from trainer.wire.model_size import ModelSize
from trainer.wire.protocol import RUN_ID_ENV


@dataclass(frozen=True)
class Choices:
    """What the run settles before the process group exists (built-in assets are written then: Hugging Face
    writes files only on rank 0 once there is a group)."""

    source: ModelSource
    """Where the model and tokenizer are read from (resolved here, once: built-in assets are made now)."""
    adapted: adaptation.FullFineTune
    """What trains of the model: full fine-tuning, LoRA or QLoRA (:mod:`trainer.lora.adaptation`)."""
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
    adapted = adaptation.of(cfg)
    refusal = adapted.refusal(torch.cuda.is_available())
    if refusal:
        raise SettingError(refusal)
    source = ModelSource.resolve(cfg.model_name, cfg.model.tokenizer)
    hf_config = model.hf_config(source, cfg.model)
    device_kind = "cuda" if torch.cuda.is_available() else "cpu"
    support = model.attention_support(hf_config, source, cfg.model)
    coefficient, note = router_loss.choose(hf_config, cfg.model.router_aux_loss, support.router_loss)
    choice = attention.choose(cfg, hf_config.to_dict(), support, torch.device(device_kind))
    cross_entropy = loss.choose(cfg.model.cross_entropy, hf_config.to_dict(), cfg.per_device_batch_size,
                                cfg.max_seq_len, device_kind == "cuda")
    return Choices(source, adapted, hf_config, choice, coefficient, note, cross_entropy)


def start(cfg: TrainerConfig) -> parallel.Dist:
    """The process group, and the run's seed on every rank."""
    d = parallel.init_distributed()
    torch.manual_seed(cfg.seed)
    return d


def load_data(cfg: TrainerConfig, choices: Choices, d: parallel.Dist) -> Data:
    """The tokenizer, the rows (packed when the attention allows it), their order over the ranks and the
    number of steps they make."""
    tok = model.load_tokenizer(choices.source, cfg.model)
    rows = dataset.build(cfg, tok, choices.attention.packing, choices.source)
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
    sharding: parallel.Sharding
    compiled: bool
    compile_note: str | None
    shape: metrics.ModelShape
    size: ModelSize | None = None
    """What the memory prediction sizes (``None``: a model it cannot size)."""
    process_bytes: int = 0
    """This rank's resident memory before the model was built (a CPU rank's memory holds it too)."""


def build_model(cfg: TrainerConfig, choices: Choices, total: int, d: parallel.Dist) -> Built:
    """The model built without weights, adapted (LoRA: its adapters), given activation checkpointing,
    compile and FSDP2 sharding, then filled (QLoRA: loaded in 4-bit on this rank's GPU); the output layer
    runs on learned positions only."""
    compiled, compile_note = model.choose_compile(cfg.model.compile, d.device.type, total)
    chosen: list[parallel.Sharding] = []
    sized: list[ModelSize | None] = []
    adapted = choices.adapted
    before = memory.process_bytes()

    def prepare(net: nn.Module) -> nn.Module:
        net = adapted.apply(net)
        sized.append(memory.model_size(choices.hf_config, net, adapted.base_parameters))  # what auto's choice predicts
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
    net = adapted.build(choices.source, choices.hf_config, choices.attention.hf_name, d, prepare)
    learned_logits_only(net)  # the output layer runs on learned positions only
    loss.keep(net, choices.cross_entropy)  # and the loss over them in chunks, where chosen
    router_loss.keep(net, choices.router_coefficient)
    return Built(net, chosen[0], compiled, compile_note, metrics.ModelShape.of(net), sized[0], before)


@dataclass
class Training:
    """The optimiser and its schedule, the state a checkpoint keeps (step, data position) and the run's
    checkpoints, which resume and save it with the proof of what a resume continued."""

    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    state: TrainState
    checkpoints: Checkpoints


def training(cfg: TrainerConfig, choices: Choices, built: Built, data: Data, d: parallel.Dist) -> Training:
    opt = optim.build_optimizer(built.net, cfg.learning_rate, cfg.optim, d.device)
    sched = optim.build_scheduler(opt, data.total, cfg.optim)
    state = TrainState.start(data.total, data.order.per_global, streamed=data.rows.stream is not None)
    app = choices.adapted.app_state(built.net, opt, sched, state)
    source = choices.source
    ckpt = checkpoint.Checkpointer(cfg.checkpoint, cfg.output_dir, d, {
        "model_name": source.name, "tokenizer": source.tokenizer, "run_id": os.environ.get(RUN_ID_ENV, ""),
        **choices.adapted.checkpoint_meta()})
    proof = resume_facts.ResumeWatch(order=data.order, rows=data.rows.train_rows,
                                     accum=cfg.gradient_accumulation_steps, seed=cfg.seed,
                                     sharding=built.sharding.sharding, dataset=cfg.data_label,
                                     run_id=os.environ.get(RUN_ID_ENV) or None, epoch_counted=not cfg.max_steps,
                                     is_main=d.is_main, scheduler=sched,
                                     continues=tuple(cfg.checkpoint.resume_runs))  # what a resume must continue
    return Training(opt, sched, state, Checkpoints(ckpt, app, state, proof))


@dataclass
class Run:
    """The run's parts, owned together once they are built: what was chosen, the process group, the data,
    the model, its training state and checkpoints. The entry asks it to resume, log, step and export."""

    cfg: TrainerConfig
    choices: Choices
    d: parallel.Dist
    data: Data
    built: Built
    training: Training
    start_up_s: tuple[float, float]
    """Seconds to load the data, then to build the model."""

    @property
    def checkpoints(self) -> Checkpoints:
        return self.training.checkpoints

    def resume(self) -> bool:
        """The checkpoint a resume asks for, loaded (:meth:`trainer.ckpt.run.Checkpoints.resume`); ``True``
        when it holds every step already."""
        return self.checkpoints.resume(self.data.order, self.cfg.max_steps, self.d.is_main)

    def start_logging(self) -> metrics.MetricsLogger:
        """The metrics logger, once rank 0 has said what the run chose and how long data and model took."""
        cfg, choices, data, built, d = self.cfg, self.choices, self.data, self.built, self.d
        log = metrics.MetricsLogger(d, built.shape, data.total, metrics.peak_flops(d, cfg.logging.peak_tflops))
        if d.is_main:
            rows = data.rows
            for note in (*choices.attention.notes, *rows.notes, choices.router_note, choices.cross_entropy.note,
                         built.sharding.note, built.compile_note, choices.adapted.summary(built.net),
                         optim.decay_note(self.training.optimizer)):
                if note:
                    print(note, flush=True)
            print(f"data: {rows.summary.words()}", flush=True)
            log.data(rows.summary)
            print(metrics.mfu_note(built.shape, log.peak), flush=True)
            print(f"training {choices.source.name}: {built.shape.num_params / 1e6:.2f}M params, {d.world} ranks, "
                  f"{'streamed' if rows.stream is not None else len(rows.train_rows)} rows "
                  f"({rows.summary.format}{', packed' if choices.attention.packing else ''}), {data.total} steps; "
                  f"start-up: data {self.start_up_s[0]:.1f} s, model {self.start_up_s[1]:.1f} s", flush=True)
        if built.size is not None:  # the memory prediction, beside which each rank's peak is measured
            log.fit(*_fit(cfg, choices, built, d))
        return log

    def steps(self, log: metrics.MetricsLogger) -> Steps:
        """The steps with their cadence, and the sampler when ``samples`` asks for one."""
        cfg, data, training, d = self.cfg, self.data, self.training, self.d
        sampler = samples.build(cfg, data.tokenizer, data.rows, d, self.choices.hf_config)
        trained = Trained(self.built.net, training.optimizer, training.scheduler, self.built.compiled)
        return Steps(cfg, trained, data, training.state, Around(log, self.checkpoints, self.checkpoints.proof,
                                                                sampler), d)

    def export(self) -> None:
        """The export the adaptation makes at the end (:meth:`trainer.lora.adaptation.FullFineTune.export`)."""
        self.choices.adapted.export(self.built.net, self.data.tokenizer, self.choices.source, self.training.state.step,
                                    self.d)


def assemble(cfg: TrainerConfig, choices: Choices, d: parallel.Dist) -> Run:
    """The data, the model and its training, made in that order (the first two timed for the start's line)."""
    started = time.perf_counter()
    data = load_data(cfg, choices, d)
    data_s = time.perf_counter() - started
    built = build_model(cfg, choices, data.total, d)
    build_s = time.perf_counter() - started - data_s
    return Run(cfg, choices, d, data, built, training(cfg, choices, built, data, d), (data_s, build_s))


def _fit(cfg: TrainerConfig, choices: Choices, built: Built, d: parallel.Dist):
    """This run's memory prediction as a record, and the lines that say it against the rank's memory."""
    size = built.size
    assert size is not None
    setup = memory.setup(cfg, d, built.sharding.sharding, choices.attention, size.vocab)  # type: ignore[arg-type]
    room = memory.budget(d)
    before = built.process_bytes if d.device.type == "cpu" else None
    said = fit_advice.verdict(size, setup, room, lora_possible=not cfg.model.from_scratch, process_bytes=before)
    return memory.summary(said.prediction, room, built.process_bytes), said.lines()


def end() -> None:
    """Every rank here, then the process group gone."""
    dist.barrier()
    dist.destroy_process_group()
