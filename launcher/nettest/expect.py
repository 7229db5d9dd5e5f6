"""What FSDP can expect from the measured network: the bytes each rank moves per optimiser step for a
sharding strategy, the time that takes at the measured bus bandwidth, against the step's compute at a
stated MFU. Pure arithmetic on stated assumptions, so a user can redo it by hand.

Per rank and step, for ``P`` parameters on ``n`` ranks (``(n-1)/n`` of each collective's bytes cross
a rank's link, the bus-bandwidth convention):
- ``full_shard``: all-gather of the parameters in forward and again in backward, reduce-scatter of the
  gradients in the reduce dtype;
- ``shard_grad_op``: parameters are kept after forward, so one all-gather, and the reduce-scatter;
- ``no_shard``: one all-reduce of the gradients (twice the bytes of a reduce-scatter);
- ``hybrid_shard``: ``full_shard`` inside a node, then an all-reduce of each rank's gradient shard
  (``P / ranks per node``) across nodes.
"""

from __future__ import annotations

from dataclasses import dataclass

from launcher.nettest.figures import Measured, Scope
from launcher.words import plural

PEAK_TFLOPS = {"H100": 989.0, "H200": 989.0, "B200": 2250.0, "A100": 312.0, "A10": 125.0, "A10G": 70.0,
               "L4": 121.0, "L40S": 362.0, "V100": 125.0, "T4": 65.0, "MI300X": 1307.0}
"""Dense bf16 peak TFLOP/s per device (vendor data sheets), by the ``accelerator_type`` model name."""
DEFAULT_MFU = 0.4
"""The compute side's assumed model FLOPs utilisation: what a tuned FSDP run of a dense LLM reaches."""


@dataclass(frozen=True)
class Inputs:
    params: int
    sharding: str
    """``full_shard``, ``shard_grad_op``, ``hybrid_shard`` or ``no_shard`` (``auto`` is decided by the
    caller: a model big enough to care about the network is sharded)."""
    param_bytes: int
    """2 for bf16 parameters (GPU mixed precision), 4 for fp32."""
    reduce_bytes: int
    tokens_per_rank: int
    """Tokens one rank processes per optimiser step (batch x sequence x accumulation)."""
    peak_flops: float | None
    """One device's peak FLOP/s; ``None``: unknown (CPU), no compute comparison."""
    mfu: float = DEFAULT_MFU


@dataclass(frozen=True)
class Expectation:
    sharding: str
    bytes_per_rank: float
    comm_s: float
    compute_s: float | None
    lines: tuple[str, ...]
    """The verdict in words, each figure with what it assumed."""


def _ag_rs(ins: Inputs, n: int) -> tuple[float, float]:
    """(all-gather bytes, reduce-scatter bytes) one rank's link carries for one full pass on ``n`` ranks."""
    frac = (n - 1) / n if n > 1 else 0.0
    return ins.params * ins.param_bytes * frac, ins.params * ins.reduce_bytes * frac


def _busbw(scope: Scope | None, op: str, otherwise: float) -> float:
    """``op``'s bus bandwidth at the largest size measured in ``scope``; ``otherwise`` where it has none."""
    found = scope.largest(op) if scope is not None else None
    return found.busbw if found is not None else otherwise


def comm_time(ins: Inputs, m: Measured, sharding: str) -> tuple[float, float]:
    """(bytes per rank, seconds) per optimiser step for ``sharding`` at the measured bus bandwidths."""
    world = m.scope("world")
    if world is None or m.world_size < 2:
        return 0.0, 0.0
    bw = {op: _busbw(world, op, 0.0) for op in ("all_gather", "reduce_scatter", "all_reduce")}
    n = m.world_size
    ag, rs = _ag_rs(ins, n)
    if sharding == "hybrid_shard" and m.nnodes > 1:
        inside = min(m.inside, key=lambda s: _busbw(s, "all_gather", 0.0), default=None)
        across = m.across
        ag, rs = _ag_rs(ins, m.local_world_size)
        shard = ins.params * ins.reduce_bytes / max(m.local_world_size, 1)
        ar = 2 * shard * (m.nnodes - 1) / m.nnodes
        in_ag = _busbw(inside, "all_gather", bw["all_gather"])
        in_rs = _busbw(inside, "reduce_scatter", bw["reduce_scatter"])
        x_ar = _busbw(across, "all_reduce", bw["all_reduce"])
        return 2 * ag + rs + ar, _div(2 * ag, in_ag) + _div(rs, in_rs) + _div(ar, x_ar)
    if sharding == "no_shard":
        ar = 2 * ins.params * ins.reduce_bytes * (n - 1) / n
        return ar, _div(ar, bw["all_reduce"])
    passes = 1 if sharding == "shard_grad_op" else 2
    return passes * ag + rs, _div(passes * ag, bw["all_gather"]) + _div(rs, bw["reduce_scatter"])


