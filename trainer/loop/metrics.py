"""What rank 0 reports: progress lines, metrics records, per-rank memory, throughput and MFU."""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from trainer.parallel import Dist
from trainer.wire import flops
from trainer.wire.fit_record import FitSummary
from trainer.wire.protocol import (
    MIX_ROWS,
    DataSummary,
    MetricRecord,
    RankMemory,
    ResumeCheck,
    SourceSummary,
    mix_words,
)
from trainer.wire.reporter import Reporter

# Dense bf16 peak TFLOP/s per device, for MFU. A name matches a model only as whole words ("L40" is not
# "L4", "H200 NVL" is not "H200"); the first pattern that matches wins, so variants come first.
PEAK_TFLOPS = (
    (r"GH200", 989.0), (r"H200 NVL", 835.0), (r"H200", 989.0), (r"H100 PCIe", 756.0), (r"H100 NVL", 835.0),
    (r"H100", 989.0), (r"H800 PCIe", 756.0), (r"H800", 989.0), (r"H20", 148.0), (r"A100", 312.0),
    (r"A800", 312.0), (r"L40S", 362.0), (r"L40", 181.0), (r"L4", 121.0), (r"A10G", 70.0), (r"A10", 125.0),
    (r"B200", 2250.0),
)
_MIG = r"MIG (\d+)g\."
"""A MIG slice (``NVIDIA H100 80GB HBM3 MIG 3g.40gb``): N of the GPU's 7 compute slices."""
_GIB = 1024**3


def rank_memory(d: Dist) -> dict:
    if d.device.type == "cuda":
        free, total = torch.cuda.mem_get_info(d.device)
        return {"rank": d.rank, "allocated_gib": torch.cuda.memory_allocated(d.device) / _GIB,
                "reserved_gib": torch.cuda.memory_reserved(d.device) / _GIB,
                "peak_gib": torch.cuda.max_memory_allocated(d.device) / _GIB, "total_gib": total / _GIB,
                "device_used_gib": (total - free) / _GIB}
    ram = _ram_bytes()
    return {"rank": d.rank, "rss_gib": _rss_bytes() / _GIB, "peak_rss_gib": status_bytes("VmHWM") / _GIB,
            **({"total_gib": ram / _GIB} if ram else {})}


def _ram_bytes() -> int:
    """The node's RAM (what a CPU rank's resident memory is measured against: the monitor's gauge)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def _rss_bytes() -> int:
    return status_bytes("VmRSS")


def status_bytes(key: str) -> int:
    """A size from ``/proc/self/status`` (``VmRSS``: resident now, ``VmHWM``: its peak so far)."""
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(f"{key}:"):
                return int(line.split()[1]) * 1024
    return 0


@dataclass(frozen=True)
class ModelShape:
    """What the FLOP count needs to know about a model (:mod:`trainer.wire.flops`)."""

    num_params: int
    non_embedding_params: int
    """Every parameter but the input embedding; the output layer counts even when tied to it."""
    num_layers: int
    attention_width: int
    """Heads x head dimension of the queries."""
    trainable_non_embedding: int | None = None
    """Of ``non_embedding_params``, those that train (``None``: all of them). A frozen weight does no
    weight-gradient work: a LoRA run's base."""

    @classmethod
    def of(cls, model: nn.Module) -> ModelShape:
        config = model.config
        counts = weights_of(model)
        total = sum(counts.values())
        embed = model.get_input_embeddings().weight
        output = model.get_output_embeddings()
        tied = output is not None and output.weight is embed
        non_embedding = total - embed.numel() + (embed.numel() if tied else 0)
        trained = sum(counts[id(p)] for p in model.parameters() if p.requires_grad)
        if embed.requires_grad and not tied:
            trained -= embed.numel()  # the input embedding's gradient is a gather, not a matmul
        heads = config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        return cls(total, non_embedding, config.num_hidden_layers, heads * head_dim,
                   None if trained >= non_embedding else trained)


