"""Each torchrun worker's peak memory, written when it exits, for ``benchmarks/bench_memory.py``: every side (ours
and the peers) is measured the same way, from outside its code.

Python imports this module at start-up when its folder is on ``PYTHONPATH``. In a process with ``RANK`` set and
``FSDP_BENCH_PEAK`` naming a file prefix, it writes ``<prefix>-<RANK>.json`` at exit: the process's high-water
resident memory (``ru_maxrss``, what ``VmHWM`` reads) and, where CUDA was used, the most memory torch allocated
on the device (``torch.cuda.max_memory_allocated``).
"""

import atexit
import json
import os
import resource
import sys


def _write(prefix: str, rank: str) -> None:
    peak = {"rank": int(rank), "max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        peak["cuda_max_allocated_bytes"] = int(torch.cuda.max_memory_allocated())
    with open(f"{prefix}-{rank}.json", "w", encoding="utf-8") as f:
        json.dump(peak, f)


if os.environ.get("FSDP_BENCH_PEAK") and os.environ.get("RANK") is not None:
    atexit.register(_write, os.environ["FSDP_BENCH_PEAK"], os.environ["RANK"])
