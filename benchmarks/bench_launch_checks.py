"""What keeping each rank's output apart and refusing a hopeless launch early cost.

1. The node agent's per-line split of torchrun's tagged output (``RankFiles.split``), side by side with the
   supervisor's write of the same lines without it: lines per second for untagged output (a job that is no
   torchrun, or torchrun's own lines) and for tagged lines (each written to the log and to its rank's file).
2. ``launch_refusals`` on the demo's plan (a run on this machine): the time every ``fsdp-tui run`` now
   spends before recording the run (secrets, host keys, the doctor's cheap checks through a local agent).

    .venv/bin/python benchmarks/bench_launch_checks.py
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINES = 200_000


def _split_rate(tagged: bool, split: bool) -> float:
    from launcher.backends.agent.ranklogs import RankFiles
    from launcher.workload.plan import RANK_TAG_TEMPLATE

    with tempfile.TemporaryDirectory() as tmp:
        files = RankFiles(tmp, RANK_TAG_TEMPLATE)
        tag = [RANK_TAG_TEMPLATE.replace("${rank}", str(r)).encode() for r in range(8)]
        lines = [(tag[i % 8] if tagged else b"") + b"step=%d loss=1.2345 lr=0.0003 tok/s=12345\n" % i
                 for i in range(LINES)]
        with open(os.path.join(tmp, "node.log"), "ab", buffering=0) as log:
            start = time.perf_counter()
            for line in lines:  # as the supervisor's loop does it
                log.write(files.split(line) if split and b"\x1b_" in line else line)
            took = time.perf_counter() - start
        files.close()
    return LINES / took


def main() -> None:
    print(f"load {os.getloadavg()}")
    for tagged in (False, True):
        plain = statistics.median(_split_rate(tagged, split=False) for _ in range(3))
        split = statistics.median(_split_rate(tagged, split=True) for _ in range(3))
        kind = "tagged (torchrun's tee)" if tagged else "untagged"
        print(f"{kind:>24}: {plain:,.0f} lines/s written as they come, {split:,.0f} lines/s split by rank")

    from launcher.runs.launch_checks import launch_refusals
    from launcher.workload.load import plan_file

    home = Path(tempfile.mkdtemp())
    plan = plan_file(ROOT / "sample_workloads" / "tiny_cpu.yaml", [], home=home).plan
    times = []
    for _ in range(5):
        start = time.perf_counter()
        said, _ = asyncio.run(launch_refusals(plan, home))
        times.append(time.perf_counter() - start)
    print(f"launch_refusals (the demo, this machine): median {statistics.median(times):.3f} s, "
          f"min {min(times):.3f} s over 5 ({'refused: ' + '; '.join(said) if said else 'nothing refused'})")
    print(f"load {os.getloadavg()}")


if __name__ == "__main__":
    main()
