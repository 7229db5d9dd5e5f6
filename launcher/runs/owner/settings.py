"""How a run's owner paces itself: polling, stop grace, retries, timeout, stall detection."""

from __future__ import annotations

from dataclasses import dataclass

POLL_S = 0.2
"""How long a node holds a read back while it has no new output (its answer comes as soon as it has)."""
MIN_ROUND_S = 0.05
"""A follower's shortest round (read, status): a node printing without pause is read 20 times a second."""
PACED_NODES = 16
"""Up to this many nodes, each is read at ``poll_s``/``min_round_s``; past it, see :func:`pace`."""
GPU_POLL_S = 5.0
"""How often each node's GPU samples and job usage (CPU, RSS) are asked for."""
READ_CHUNK = 4 << 20
STOP_GRACE_S = 10.0


@dataclass(frozen=True)
class Settings:
    max_retries: int = 0
    timeout_s: float | None = None
    poll_s: float = POLL_S
    min_round_s: float = MIN_ROUND_S
    gpu_poll_s: float = GPU_POLL_S
    stop_grace_s: float = STOP_GRACE_S
    preflight: bool = True
    """Run the doctor's cheap checks before starting; a certain failure stops the launch."""
    checked: bool = False
    """The launch ran those checks on every node moments before it recorded the run, and they found nothing:
    the owner does not run them a second time (a round of probes on every node, BENCHMARKS.md)."""
    max_resubmits: int = 0
    """New submissions after a scheduler's time limit that left a checkpoint (SLURM), beside the retries."""
    stall_factor: float = 10.0
    stall_min_s: float = 120.0


def pace(nodes: int) -> float:
    """How much longer each node's poll and shortest round are for a run of ``nodes`` nodes: 1 up to
    ``PACED_NODES``, then in proportion. Every question to a node costs the owner about the same CPU
    whatever it carries (a frame over SSH, a record write), so a 64-node run asks each node a quarter as
    often as a 16-node run and the owner's CPU stays near that of 16 nodes; a node's lines still arrive
    in a fraction of a second (the app redraws at ~15 Hz), and a job's end still answers the waiting read
    at once."""
    return max(1.0, nodes / PACED_NODES)
