"""The rest of a burn-in on GPU nodes, judged: each GPU's bf16 GEMM TFLOP/s against the others' and the
card's peak, and each node's health counters (``nvidia-smi -q``: ECC, retired pages, remapped rows;
NVLink state; Xid lines from the kernel log), as the node script parsed them. Pure; nodes' text is
untrusted and cleaned here."""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass

from launcher.nettest.health import NodeHealth
from launcher.words import node_at, plural

GPU_SLOW_RATIO = 0.8
"""A GPU is named slow under this fraction of the median GEMM TFLOP/s of the other GPUs: cards of one model
agree within a few percent; a throttled (hot, power-capped) or degraded one falls by tens of percent."""


@dataclass(frozen=True)
class SlowGpu:
    rank: int
    node: int
    local_rank: int
    tflops: float
    reference: float


def slow_gpus(tflops: list[float], local_world_size: int, threshold: float = GPU_SLOW_RATIO) -> list[SlowGpu]:
    out = []
    for rank, value in enumerate(tflops):
        others = [t for r, t in enumerate(tflops) if r != rank]
        if others and value < threshold * statistics.median(others):
            out.append(SlowGpu(rank, rank // max(local_world_size, 1), rank % max(local_world_size, 1), value,
                               statistics.median(others)))
    return out


def _clean(value, limit: int = 120) -> str:
    return "".join(ch for ch in str(value) if ch.isprintable())[:limit]


def _count(value) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def health_problems(health: NodeHealth | object) -> list[str]:
    """What needs a look on one node (its report, or what it sent), each with what to do; empty when its
    counters are clean."""
    report = health if isinstance(health, NodeHealth) else NodeHealth.from_wire(health)
    if report is None:
        return ["its health report is not readable"]
    out = []
    for gpu in report.gpus or ():
        name = f"GPU {_clean(gpu.bus_id, 40)}"
        if _count(gpu.ecc_volatile_uncorrectable):
            out.append(f"{name}: {gpu.ecc_volatile_uncorrectable} uncorrectable ECC errors since the driver "
                       "loaded: drain the node and run the vendor's diagnostic (dcgmi diag -r 3)")
        if gpu.remap_failure is True:
            out.append(f"{name}: a row remapping failed: the card needs replacing")
        elif gpu.remap_pending is True or gpu.retired_pending is True:
            out.append(f"{name}: a row remap (or page retirement) is pending: reset the GPU (or reboot) before "
                       "training on it")
        if _count(gpu.remapped_uncorrectable):
            out.append(f"{name}: {plural(gpu.remapped_uncorrectable or 0, 'row')} remapped after uncorrectable errors")
    for gpu_name, links in (report.nvlink or {}).items():
        if _count(links.inactive):
            out.append(f"{_clean(gpu_name, 40)}: {plural(links.inactive, 'NVLink link')} inactive ({_count(links.up)} "
                       "up): traffic inside the node takes PCIe")
    xids = [_clean(x, 200) for x in report.xid or ()]
    if xids:
        out.append(f"{plural(len(xids), 'Xid line')} in the kernel log, the last: {xids[-1]}")
    if report.smi_readable is False:
        out.append("nvidia-smi gave nothing: its counters were not checked")
    return out


def burnin_lines(tflops: list[float], local_world_size: int, health: Mapping[int, NodeHealth], nodes: tuple[str, ...],
                 peak_tflops: float | None) -> list[str]:
    """The burn-in in words: GEMM figures, the slow GPU named, and each node's health problems."""
    if not tflops:
        return []

    def who(rank: int) -> str:
        node = rank // max(local_world_size, 1)
        host = nodes[node] if node < len(nodes) else "?"
        return f"{node_at(node, host)} GPU {rank % max(local_world_size, 1)}"

    median = statistics.median(tflops)
    of_peak = f" ({median / peak_tflops:.0%} of the {peak_tflops:.0f} TFLOP/s peak)" if peak_tflops else ""
    lines = [f"bf16 GEMM: median {median:.0f} TFLOP/s per GPU{of_peak}, range {min(tflops):.0f}-{max(tflops):.0f}"]
    for s in slow_gpus(tflops, local_world_size):
        lines.append(f"slow GPU: {who(s.rank)}: {s.tflops:.0f} TFLOP/s against {s.reference:.0f} for the others "
                     f"({s.tflops / s.reference:.2f}x; slow below {GPU_SLOW_RATIO:.2f}x)")
    for node in sorted(health):
        host = nodes[node] if node < len(nodes) else "?"
        problems = health_problems(health[node])
        lines += [f"{node_at(node, host)}: {p}" for p in problems]
        if not problems:
            lines.append(f"{node_at(node, host)}: ECC, remapped rows, NVLink and Xid lines clean")
    return lines
