"""Will it fit: each rank's peak memory, predicted from the model's sizes and the run's settings alone.
Standard library only: the launcher predicts before anything starts (``run --dry-run``, ``doctor``, the
editor) from the model's ``config.json`` (:mod:`trainer.wire.model_size`), and the trainer predicts the
same way from the model it built, records the figure beside what each rank measured, and chooses
``fsdp.sharding: auto`` by it. One rule, here.

What a rank holds at its peak, in bytes (the device's: a GPU's tensors, or a CPU process's memory above
what it held before the model):

- **state**: parameters (stored dtype), gradients and AdamW's two moments of what trains, each split over
  the ranks that shard it (all of them, those of a node for ``hybrid_shard``, none for ``no_shard``); with
  ``cpu_offload`` in the host's memory instead of the GPU's;
- **gathered**: the whole parameters FSDP gathers for compute (bf16 under mixed precision): the root's
  (embeddings, output layer) for the whole step, and two blocks at a time (``full_shard``, ``hybrid_shard``)
  or every block from the forward to its backward (``shard_grad_op``, ``no_shard``); their whole gradients
  while they are reduced;
- **activations** saved for backward at the workload's batch and sequence length (packed rows are full;
  unpacked ones are counted at ``max_seq_len``, their worst case), by activation checkpointing: every
  block's (``off``), each block's input and one block's (``full``), or half of each (``selective``); the
  attention scores of the ``eager`` kernel; the packed rows' mask;
- **loss**: the output layer's logits over the vocabulary with their log-softmax and gradient, for every
  learned position of a micro-batch (the full logits), or for one chunk of positions at a time (the
  chunked cross-entropy: ``Setup.logit_rows``, the trainer's own rule for its ``model.cross_entropy``).

The peak is the largest of the moments that matter: the loss's backward (every activation still held),
and the last block's gradients reduced (the state's gradients whole). :mod:`trainer.wire.fit_advice`
turns a prediction into a verdict against a rank's memory and the settings that would make it fit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from trainer.wire.model_size import ModelSize

GIB = 1024**3
UNIT_BYTES = 25 * 2**20
"""The least an FSDP unit gathers (``trainer.parallel.UNIT_BYTES``: blocks smaller are wrapped together)."""
LOGIT_BYTES = {2: 12, 4: 12}
"""Bytes a logit costs at the loss's backward, by compute dtype size: the logits, their fp32 log-softmax
and its gradient (bf16: 2 + 4 + 4 and the gradient's bf16 cast; fp32: three fp32 copies, measured)."""
NF4_BYTES = 0.52
"""A 4-bit (NF4, double-quantised) weight's bytes with its share of the quantisation constants."""

Sharding = Literal["full_shard", "shard_grad_op", "hybrid_shard", "no_shard"]
STRATEGIES: tuple[Sharding, ...] = ("full_shard", "shard_grad_op", "hybrid_shard", "no_shard")


@dataclass(frozen=True)
class Setup:
    """The settings a prediction depends on, resolved (no ``auto`` left but ``sharding`` before a choice)."""

    world: int
    """Ranks over all nodes."""
    nodes: int
    device: Literal["cuda", "cpu"]
    sharding: Sharding
    replicas: int = 1
    """``hybrid_shard``'s replicas (the nodes by default): it shards over world / replicas ranks."""
    cpu_offload: bool = False
    param_bytes: int = 4
    """The stored dtype's size: 4 (``model.dtype: auto``, ``float32``) or 2 (``bfloat16``)."""
    compute_bytes: int = 4
    """2 under bf16 mixed precision (``auto`` on a GPU), else the stored size."""
    reduce_bytes: int = 4
    checkpointing: Literal["off", "full", "selective"] = "off"
    accumulation: int = 1
    """Micro-steps per optimiser step: past the first, the gradients are held through the forward too."""
    batch: int = 1
    seq: int = 1024
    attention: Literal["sdpa", "eager", "flex"] = "sdpa"
    masked: bool = False
    """Packed rows that carry an explicit mask (sdpa or eager through a mask, not once per example)."""
    logit_rows: int | None = None
    """Positions whose logits the loss holds at once: ``None`` for every learned position of a micro-batch
    (the full logits), a chunk's for the chunked cross-entropy."""
    lora_rank: int | None = None
    lora_targets: tuple[str, ...] | Literal["all-linear"] = "all-linear"
    lora_saved: tuple[str, ...] = ()
    """``modules_to_save``: trained in full beside the adapters."""
    quantized: bool = False
    """QLoRA: the frozen base's block weights in 4-bit."""

    @property
    def shard_ranks(self) -> int:
        if self.sharding == "no_shard":
            return 1
        if self.sharding == "hybrid_shard":
            return max(1, self.world // max(1, self.replicas))
        return self.world

    @property
    def replicated_on_cpu(self) -> bool:
        """A replicated model on CPU is plain replication (``trainer.parallel``): no FSDP copies."""
        return self.device == "cpu" and self.sharding == "no_shard" and self.compute_bytes == self.param_bytes \
            and not self.cpu_offload


@dataclass(frozen=True)
class Prediction:
    """One rank's predicted peak, in bytes, and its parts."""

    setup: Setup
    params: int
    grads: int
    optimizer: int
    gathered: int
    """Whole parameters (and their gradients while reduced) at the peak."""
    activations: int
    loss: int
    host: int
    """What ``cpu_offload`` keeps in the host's memory for this rank (0 without it)."""
    trainable: int
    """Parameters that train (all, or LoRA's adapters and ``modules_to_save``)."""
    exact: bool = True
    """The model's family was counted by its own rule (else as a Llama-shaped decoder)."""

    @property
    def peak(self) -> int:
        """The rank's device peak (a GPU's tensors; on CPU, the process's memory above its start)."""
        return self.params + self.grads + self.optimizer + self.gathered + self.activations + self.loss

    @property
    def peak_gib(self) -> float:
        return self.peak / GIB

    def parts_gib(self) -> dict[str, float]:
        """Each part in GiB, rounded for a record or a line."""
        parts = {"params": self.params, "grads": self.grads, "optimizer": self.optimizer, "gathered": self.gathered,
                 "activations": self.activations, "loss": self.loss}
        if self.host:
            parts["host (offload)"] = self.host
        return {k: round(v / GIB, 3) for k, v in parts.items()}


def lora_params(size: ModelSize, setup: Setup) -> int:
    """Adapter parameters: ``r x (inputs + outputs)`` for each adapted linear layer of the blocks."""
    if setup.lora_rank is None:
        return 0
    r = setup.lora_rank
    return sum(r * (i + o) * n for name, i, o, n in size.linears
               if setup.lora_targets == "all-linear" or name in setup.lora_targets)


def _saved_params(size: ModelSize, setup: Setup) -> int:
    names = set(setup.lora_saved)
    out = 0
    if names & {"lm_head", "embed_out", "output"}:
        out += size.output or size.embedding
    if names & {"embed_tokens", "wte", "word_embeddings", "embed_in"}:
        out += size.embedding
    return out


def predict(size: ModelSize, setup: Setup) -> Prediction:
    """The peak of one rank of a run of ``size`` set up as ``setup`` (symmetric: every rank alike)."""
    adapters = lora_params(size, setup)
    lora = setup.lora_rank is not None
    trainable = adapters + _saved_params(size, setup) if lora else size.total
    total = size.total + adapters
    pb, cb = setup.param_bytes, setup.compute_bytes
    stored = total * pb
    if setup.quantized:  # block weights in NF4, the rest (embeddings, output layer, norms) in bf16
        stored = int(size.blocks * NF4_BYTES + (size.total - size.blocks + adapters) * 2)
    s = setup.shard_ranks
    params, grads, optim = stored // s, trainable * pb // s, 2 * trainable * pb // s
    host = 0
    if setup.cpu_offload and setup.device == "cuda":
        host, params, grads, optim = params + grads + optim, 0, 0, 0
    g = _gathered(size, setup, adapters, trainable)
    acts = _activations(size, setup)
    block = _block_acts(size, setup, 1)
    tokens = setup.batch * setup.seq
    logit_bytes = LOGIT_BYTES.get(cb, 12)
    logits = (tokens if setup.logit_rows is None else min(tokens, setup.logit_rows)) * size.vocab * logit_bytes
    # Three moments bound the step: the loss's backward (every activation held, the logits and their
    # gradient), the last block's backward (every activation, the output layer's gradient, the blocks
    # gathered) and the end of backward (every gradient there, the activations gone but the first
    # block's). Gradients live from backward to the optimiser's step.
    held_grads = grads if setup.accumulation > 1 else 0
    moments = [(g.at_loss, acts, logits, held_grads), (g.at_last_block, acts + block // 2, 0, held_grads),
               (g.at_end, block, 0, grads)]
    gathered, activations, loss, grads = max(moments, key=sum)
    return Prediction(setup, params, grads, optim, g.held + gathered, activations, loss, host, trainable, size.exact)


@dataclass(frozen=True)
class _Whole:
    """Whole parameters and gradients beside the shards, in bytes: ``held`` all step (the last reduction's
    input, which FSDP keeps until the next one; plain replication's gradient buckets), and the rest at
    each moment of :func:`predict`."""

    held: int
    at_loss: int
    at_last_block: int
    at_end: int


def _unit_blocks(size: ModelSize, setup: Setup) -> int:
    """Blocks per FSDP unit (``trainer.parallel.block_groups``): enough for ``UNIT_BYTES`` of stored weights."""
    block_bytes = max(1, size.block * setup.param_bytes)
    budget = UNIT_BYTES * (2 if setup.compute_bytes < setup.param_bytes else 1)
    return max(1, math.ceil(budget / block_bytes))


def _gathered(size: ModelSize, setup: Setup, adapters: int, trainable: int) -> _Whole:
    cb, pb = (2 if setup.quantized else setup.compute_bytes), setup.param_bytes
    reduce = max(cb, setup.reduce_bytes)
    output = min(size.output or size.embedding, trainable)  # the output layer's gradient comes first
    if setup.replicated_on_cpu:  # DDP's buckets hold a second copy of every gradient
        return _Whole(trainable * pb, 0, output * pb, 0)
    per_unit = _unit_blocks(size, setup)
    units = size.layers // per_unit
    block = (size.blocks + adapters) // size.layers
    in_units = units * per_unit * block
    root = size.total + adapters - in_units  # the root's unit: embeddings, output layer, leftover blocks
    unit = block * per_unit if units else 0
    copies = 0 if setup.shard_ranks == 1 and cb == pb and setup.device == "cpu" else 1  # a one-rank shard is whole
    trained_unit = min(unit, trainable)
    trained_root = min(root, max(0, trainable - units * trained_unit))
    whole_root = root * cb * copies  # gathered from the forward's start to the end of backward
    if setup.sharding in ("shard_grad_op", "no_shard"):  # every block gathered from its forward to its backward
        at_loss = at_last = whole_root + in_units * cb * copies
    else:  # the block computing gathered (the next one is prefetched as its gradients are reduced)
        at_loss = at_last = whole_root + unit * cb * copies
    at_last += min(output, trained_root) * cb + trained_unit * (cb + reduce)
    at_end = whole_root + unit * cb * copies + trained_unit * reduce + trained_root * cb
    # FSDP keeps the last reduce-scatter's input (the root's whole gradients) until the next one.
    return _Whole(trained_root * reduce, at_loss, at_last, at_end)


def _block_acts(size: ModelSize, setup: Setup, blocks: int) -> int:
    """Bytes one block saves for backward over the batch, times ``blocks``."""
    h, inter, cb = size.hidden, size.intermediate, setup.compute_bytes
    q, kv = size.heads * size.head_dim, size.kv_heads * size.head_dim
    lora, targets = setup.lora_rank is not None, setup.lora_targets

    def trains(*names: str) -> bool:
        return not lora or targets == "all-linear" or any(n in targets for n in names)

    norm = 4 * h + (0 if lora else cb * h)  # the fp32 input and (when its weight trains) the normalised one
    per_token = 2 * norm
    per_token += cb * h * (trains("q_proj", "k_proj", "v_proj", "query_key_value", "c_attn") +
                           trains("gate_proj", "up_proj", "c_fc", "fc1", "dense_h_to_4h", "fc_in"))
    per_token += cb * (2 * q + 2 * kv)  # queries, keys, values, attention's output
    mlp = (3 if size.gated else 1) * inter + inter * trains("down_proj", "c_proj", "fc2", "dense_4h_to_h", "fc_out")
    if size.experts:
        mlp = mlp * max(1, size.experts_per_token) + size.experts  # each token through its experts; router logits
    per_token += cb * mlp
    if setup.attention == "eager":
        per_token += (4 + cb) * size.heads * setup.seq  # the softmax's fp32 scores and their cast
    return per_token * setup.batch * setup.seq * blocks


def _activations(size: ModelSize, setup: Setup) -> int:
    tokens = setup.batch * setup.seq
    h, cb, layers = size.hidden, setup.compute_bytes, size.layers
    if setup.checkpointing == "full":
        kept = tokens * h * cb * layers + _block_acts(size, setup, 1)  # each block's input; one recomputed
    elif setup.checkpointing == "selective":
        wrapped = (layers + 1) // 2
        kept = tokens * h * cb * wrapped + _block_acts(size, setup, layers - wrapped + 1)
    else:
        kept = _block_acts(size, setup, layers)
    kept += tokens * (4 * h + 2 * cb * h)  # the final norm, the output layer's input
    if setup.masked:
        kept += setup.batch * setup.seq * setup.seq * (1 if setup.attention != "eager" else cb)
    return kept

