"""The built-in trainer's parameters: a torch-free schema shared with the launcher.

The launcher validates a workload's ``parameters`` block against :class:`TrainerConfig` when the
workload has no ``command`` (the built-in trainer runs). The flat names of the Databricks ``air``
recipe (``model_name``, ``dataset_name``, ``max_seq_len``, ...) are accepted as they stand; everything
else lives in one nested section per component, as torchtitan's job config does (the data's sections:
:mod:`trainer.wire.data_config`).
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from trainer.wire.data_config import DataConfig, DataSource
from trainer.wire.section import Section


class SettingError(ValueError):
    """A run the trainer refuses: the message names the dotted key (``parameters.x.y``), the file where
    there is one, and what to do. The entry point turns it into a one-line exit on every rank."""


MIN_TORCH = (2, 11)
"""The oldest torch the trainer's tests pass on (``benchmarks/torch_versions.sh``; BENCHMARKS.md)."""


def torch_refusal(version: str) -> str | None:
    """Why the trainer will not run on torch ``version`` (e.g. ``2.10.0+cu128``), or ``None``."""
    digits = [int("".join(c for c in part if c.isascii() and c.isdigit()) or 0)
              for part in version.split("+")[0].split(".")[:2]]
    if tuple(digits) >= MIN_TORCH:
        return None
    need = ".".join(map(str, MIN_TORCH))
    return (f"torch {version}: the trainer is verified on torch {need} and later (FSDP2, async checkpoints); "
            f"install a newer one on this node (pip install 'torch>={need}') or set environment.python to an "
            "interpreter that has one")


class ModelConfig(Section):
    """How the model is built."""

    from_scratch: bool = False
    """Initialise random weights from the model's config instead of loading its weights."""
    tokenizer: str | None = None
    """Tokenizer path or hub id; defaults to ``model_name``."""
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    """Parameter dtype of the sharded model: ``auto`` is fp32 (mixed precision does the rest)."""
    attention: Literal["auto", "sdpa", "flex", "eager"] = "auto"
    """Attention kernel; ``auto`` takes sdpa where the model supports it, else eager. Packed rows get
    a boolean block mask (sdpa), an additive float mask (eager) or a ``BlockMask`` (flex, CUDA only);
    with ``auto`` on CPU, rows of 256+ tokens take sdpa once per example instead (same result, less
    work; ``sdpa`` by name keeps the mask)."""
    activation_checkpointing: Literal["off", "full", "selective"] = "off"
    """Recompute activations in backward: ``full`` per block, ``selective`` every other block."""
    cross_entropy: Literal["auto", "chunked", "full", "fused"] = "auto"
    """How the loss meets the vocabulary. ``chunked``: the output layer and the cross-entropy run a chunk
    of learned positions at a time (32 MiB of fp32 logits on CPU, 256 MiB on a GPU:
    ``trainer.wire.cross_entropy``), each chunk's
    gradients taken as it goes, so a micro-batch's full logits and their gradient never exist (at 8k
    tokens and a 128k vocabulary they are 4 GiB each); the same loss and gradients as ``full``, which
    computes them whole. ``auto``: chunked where a micro-batch's logits are more than one chunk.
    ``fused``: Liger Kernel's fused linear cross-entropy (CUDA, ``pip install liger-kernel``), for a plain
    output layer. The start of the run says which."""
    compile: bool | Literal["auto"] = "auto"
    """Wrap each decoder block in ``torch.compile``. ``auto`` compiles on GPUs for runs of at least
    500 optimiser steps (long enough for the one-off compile to pay back), never on CPU (a C++
    compiler on every node, minutes of compiling for a small gain)."""
    trust_remote_code: bool = False
    """Allow model code from the model folder (only for models you trust)."""
    router_aux_loss: bool | None = None
    """Add a mixture-of-experts model's router load-balancing loss (``router_aux_loss_coef`` times it,
    as transformers adds it), logged as ``router_aux_loss``. ``null`` follows the model's config
    (``output_router_logits``, which most published MoE configs leave off for inference); ``true``
    trains with it, ``false`` without."""


