"""Every node's usage as MLflow system metrics of the run's one MLflow run, read from the run's own record.

The nodes run no MLflow: their agents sample what the job costs there (CPU, memory, processes), the
node's network traffic, and its GPUs (``nvidia-smi``: use, memory, power) at the owner's usage cadence,
and the owner records each sample in ``events.jsonl`` (``NodeUsage``, ``GpuTelemetry``). This module
turns those lines into metrics named as MLflow's own system metrics monitor names them for a multi-node
run (``system/<node id>/<metric>``, node id ``node_<rank>``), so MLflow's UI shows them in its system
metrics view, grouped by node.

Reading the record, not the live samples, keeps sending off the run's path and lossless: what is sent is
remembered as a byte offset into ``events.jsonl`` (with each node's step count) in ``mlflow.json``, so a
tracking store that was down gets the rest later, from the same file, by whoever sends (the owner, its
adopter, ``fsdp-tui mlflow sync RUN``). Each round reads at most :data:`READ_MAX_BYTES` of the record and
sends at most :data:`BATCH` metrics per ``log_batch`` call. Pure but for reading the file.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

PREFIX = "system/"
"""MLflow's prefix for system metrics (``mlflow.system_metrics.SystemMetricsMonitor``)."""
READ_MAX_BYTES = 1 << 20
"""The most of ``events.jsonl`` one round reads (a round that falls behind catches up over the next)."""
BATCH = 1000
"""Metrics per ``log_batch`` call: MLflow's own limit for one call."""
MB_PER_MIB = 2**20 / 1e6
"""MLflow counts memory in megabytes (10^6 bytes); agents and ``nvidia-smi`` in MiB."""


@dataclass(frozen=True)
class SystemMetric:
    key: str
    value: float
    timestamp_ms: int
    step: int


def node_id(rank: int) -> str:
    """The node id of a run's node in its metric names (MLflow's ``MLFLOW_SYSTEM_METRICS_NODE_ID``)."""
    return f"node_{rank}"


def metric_key(rank: int, name: str) -> str:
    return f"{PREFIX}{node_id(rank)}/{name}"


def _figure(value: object) -> float | None:
    """A finite, non-negative number, else ``None`` (the record holds what nodes sent: untrusted)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) and value >= 0 else None


def figures_of(event: dict) -> list[tuple[str, float]]:
    """The system metrics (name without prefix, value) of one ``events.jsonl`` entry; none for another kind
    of event, and no figure a node could not have."""
    out: list[tuple[str, float | None]] = []
    if event.get("type") == "NodeUsage":
        rss = _figure(event.get("rss_mib"))
        out += [("job_cpu_utilization_percentage", _figure(event.get("cpu_pct"))),
                ("job_memory_usage_megabytes", None if rss is None else rss * MB_PER_MIB),
                ("job_processes", _figure(event.get("processes"))),
                ("network_receive_megabytes", _figure(event.get("net_rx_mb"))),
                ("network_transmit_megabytes", _figure(event.get("net_tx_mb")))]
    elif event.get("type") == "GpuTelemetry":
        gpus = event.get("gpus")
        for gpu in gpus if isinstance(gpus, list) else []:
            if not isinstance(gpu, dict) or isinstance(gpu.get("index"), bool) or not isinstance(gpu.get("index"), int):
                continue
            i = gpu["index"]
            used, total = _figure(gpu.get("memory_used_mib")), _figure(gpu.get("memory_total_mib"))
            out += [(f"gpu_{i}_utilization_percentage", _figure(gpu.get("utilization_pct"))),
                    (f"gpu_{i}_memory_usage_megabytes", None if used is None else used * MB_PER_MIB),
                    (f"gpu_{i}_memory_usage_percentage", used / total * 100 if used is not None and total else None)]
            watts, limit = _figure(gpu.get("power_w")), _figure(gpu.get("power_limit_w"))
            out += [(f"gpu_{i}_power_usage_watts", watts),
                    (f"gpu_{i}_power_usage_percentage", watts / limit * 100 if watts is not None and limit else None)]
    return [(name, value) for name, value in out if value is not None]


def to_metrics(lines: list[bytes], steps: dict[str, int]) -> list[SystemMetric]:
    """The metrics of complete ``events.jsonl`` lines; ``steps`` (each node's samples so far, by kind) is
    advanced in place, so a sample's step is the same whoever sends it and whenever."""
    out: list[SystemMetric] = []
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if not isinstance(event, dict):
            continue
        rank, at = event.get("node_rank"), _figure(event.get("at"))
        figures = figures_of(event)
        if not figures or isinstance(rank, bool) or not isinstance(rank, int) or rank < 0 or at is None:
            continue
        counter = f"{rank}/{event['type']}"
        step = steps.get(counter, 0)
        steps[counter] = step + 1
        out += [SystemMetric(metric_key(rank, name), value, int(at * 1000), step) for name, value in figures]
    return out


def read_from(path: Path, offset: int, max_bytes: int | None = None) -> tuple[list[bytes], int]:
    """The complete lines of ``path`` from ``offset`` (at most ``max_bytes``, :data:`READ_MAX_BYTES` by
    default, but at least one whole line) and the offset after the last of them; a line still being
    written is left for the next round."""
    max_bytes = max_bytes or READ_MAX_BYTES
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            chunk = f.read(max_bytes)
            while chunk and b"\n" not in chunk:  # one line longer than the window: read on to its end
                more = f.read(max_bytes)
                if not more:
                    break
                chunk += more
    except FileNotFoundError:
        return [], offset
    end = chunk.rfind(b"\n") + 1
    return chunk[:end].split(b"\n")[:-1], offset + end
