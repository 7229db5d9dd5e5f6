"""Time training is blocked by a checkpoint save: our async DCP save vs our sync DCP save vs the seed's
way (gather a full state dict to rank 0, then ``save_pretrained``). 2 CPU processes with gloo, or
one process per GPU with NCCL where there are GPUs (``--nproc``).

    .venv/bin/python benchmarks/bench_checkpoint.py [--hidden 512] [--layers 8] [--repeat 3] [--nproc 2] [--json]

Async blocks while the save is submitted and until its tensors are staged to host memory (the trainer
waits for that before its next optimiser step): both are reported, and the blocked time is their sum.
The floor is async < 1/4 of the seed's way; on a GPU the goal is async <= 0.1x the sync save. ``--json``
adds one JSON line with every run and the medians (``benchmarks/gpu_proof.py`` reads it).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--json", action="store_true", help="also one JSON line: every run, the medians, the ratios")
    args = p.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={args.nproc}",
                          f"--master_port={port}", str(ROOT / "benchmarks/checkpoint_worker.py"),
                          str(args.hidden), str(args.layers), str(args.repeat)],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        raise SystemExit(out.stderr[-3000:])
    data = json.loads(out.stdout.strip().splitlines()[-1])
    med = {k: statistics.median(v) for k, v in data["results"].items()}
    print(f"model: Llama-shaped, {data['params'] / 1e6:.0f}M parameters, FSDP2 full_shard over {args.nproc} "
          f"{data['device']} processes")
    for name, label in (("async", "async DCP save (ours, blocked: submit + copy)"),
                        ("async_submit", "  of which the submit alone"), ("sync", "sync DCP save (ours)"),
                        ("seed", "full state dict to rank 0 + save_pretrained (seed)")):
        print(f"{label:<52} median {med[name] * 1000:8.0f} ms  (runs: "
              f"{', '.join(f'{x * 1000:.0f}' for x in data['results'][name])})")
    ratio = med["async"] / med["seed"]
    print(f"async / seed blocked time: {ratio:.2f} (floor < 0.25: {'met' if ratio < 0.25 else 'MISSED'}); "
          f"sync / seed: {med['sync'] / med['seed']:.2f}; async / sync: {med['async'] / med['sync']:.2f}; "
          f"load average {os.getloadavg()[0]:.1f}")
    if args.json:
        print(json.dumps({"bench": "checkpoint", "params": data["params"], "device": data["device"],
                          "nproc": args.nproc, "hidden": args.hidden, "layers": args.layers, "runs_s": data["results"],
                          "median_s": med, "async_over_sync": med["async"] / med["sync"], "async_over_seed": ratio,
                          "load_average": os.getloadavg()[0]}), flush=True)


if __name__ == "__main__":
    main()
