"""A prediction (:mod:`trainer.wire.fit`) against a rank's memory: whether it fits, what would make it fit,
and ``fsdp.sharding: auto``'s choice. Standard library only: the launcher says it before a launch, the
trainer chooses by it.

A rank needs its predicted peak plus what is not a tensor of the run: on a GPU the CUDA context, NCCL's
buffers and the allocator's slack (:data:`GPU_RESERVE_GIB`, :data:`GPU_SLACK`); on CPU the process itself
(Python, torch, transformers, the data: :data:`CPU_PROCESS_GIB`, unless the trainer measured it).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from trainer.wire.config import TrainerConfig
from trainer.wire.fit import GIB, Prediction, Setup, Sharding, predict
from trainer.wire.model_size import ModelSize

GPU_RESERVE_GIB = 1.0
"""A GPU's memory that is not the run's tensors: the CUDA context, cuBLAS workspaces, NCCL's buffers."""
GPU_SLACK = 0.08
"""The caching allocator's fragmentation over the tensors' peak (reserved over allocated)."""
CPU_PROCESS_GIB = 0.5
"""A CPU rank's memory before its model: Python, torch, transformers and the data (0.42-0.47 GiB measured
here for the demo; the trainer measures its own)."""
FIT_SHARE = 0.9
"""The share of a rank's memory a run may need and still be said to fit (the rest is headroom)."""


@dataclass(frozen=True)
class Budget:
    """A rank's memory and where the figure comes from."""

    bytes: int
    source: str
    """In words: ``NVIDIA H100 80GB HBM3 on node0 (doctor)``, ``this machine's RAM / 2 ranks``, ..."""


try:  # the chunked cross-entropy's own rule, where the trainer has it (model.cross_entropy)
    from trainer.wire.cross_entropy import chunk_rows, logits_rows  # type: ignore[import-not-found]
except ImportError:  # a trainer without it holds every position's logits
    chunk_rows = logits_rows = None  # type: ignore[assignment]

CROSS_ENTROPY = "model.cross_entropy"


def loss_rows(cfg: TrainerConfig, positions: int, vocab: int, device: str) -> int | None:
    """Positions whose logits the run's loss holds at once (``None``: all of a micro-batch's), by the
    trainer's rule for its ``model.cross_entropy`` setting."""
    setting = getattr(cfg.model, "cross_entropy", "full")
    if logits_rows is None or setting == "full":
        return None
    rows = logits_rows(setting, positions, vocab, device == "cuda")
    return None if rows >= positions else rows


def chunk_of(vocab: int, device: str) -> int | None:
    """A chunk's positions for ``model.cross_entropy: chunked`` (``None``: the trainer has no chunks)."""
    return None if chunk_rows is None else chunk_rows(vocab, device == "cuda")


def setup_for(cfg: TrainerConfig, *, world: int, nodes: int, device: Literal["cuda", "cpu"],
              sharding: Sharding, packing: bool, per_example: bool = False,
              attention: Literal["sdpa", "eager", "flex"] = "sdpa", vocab: int = 0) -> Setup:
    """The prediction's settings of a trainer config on ``world`` ranks (``sharding`` resolved: not
    ``auto``); ``packing`` and ``per_example`` as the attention choice made them (the trainer knows them,
    the launcher reads the model's family); ``vocab``: the model's, for the loss's chunks."""
    bf16 = cfg.fsdp.mixed_precision == "bf16" or (cfg.fsdp.mixed_precision == "auto" and device == "cuda")
    quantized = cfg.lora is not None and cfg.lora.quantize is not None
    param_bytes = 2 if cfg.model.dtype == "bfloat16" or quantized else 4
    lora = cfg.lora
    targets = ("all-linear" if lora is None or lora.target_modules == "all-linear"
               else tuple(lora.target_modules))
    return Setup(world=world, nodes=nodes, device=device, sharding=sharding,
                 replicas=cfg.fsdp.replicate_degree or nodes, cpu_offload=cfg.fsdp.cpu_offload,
                 param_bytes=param_bytes, compute_bytes=2 if bf16 else param_bytes,
                 reduce_bytes=2 if bf16 and cfg.fsdp.reduce_dtype == "bf16" else 4,
                 checkpointing=cfg.model.activation_checkpointing, accumulation=cfg.gradient_accumulation_steps,
                 batch=cfg.per_device_batch_size,
                 logit_rows=loss_rows(cfg, cfg.per_device_batch_size * cfg.max_seq_len, vocab, device),
                 seq=cfg.max_seq_len, attention=attention, masked=packing and not per_example,
                 lora_rank=lora.r if lora is not None else None, lora_targets=targets,
                 lora_saved=tuple(lora.modules_to_save or ()) if lora is not None else (), quantized=quantized)


def need_bytes(prediction: Prediction, process_bytes: int | None = None) -> int:
    """What a rank needs of its memory: the peak, and what is not a tensor (``process_bytes``: a CPU rank's
    measured memory before its model)."""
    if prediction.setup.device == "cuda":
        return int(prediction.peak * (1 + GPU_SLACK) + GPU_RESERVE_GIB * GIB)
    base = process_bytes if process_bytes is not None else int(CPU_PROCESS_GIB * GIB)
    return prediction.peak + base