def weights_of(model: nn.Module) -> dict[int, int]:
    """Each parameter's count of weights (by ``id``), as the matmuls use them: a linear layer's
    ``in_features x out_features`` even where its storage is packed (QLoRA's 4-bit base: bitsandbytes
    keeps four 4-bit values in each bf16 element, a quarter of the count)."""
    counts = {id(p): p.numel() for p in model.parameters()}
    for module in model.modules():
        weight = module._parameters.get("weight")
        ins, outs = getattr(module, "in_features", None), getattr(module, "out_features", None)
        if weight is not None and isinstance(ins, int) and isinstance(outs, int):
            counts[id(weight)] = max(weight.numel(), ins * outs)
    return counts


def train_flops(shape: ModelShape, example_lengths: Iterable[int]) -> float:
    """FLOPs of forward + backward over examples of these lengths (:func:`trainer.wire.flops.train_flops`:
    6 x non-embedding parameters per token when every weight trains, 4 + 2 x the trained share when a
    frozen base does no weight-gradient work, plus attention's 12 x layers x width x the length of the
    token's own example)."""
    return flops.train_flops(shape.non_embedding_params, shape.trainable_non_embedding, shape.num_layers,
                             shape.attention_width, example_lengths)


def mfu_note(shape: ModelShape, peak: float | None) -> str:
    """The line a run starts with that says how its MFU is counted, or why it has none."""
    if not peak:
        return "mfu: not reported (the device's peak is unknown: set logging.peak_tflops to its dense bf16 TFLOP/s)"
    trained = ("" if shape.trainable_non_embedding is None else
               f"; {shape.trainable_non_embedding / shape.non_embedding_params:.2%} of the weights train, so a "
               "token costs (2 + trained share)/3 of a full fine-tune's 6N")
    return f"mfu: {flops.MFU_CONVENTION} ({peak / 1e12:.0f} TFLOP/s){trained}"


def mfu(flops_per_s_per_device: float, peak: float | None) -> float | None:
    """Model FLOPs utilisation: achieved over peak dense bf16 FLOP/s of one device."""
    return flops_per_s_per_device / peak if peak else None


def peak_flops(d: Dist, override_tflops: float | None) -> float | None:
    if override_tflops:
        return override_tflops * 1e12
    if d.device.type != "cuda":
        return None
    return peak_of(torch.cuda.get_device_name(d.device))


def peak_of(name: str) -> float | None:
    """Dense bf16 peak FLOP/s of the device called ``name`` (a MIG slice: its share), if known."""
    import re

    for pattern, tflops in PEAK_TFLOPS:
        if re.search(rf"(?<![A-Za-z0-9]){pattern}(?![A-Za-z0-9])", name):
            mig = re.search(_MIG, name)
            return tflops * 1e12 * (int(mig.group(1)) / 7 if mig else 1)
    return None


def node_heartbeat(d: Dist, step: int, max_steps: int, tokens_per_s: float, memory: list[dict]) -> str:
    """One line per step for a node other than node 0: its ranks, the step, throughput and memory."""
    first = d.rank - d.local_rank
    mine = [m for m in memory if m and first <= m["rank"] < first + d.local_world]
    key = "allocated_gib" if mine and "allocated_gib" in mine[0] else "rss_gib"
    peak = max((m.get(key) or 0.0 for m in mine), default=0.0)
    label = "allocated" if key == "allocated_gib" else "rss"
    return (f"node {first // d.local_world} ranks {first}-{first + d.local_world - 1}: step {step}/{max_steps} "
            f"tok/s(all)={tokens_per_s:.0f} max {label}={peak:.2f} GiB")


