"""What rank 0 reports: progress lines, metrics records, per-rank memory, throughput and MFU."""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from trainer.parallel import Dist
from trainer.protocol import MetricRecord, RankMemory
from trainer.reporter import Reporter

# Dense bf16 peak TFLOP/s per device, for MFU.
PEAK_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0, "A10": 125.0, "L4": 121.0,
               "B200": 2250.0}
_GIB = 1024**3


def rank_memory(d: Dist) -> dict:
    if d.device.type == "cuda":
        free, total = torch.cuda.mem_get_info(d.device)
        return {"rank": d.rank, "allocated_gib": torch.cuda.memory_allocated(d.device) / _GIB,
                "reserved_gib": torch.cuda.memory_reserved(d.device) / _GIB,
                "peak_gib": torch.cuda.max_memory_allocated(d.device) / _GIB, "total_gib": total / _GIB}
    return {"rank": d.rank, "rss_gib": _rss_bytes() / _GIB}


def _rss_bytes() -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def peak_flops(d: Dist, override_tflops: float | None) -> float | None:
    if override_tflops:
        return override_tflops * 1e12
    if d.device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(d.device)
    for key, tflops in PEAK_TFLOPS.items():
        if key in name:
            return tflops * 1e12
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


class MetricsLogger:
    """Collective calls happen on every rank; only rank 0 prints and writes."""

    def __init__(self, d: Dist, num_params: int, max_steps: int, peak: float | None) -> None:
        self.d = d
        self.num_params = num_params
        self.max_steps = max_steps
        self.peak = peak
        self.reporter = Reporter() if d.is_main else None
        self.window_tokens = 0
        self.window_start = time.perf_counter()

    def add_tokens(self, count: int) -> None:
        self.window_tokens += count

    def train_step(self, step: int, epoch: float, loss: float, lr: float, grad_norm: float | None) -> None:
        t = torch.tensor([self.window_tokens], dtype=torch.float64)
        dist.all_reduce(t)
        elapsed = time.perf_counter() - self.window_start
        tokens_per_s = t.item() / elapsed if elapsed > 0 else 0.0
        memory = [None] * self.d.world
        dist.all_gather_object(memory, rank_memory(self.d))
        self.window_tokens, self.window_start = 0, time.perf_counter()
        if not self.d.is_main:
            if self.d.local_rank == 0:  # the first rank of every other node: its pane shows the run is alive
                print(node_heartbeat(self.d, step, self.max_steps, tokens_per_s, memory), flush=True)
            return
        mfu = (6 * self.num_params * tokens_per_s / (self.peak * self.d.world)) if self.peak else None
        record = MetricRecord(step=step, kind="train", max_steps=self.max_steps, epoch=round(epoch, 4),
                              loss=loss, lr=lr, grad_norm=grad_norm, tokens_per_s=tokens_per_s, mfu=mfu,
                              time=time.time(), memory=tuple(RankMemory(**m) for m in memory))
        self.reporter.write(record)
        mfu_text = f" mfu={mfu:.1%}" if mfu is not None else ""
        print(f"step={step}/{self.max_steps} loss={loss:.4f} lr={lr:.3g} tok/s={tokens_per_s:.0f}{mfu_text}",
              flush=True)

    def eval(self, step: int, eval_loss: float, exact_match: float | None) -> None:
        if not self.d.is_main:
            return
        self.reporter.write(MetricRecord(step=step, kind="eval", max_steps=self.max_steps, eval_loss=eval_loss,
                                         eval_exact_match=exact_match, time=time.time()))
        em = f" exact_match={exact_match:.3f}" if exact_match is not None else ""
        print(f"eval step={step} eval_loss={eval_loss:.4f}{em}", flush=True)

    def close(self) -> None:
        if self.reporter is not None:
            self.reporter.close()