def choose_auto(size: ModelSize, setup: Setup, budget_bytes: int, process_bytes: int | None = None) -> Sharding:
    """``fsdp.sharding: auto``: keep the model whole on every rank (``no_shard``: no gathers, the fastest)
    when that fits in :data:`FIT_SHARE` of a rank's memory, else shard it (``full_shard``)."""
    if setup.world == 1:
        return "no_shard"
    whole = predict(size, replace(setup, sharding="no_shard"))
    return "no_shard" if need_bytes(whole, process_bytes) <= FIT_SHARE * budget_bytes else "full_shard"


@dataclass(frozen=True)
class Verdict:
    prediction: Prediction
    need: int
    budget: Budget | None
    tries: tuple[str, ...] = ()
    """Settings that would make it fit, each with what it would need (empty when it fits or is unknown)."""

    @property
    def fits(self) -> bool | None:
        return None if self.budget is None else self.need <= FIT_SHARE * self.budget.bytes

    def lines(self) -> list[str]:
        """What a dry run, the doctor, the editor and the trainer's first lines say."""
        p = self.prediction
        parts = ", ".join(f"{k} {_gib(v * GIB)}" for k, v in p.parts_gib().items() if v >= 0.0005)
        other = ("the CUDA context, NCCL and the allocator's slack" if p.setup.device == "cuda"
                 else "the process itself")
        ranks = f", {p.setup.world} ranks" if p.setup.world > 1 else ""
        head = (f"memory: each rank needs ~{_gib(self.need)} ({p.setup.sharding}{ranks}): the run's peak "
                f"{_gib(p.peak)} ({parts}) + {other} {_gib(self.need - p.peak)}")
        if not p.exact:
            head += " (approximate: this model's family is counted as a Llama-shaped decoder)"
        if self.budget is None:
            return [head, "  fits: unknown here (the rank's memory is not known: `fsdp-tui doctor FILE` asks the nodes)"]
        share = self.need / self.budget.bytes
        if self.fits:
            return [head, f"  fits: {share:.0%} of {_gib(self.budget.bytes)} ({self.budget.source})"]
        out = [head, f"  does not fit: {share:.0%} of {_gib(self.budget.bytes)} ({self.budget.source})"]
        out += [f"  try {t}" for t in self.tries] or ["  nothing in these settings makes it fit: more ranks, or "
                                                     "a GPU with more memory"]
        return out


def _gib(n: int | float) -> str:
    return f"{n / GIB:.1f} GiB" if n >= GIB else f"{n / 2**20:.0f} MiB"


def verdict(size: ModelSize, setup: Setup, budget: Budget | None, *, lora_possible: bool = True,
            process_bytes: int | None = None) -> Verdict:
    """The prediction against ``budget`` and, when it does not fit, what would: each setting alone that
    makes it fit, else the fewest of them together. ``lora_possible``: LoRA may be suggested (a
    pretrained model)."""
    pred = predict(size, setup)
    need = need_bytes(pred, process_bytes)
    if budget is None or need <= FIT_SHARE * budget.bytes:
        return Verdict(pred, need, budget)
    limit = FIT_SHARE * budget.bytes
    options = _options(setup, lora_possible, chunk_of(size.vocab, setup.device))
    fitting = []
    for words, changed in options:
        after = need_bytes(predict(size, changed), process_bytes)
        if after <= limit:
            fitting.append(f"{words} (~{_gib(after)})")
    if not fitting:  # together, in order, until it fits; a setting named again replaces its earlier value
        together = setup
        named: dict[str, str] = {}
        for words, changed in options:
            together = _merge(together, changed, setup)
            named[words.split(":", 1)[0]] = words
            after = need_bytes(predict(size, together), process_bytes)
            if after <= limit:
                fitting.append(" and ".join(named.values()) + f" (~{_gib(after)})")
                break
    return Verdict(pred, need, budget, tuple(fitting[:3]))


def _options(setup: Setup, lora_possible: bool, chunk: int | None) -> list[tuple[str, Setup]]:
    out: list[tuple[str, Setup]] = []
    if setup.sharding != "full_shard" and setup.world > 1:
        out.append(("fsdp.sharding: full_shard", replace(setup, sharding="full_shard")))
    if setup.checkpointing != "full":
        out.append(("model.activation_checkpointing: full", replace(setup, checkpointing="full")))
    if setup.logit_rows is None and chunk is not None and chunk < setup.batch * setup.seq:
        out.append((f"{CROSS_ENTROPY}: chunked", replace(setup, logit_rows=chunk)))
    batch = setup.batch
    while batch > 1:
        batch //= 2
        out.append((f"per_device_batch_size: {batch} (gradient_accumulation_steps x{setup.batch // batch} keeps "
                    "the batch)", replace(setup, batch=batch)))
    if setup.device == "cuda" and not setup.cpu_offload and not setup.quantized:
        out.append(("fsdp.cpu_offload: true", replace(setup, cpu_offload=True)))
    if setup.lora_rank is None and lora_possible:
        out.append(("lora: {r: 16} (adapters train, the base stays frozen)", replace(setup, lora_rank=16)))
    if setup.device == "cuda" and lora_possible and not setup.quantized and not setup.cpu_offload:
        out.append(("lora: {r: 16, quantize: nf4} (QLoRA)", replace(setup, lora_rank=setup.lora_rank or 16,
                                                                     quantized=True, param_bytes=2, compute_bytes=2)))
    return out


def _merge(base: Setup, changed: Setup, original: Setup) -> Setup:
    """``base`` with what ``changed`` altered from ``original``."""
    fields = {k: getattr(changed, k) for k in Setup.__dataclass_fields__ if getattr(changed, k) != getattr(original, k)}
    return replace(base, **fields)