class OptimConfig(Section):
    """AdamW and its learning-rate schedule."""

    weight_decay: float = Field(default=0.0, ge=0.0)
    """Decoupled weight decay, on weights only: biases and normalisation weights (LayerNorm, RMSNorm,
    names with ``bias``/``norm``) are not decayed, as Hugging Face ``Trainer`` does."""
    decay_bias_and_norm: bool = False
    """Decay biases and normalisation weights too (every parameter, as a plain ``AdamW`` would)."""
    betas: tuple[float, float] = (0.9, 0.95)
    """AdamW betas."""
    eps: float = Field(default=1e-8, gt=0.0)
    """AdamW epsilon."""
    fused: bool | None = None
    """Use the fused AdamW kernel; left unset, it is used where the device supports it."""
    warmup_steps: int = Field(default=0, ge=0)
    """Linear warmup over this many steps: the first runs at ``learning_rate / warmup_steps``, the last of
    them at ``learning_rate``."""
    schedule: Literal["cosine", "linear", "constant"] = "cosine"
    """Decay after warmup."""
    min_lr_ratio: float = Field(default=0.1, ge=0.0, le=1.0)
    """Final learning rate as a share of ``learning_rate`` (cosine and linear)."""
    max_grad_norm: float | None = Field(default=1.0, gt=0.0)
    """Clip the global gradient norm to this; ``null`` disables clipping."""


class FsdpConfig(Section):
    """How parameters, gradients and optimiser state are sharded."""

    sharding: Literal["auto", "full_shard", "shard_grad_op", "hybrid_shard", "no_shard"] = "auto"
    """``auto`` keeps the model whole on every rank (``no_shard``: fastest) when the memory prediction
    says a rank holding it whole fits (docs/memory.md), and shards it otherwise (``full_shard``);
    ``full_shard`` (ZeRO-3), ``shard_grad_op`` (keep params after forward, ZeRO-2),
    ``hybrid_shard`` (shard within a node, replicate across nodes), ``no_shard`` (DDP-like)."""
    replicate_degree: int | None = Field(default=None, gt=0)
    """Replicas for ``hybrid_shard``; defaults to the number of nodes."""
    cpu_offload: bool = False
    """Keep sharded parameters and optimiser state in CPU memory."""
    mixed_precision: Literal["auto", "bf16", "fp32"] = "auto"
    """``auto``: bf16 params with fp32 gradient reduce on GPU, fp32 on CPU."""
    reduce_dtype: Literal["fp32", "bf16"] = "fp32"
    """Dtype of gradient reduce-scatter under bf16 mixed precision."""


class CheckpointConfig(Section):
    """Distributed (DCP) checkpoints and the final Hugging Face export."""

    every_steps: int | None = Field(default=None, gt=0)
    """Save a sharded checkpoint every N optimiser steps (``null``: only at the end)."""
    save_final: bool = True
    """Save a checkpoint when training ends."""
    keep_last: int | None = Field(default=3, gt=0)
    """Keep this many complete checkpoints; the newest complete one is never deleted."""
    async_save: bool = False
    """Save in the background so training is blocked only while tensors are staged."""
    staging_dir: str | None = None
    """Write checkpoints here first, then move them under ``output_dir`` when complete."""
    resume: str = "auto"
    """``auto`` (newest complete checkpoint in ``output_dir``), ``never``, or a checkpoint path."""
    resume_runs: list[str] = Field(default_factory=list)
    """The runs a resume continues, newest first (``fsdp-tui resume`` and the checkpoints screen set it):
    the resume check flags a checkpoint written by any other run. Empty: any run's checkpoint may be
    continued (a relaunch into a shared ``output_dir`` takes the newest on purpose)."""
    export_hf: bool = True
    """Write a consolidated Hugging Face folder (safetensors + tokenizer) at the end; with ``lora``, the
    adapter in PEFT's format (``adapter_config.json`` + ``adapter_model.safetensors``)."""
    export_merged: bool = False
    """With ``lora``: also write the base model with the adapter merged into its weights, a folder
    ``AutoModelForCausalLM.from_pretrained`` loads (written shard by shard from the base's files)."""
    gather_to: str = "node0"
    """Where each checkpoint is made whole when the nodes keep ``output_dir`` on their own disks (the
    launcher copies every node's shards there after each save): ``node0`` (node 0's ``output_dir``),
    ``here`` (this machine, in the run's record; ``here:PATH`` a folder here) or ``nodeN:PATH`` (a
    folder on node N)."""

    @field_validator("gather_to")
    @classmethod
    def _gather_to(cls, value: str) -> str:
        if not re.fullmatch(r"node0|here(:.+)?|node[0-9]+:.+", value):
            raise ValueError(f"'{value}' is not a place: node0, here, here:PATH or nodeN:PATH (node1:/data/ckpts)")
        return value