class RankClock:
    """How long this rank worked on a step, as opposed to waiting for the others. In an FSDP step every
    rank waits for the slowest at each collective, so every rank's wall-clock step is the same; what tells
    a slow rank apart is the time it spent working.

    On CPU (Linux): the main thread's time on a CPU plus its time ready to run but not running
    (``/proc/thread-self/schedstat``: a CPU quota's throttling and a busy machine's queue count, a wait in a
    collective does not); two small reads a step. On a GPU: the optimiser's update of this rank's shards,
    timed with CUDA events (the device's own speed; read once per logging step, no extra sync). Elsewhere:
    the update's wall time."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.schedstat = not self.cuda and os.path.exists(_SCHEDSTAT)
        self.seconds = 0.0
        self.events: list = []
        self.steps = 0

    @contextlib.contextmanager
    def step(self) -> Iterator[None]:
        """Around one whole training step (its batches, forward, backward, update)."""
        before = _busy_s() if self.schedstat else 0.0
        yield
        if self.schedstat:
            self.seconds += _busy_s() - before
        self.steps += 1

    @contextlib.contextmanager
    def update(self) -> Iterator[None]:
        """Around the optimiser's update, which each rank does alone."""
        if self.schedstat:
            yield
        elif self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            yield
            end.record()
            self.events.append((start, end))
        else:
            t = time.perf_counter()
            yield
            self.seconds += time.perf_counter() - t

    def take(self) -> float | None:
        """Seconds per step since the last call (``None`` before any step), and start again."""
        if not self.steps:
            return None
        total = self.seconds
        for start, end in self.events:
            end.synchronize()
            total += start.elapsed_time(end) / 1000
        per_step = total / self.steps
        self.seconds, self.events, self.steps = 0.0, [], 0
        return per_step


_SCHEDSTAT = "/proc/thread-self/schedstat"


def _busy_s() -> float:
    """This thread's nanoseconds on a CPU and waiting for one, in seconds."""
    with open(_SCHEDSTAT, encoding="ascii") as f:
        on_cpu, waiting, _ = f.read().split()
    return (int(on_cpu) + int(waiting)) / 1e9