def _div(nbytes: float, rate: float) -> float:
    return nbytes / rate if rate > 0 else float("inf")


def expect(ins: Inputs, m: Measured) -> Expectation:
    nbytes, comm = comm_time(ins, m, ins.sharding)
    lines = [f"{ins.sharding}: {nbytes / 1e9:.2f} GB per rank per step ({ins.params / 1e9:.2f} B parameters, "
             f"{ins.param_bytes}-byte parameters, {ins.reduce_bytes}-byte gradient reduce) = {comm:.2f} s at the "
             "measured bus bandwidth"]
    compute = None
    if ins.peak_flops and ins.tokens_per_rank:
        compute = 6 * ins.params * ins.tokens_per_rank / (ins.peak_flops * ins.mfu)
        lines.append(f"compute: {compute:.2f} s per step (6 x parameters x {plural(ins.tokens_per_rank, 'token')} per rank "
                     f"at {ins.mfu:.0%} MFU of {ins.peak_flops / 1e12:.0f} TFLOP/s)")
        if comm <= compute:
            lines.append("communication fits behind compute (FSDP overlaps it with the next block's work)")
        else:
            lines.append(f"the network caps MFU near {ins.mfu * compute / comm:.0%}: communication takes "
                         f"{comm / compute:.1f}x the compute time")
            better = _better(ins, m, comm)
            if better:
                lines.append(better)
    else:
        lines.append("no compute comparison: the device's peak is unknown (CPU); give --peak-tflops")
    return Expectation(ins.sharding, nbytes, comm, compute, tuple(lines))


def _better(ins: Inputs, m: Measured, comm: float) -> str:
    """The strategy that would move less over the slow part, where one would."""
    options = ["shard_grad_op"] + (["hybrid_shard"] if m.nnodes > 1 and m.local_world_size > 1 else [])
    best = min(((comm_time(ins, m, s)[1], s) for s in options if s != ins.sharding), default=None)
    if best is None or best[0] >= comm * 0.9:
        return ""
    return f"fsdp.sharding: {best[1]} would take {best[0]:.2f} s per step instead"


def peak_for(gpu_model: str | None) -> float | None:
    """Peak FLOP/s of a GPU model named as ``accelerator_type`` names it; ``None`` when unknown."""
    tflops = PEAK_TFLOPS.get(gpu_model or "")
    return tflops * 1e12 if tflops else None


def inputs_for(plan, params: int, *, peak_tflops: float | None = None, mfu: float = DEFAULT_MFU) -> Inputs:
    """The expectation's inputs from a workload's plan: its ``fsdp`` settings and batch shape where the
    built-in trainer runs (a script's workload: ``full_shard``, one 4 x 1024-token batch per rank), the
    device's peak from ``accelerator_type``."""
    p = plan.workload.parameters if plan.uses_builtin_trainer else {}
    given = p.get("fsdp")
    fsdp = given if isinstance(given, dict) else {}
    sharding = fsdp.get("sharding") or "auto"
    if sharding == "auto":
        sharding = "full_shard"
    gpu = plan.topology.kind == "gpu"
    mixed = fsdp.get("mixed_precision") or "auto"
    param_bytes = 2 if gpu and mixed in ("auto", "bf16") else 4
    reduce_bytes = 2 if param_bytes == 2 and fsdp.get("reduce_dtype") == "bf16" else 4

    def number(key: str, default: int) -> int:
        value = p.get(key, default)
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default

    tokens = number("per_device_batch_size", 4) * number("max_seq_len", 1024) * number("gradient_accumulation_steps", 1)
    peak = peak_tflops * 1e12 if peak_tflops else (peak_for(plan.topology.gpu_model) if gpu else None)
    return Inputs(params, sharding, param_bytes, reduce_bytes, tokens, peak, mfu)