class SamplesConfig(Section):
    """Generation samples: rank 0 keeps the answers, every rank takes part in each forward."""

    prompts: list[str] = []
    """Prompts to answer, written as an instruction (rendered as the dataset's format renders a
    prompt: the alpaca template, or the chat template's user turn)."""
    eval_rows: int | None = Field(default=None, gt=0, le=64)
    """Also answer the prompts of this many rows of the evaluation split (their answers in the data are
    shown beside the model's)."""
    every_steps: int | None = Field(default=None, gt=0)
    """Generate every N optimiser steps (``null``: before training and at the end only)."""
    max_new_tokens: int = Field(default=32, gt=0, le=1024)
    """Tokens generated per answer (fewer when the model ends its answer)."""
    greedy: bool = True
    """The most likely token each time; ``false`` samples with ``temperature`` (seeded: the same
    answers on a rerun)."""
    temperature: float = Field(default=1.0, gt=0.0)
    """Softmax temperature when ``greedy`` is false."""

    @model_validator(mode="after")
    def _some(self) -> SamplesConfig:
        if not self.prompts and not self.eval_rows:
            raise ValueError("give prompts (a list of strings) or eval_rows (how many evaluation rows)")
        return self


class LoggingConfig(Section):
    """Progress lines, metrics records and evaluation cadence."""

    every_steps: int = Field(default=1, gt=0)
    """Emit a metrics record every N optimiser steps."""
    eval_every_steps: int | None = Field(default=None, gt=0)
    """Evaluate every N steps (``null``: at the start and the end only)."""
    eval_max_batches: int | None = Field(default=None, gt=0)
    """Cap evaluation at this many batches per rank."""
    eval_max_s: float | None = Field(default=60.0, gt=0)
    """End each evaluation after this many seconds (every rank at the same batch); ``null``: no limit."""
    peak_tflops: float | None = Field(default=None, gt=0.0)
    """Peak dense bf16 TFLOP/s per device for MFU, when the device is not recognised."""
    samples: SamplesConfig | None = None
    """What the model says as it learns: answers to a few prompts, generated at a cadence and kept
    with the run (the monitor's samples pane, ``fsdp-tui show RUN --samples``, MLflow)."""


class TrainingConfig(Section):
    """What the steps do when something goes wrong in them."""

    on_nan: Literal["stop", "skip_step", "continue"] = "stop"
    """A loss (or, before a checkpoint, a weight) that is NaN or infinite: ``stop`` ends the run there,
    failed, with ``loss is NaN at step N on rank R`` (found at the next logged step, so at most
    ``logging.every_steps - 1`` steps late; no checkpoint is saved after it, so the newest one is the
    safe step); ``skip_step`` skips that step's update and trains on (it reads the loss before every
    update: a wait for the device each step), stopping after 10 skipped in a row; ``continue`` says it
    once and trains on."""


class LoraConfig(Section):
    """LoRA adapters through PEFT (its own names): the base model stays frozen and sharded, only the
    adapters (and ``modules_to_save``) train, get gradients, optimiser state and checkpoints."""

    r: int = Field(default=8, gt=0)
    """Rank of each adapter (PEFT's ``r``)."""
    alpha: float = Field(default=16.0, gt=0.0)
    """Scaling numerator: the adapter's output is scaled by ``alpha / r`` (PEFT's ``lora_alpha``)."""
    dropout: float = Field(default=0.0, ge=0.0, lt=1.0)
    """Dropout on the adapter's input (PEFT's ``lora_dropout``)."""
    target_modules: list[str] | Literal["all-linear"] = "all-linear"
    """Module names to adapt, matched as PEFT matches them (``q_proj`` is every module whose name ends
    in ``.q_proj``), or ``all-linear``: every linear layer but the output layer."""
    modules_to_save: list[str] | None = None
    """Modules trained in full beside the adapters (e.g. ``lm_head``, ``embed_tokens``)."""
    quantize: Literal["nf4"] | None = None
    """``nf4``: load the frozen base in 4-bit through bitsandbytes (QLoRA); needs CUDA on every node."""