class MetricsLogger:
    """Collective calls happen on every rank; only rank 0 prints and writes."""

    def __init__(self, d: Dist, shape: ModelShape, max_steps: int, peak: float | None) -> None:
        self.d = d
        self.shape = shape
        self.max_steps = max_steps
        self.peak = peak
        self.reporter = Reporter() if d.is_main else None
        self.window_tokens = 0
        self.window_flops = 0.0
        self.window_start = time.perf_counter()
        self.window_excluded = 0.0
        self.excluded_s = 0.0
        """Seconds of evaluation and checkpointing, left out of tokens/s."""
        self.clock = RankClock(d.device)
        self.rank_loss_sums: list[float] = []
        """Each rank's own summed loss at the newest logged step (``trainer.loop.nonfinite`` reads it)."""
        self.sources: tuple[SourceSummary, ...] = ()
        """A mixture's sources (from the ``data`` record), in the order of a step's ``mix`` counts."""

    def add_batches(self, batches: list[dict[str, torch.Tensor]]) -> None:
        for batch in batches:
            self.window_tokens += int(batch["real_tokens"])
            self.window_flops += train_flops(self.shape, batch["lengths"].tolist())

    def exclude(self, seconds: float) -> None:
        """Leave ``seconds`` (evaluation, checkpoint) out of the throughput."""
        self.window_excluded += seconds
        self.excluded_s += seconds

    def checkpoint_blocked(self, submit_s: float, staging_s: float | None = None) -> None:
        """Say once how long a save blocked training: a synchronous save (``submit_s`` is all of it) or an
        async one, whose submit and wait for its copy to host memory are both blocked time. The submit
        was left out of the throughput when it happened; the wait is left out here."""
        self.exclude(staging_s or 0.0)
        if not self.d.is_main:
            return
        if staging_s is None:
            print(f"checkpoint blocked training for {submit_s:.2f} s", flush=True)
        else:
            print(f"checkpoint blocked training for {submit_s + staging_s:.2f} s (submit {submit_s:.2f} s, "
                  f"waiting for the copy to host memory {staging_s:.2f} s)", flush=True)

    def train_step(self, step: int, epoch: float, result, mix: list[int] | None = None) -> float:
        """Log step ``step`` (``result``: a :class:`trainer.loop.train.StepResult`): its global mean loss (each
        rank's summed loss over the learned tokens of all ranks), the router loss where the model has one,
        throughput and each rank's memory and step time, gathered in one collective (each rank's figures as
        one row of floats); a mixture's rows taken from each source so far (``mix``). Returns the loss (on
        every rank)."""
        mine = rank_memory(self.d)
        keys = [k for k in mine if k != "rank"]
        step_s = self.clock.take()
        router = result.router_sum
        row = torch.tensor([self.window_tokens, self.window_flops, float(result.loss_sum),
                            0.0 if router is None else float(router),
                            math.nan if step_s is None else step_s, *(mine[k] for k in keys)], dtype=torch.float64)
        rows = [torch.empty_like(row) for _ in range(self.d.world)]
        dist.all_gather(rows, row)
        table = torch.stack(rows)
        tokens, flops, loss_total, router_total = table[:, :4].sum(0).tolist()
        self.rank_loss_sums = table[:, 2].tolist()
        loss = loss_total / result.count
        router_aux = router_total / (self.d.world * result.micro_steps) if router is not None else None
        memory = [{"rank": r, **dict(zip(keys, values[5:].tolist(), strict=True))} for r, values in enumerate(table)]
        step_times = tuple(None if math.isnan(x) else x for x in table[:, 4].tolist())
        elapsed = time.perf_counter() - self.window_start - self.window_excluded
        tokens_per_s = tokens / elapsed if elapsed > 0 else 0.0
        mfu_value = mfu(flops / elapsed / self.d.world, self.peak) if elapsed > 0 else None
        self.window_tokens, self.window_flops, self.window_excluded = 0, 0.0, 0.0
        self.window_start = time.perf_counter()
        if not self.d.is_main:
            if self.d.local_rank == 0:  # the first rank of every other node: its pane shows the run is alive
                print(node_heartbeat(self.d, step, self.max_steps, tokens_per_s, memory), flush=True)
            return loss
        norm = float(result.grad_norm) if result.grad_norm is not None else None
        record = MetricRecord(step=step, kind="train", max_steps=self.max_steps, epoch=round(epoch, 4),
                              loss=loss, lr=result.lr, grad_norm=norm, tokens_per_s=tokens_per_s, mfu=mfu_value,
                              router_aux_loss=router_aux, time=time.time(),
                              memory=tuple(RankMemory(**m) for m in memory), rank_step_s=step_times,
                              extra={MIX_ROWS: mix} if mix is not None else {})
        self.reporter.write(record)
        mfu_text = f" mfu={mfu_value:.1%}" if mfu_value is not None else ""
        aux_text = f" router_aux_loss={router_aux:.4f}" if router_aux is not None else ""
        mix_text = f" mix: {mix_words(self.sources, tuple(mix))}" if mix is not None else ""
        print(f"step={step}/{self.max_steps} loss={loss:.4f}{aux_text} lr={result.lr:.3g} "
              f"tok/s={tokens_per_s:.0f}{mfu_text}{mix_text}", flush=True)
        return loss

    def eval(self, step: int, eval_loss: float, exact_match: float | None, seconds: float) -> None:
        self.exclude(seconds)
        if not self.d.is_main:
            return
        self.reporter.write(MetricRecord(step=step, kind="eval", max_steps=self.max_steps, eval_loss=eval_loss,
                                         eval_exact_match=exact_match, time=time.time(),
                                         extra={"eval_seconds": round(seconds, 3)}))
        em = f" exact_match={exact_match:.3f}" if exact_match is not None else ""
        print(f"eval step={step} eval_loss={eval_loss:.4f}{em} seconds={seconds:.2f}", flush=True)

    def data(self, summary: DataSummary) -> None:
        """What the run trains on (examples, those cut at ``max_seq_len``, a mixture's sources), once at start."""
        self.sources = summary.sources
        if self.d.is_main:
            self.reporter.write(summary.record())

    def fit(self, summary: FitSummary, lines: list[str]) -> None:
        """The run's memory prediction, once at start: one record, and its lines."""
        if self.d.is_main:
            self.reporter.write(summary.record())
            print("\n".join(lines), flush=True)

    def resume_check(self, check: ResumeCheck) -> None:
        """A resume's judgement at its first step: one record and one line."""
        if self.d.is_main:
            self.reporter.write(check.record())
            print(f"resume check: {check.words()}", flush=True)

    def signal_checkpoint(self, step: int, signal_name: str) -> None:
        """The run saved ``step`` and stopped because the job's time is nearly up."""
        if self.d.is_main:
            self.reporter.write(MetricRecord(step=step, kind="signal_checkpoint", max_steps=self.max_steps,
                                             time=time.time(), extra={"signal": signal_name}))

    def close(self) -> None:
        if self.reporter is not None:
            self.reporter.close()