class TrainerConfig(Section):
    """Everything the built-in trainer reads from the parameters file."""

    model_name: str
    """Hugging Face model id or local folder (``from_pretrained``), or a config for ``from_scratch``."""
    dataset_name: str | None = None
    """Hub dataset name, a local json/jsonl/csv/parquet/arrow file, a folder saved by ``datasets``, or a
    bucket URL; or ``datasets`` instead, for a mixture."""
    datasets: list[DataSource] | None = Field(default=None, min_length=1)
    """A mixture of sources, each with a weight (or an epoch count): the rows of every step are drawn
    from them in those shares, deterministically by ``seed`` and step, whatever the world size."""
    output_dir: str
    """Where checkpoints and the final export go."""
    output_dir_shared: bool = False
    """An ``output_dir`` that runs of other workloads use too, on purpose: the launch then goes ahead
    (it is refused otherwise). Each run prunes (``keep_last``) only the checkpoints it wrote itself."""
    max_seq_len: int = Field(default=1024, gt=0)
    """Tokens per training sequence."""
    per_device_batch_size: int = Field(default=4, gt=0)
    """Sequences per rank per micro-step."""
    gradient_accumulation_steps: int = Field(default=1, gt=0)
    """Micro-steps per optimiser step."""
    learning_rate: float = Field(default=2e-5, gt=0.0)
    """Peak learning rate."""
    max_steps: int | None = Field(default=None, gt=0)
    """Stop after this many optimiser steps (``null``: run ``num_epochs``)."""
    num_epochs: int = Field(default=1, gt=0)
    """Passes over the training data when ``max_steps`` is not set."""
    seed: int = Field(default=42, ge=0, lt=2**32)
    """Seed for init, data order and dropout (0 to 2**32 - 1: torch's generators take it with room to spare)."""
    model: ModelConfig = ModelConfig()
    data: DataConfig = DataConfig()
    optim: OptimConfig = OptimConfig()
    fsdp: FsdpConfig = FsdpConfig()
    checkpoint: CheckpointConfig = CheckpointConfig()
    logging: LoggingConfig = LoggingConfig()
    training: TrainingConfig = TrainingConfig()
    lora: LoraConfig | None = None
    """Train LoRA adapters instead of every weight (``null``: full fine-tuning)."""

    @model_validator(mode="after")
    def _check(self) -> TrainerConfig:
        if self.checkpoint.resume not in ("auto", "never") and not self.checkpoint.resume.strip():
            raise ValueError("checkpoint.resume must be auto, never or a checkpoint path")
        if self.lora is not None and self.model.from_scratch:
            raise ValueError("lora: LoRA adapts a pretrained model's frozen weights and model.from_scratch has "
                             "none; remove lora, or set model.from_scratch: false")
        if self.checkpoint.export_merged and self.lora is None:
            raise ValueError("checkpoint.export_merged merges LoRA adapters: set lora, or remove export_merged")
        if (self.dataset_name is None) == (self.datasets is None):
            raise ValueError("give dataset_name (one source) or datasets (a mixture: a list of {path, weight})"
                             if self.dataset_name is None else "give dataset_name or datasets, not both")
        if self.datasets is not None:
            weights = [s.weight is not None for s in self.datasets]
            epochs = [s.epochs is not None for s in self.datasets]
            if any(weights) and not all(weights) or any(epochs) and not all(epochs):
                raise ValueError("datasets: give every source a weight, or every source an epoch count (or none: "
                                 "each source once)")
            labels = [s.label() for s in self.datasets]
            twice = sorted({x for x in labels if labels.count(x) > 1})
            if twice:
                raise ValueError(f"datasets: two sources are called {twice[0]}: give one a name")
        return self

    def sources(self) -> list[DataSource]:
        """The sources trained on: ``datasets``, or ``dataset_name`` as the one source."""
        return list(self.datasets) if self.datasets is not None else [DataSource(path=self.dataset_name or "")]

    def source_key(self, index: int) -> str:
        """The key that names source ``index`` in a message: ``parameters.dataset_name``, or a mixture's
        ``parameters.datasets[i].path``."""
        return "parameters.dataset_name" if self.datasets is None else f"parameters.datasets[{index}].path"

    def source_data(self, source: DataSource) -> DataConfig:
        """``data`` as it applies to ``source``: its own format, split and fields where it sets them."""
        own = {k: getattr(source, k) for k in ("format", "split", "eval_split", "data_files", "chat",
                                               "chat_template") if getattr(source, k) is not None}
        return self.data.model_copy(update=own)

    @property
    def data_label(self) -> str:
        """The data in a few words: ``dataset_name``, or the mixture's sources."""
        if self.datasets is None:
            return self.dataset_name or ""
        return "mixture of " + ", ".join(s.label() for s in self.datasets)
