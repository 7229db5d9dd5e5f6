"""Seed-000 recipe vs our trainer's defaults: same tiny model, same data, same 2 CPU processes, one epoch.

    .venv/bin/python benchmarks/bench_trainer_cpu.py

Reports the training loop's time for one epoch and real (non-pad) tokens per second for each, and
the ratio (floor: ours >= 3x the recipe's real tokens/s).
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
MAX_SEQ_LEN, BATCH = 128, 8


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun(args: list[str], env: dict) -> str:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={_port()}", *args]
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        raise SystemExit(out.stdout[-3000:] + out.stderr[-3000:])
    return out.stdout


def main() -> None:
    from trainer.assets import resolve_dataset, resolve_model

    model_dir = resolve_model("builtin:tiny-llama")
    data = resolve_dataset("builtin:tiny-alpaca")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}
    seed = json.loads(_torchrun([str(ROOT / "benchmarks/seed_recipe.py"), model_dir, data, str(MAX_SEQ_LEN),
                                 str(BATCH)], env).strip().splitlines()[-1])
    with tempfile.TemporaryDirectory() as tmp:
        params = {"model_name": model_dir, "dataset_name": data, "output_dir": f"{tmp}/out",
                  "max_seq_len": MAX_SEQ_LEN, "per_device_batch_size": BATCH, "learning_rate": 3e-3,
                  "num_epochs": 1, "data": {"eval_fraction": 0.0},
                  "checkpoint": {"save_final": False, "export_hf": False}}
        path = Path(tmp) / "params.yaml"
        path.write_text(yaml.safe_dump(params))
        out = _torchrun(["-m", "trainer", str(path)], env)
    m = re.search(r"train_summary steps=(\d+) real_tokens=(\d+) seconds=([\d.]+)", out)
    ours = {"steps": int(m.group(1)), "real_tokens": int(m.group(2)), "seconds": float(m.group(3))}
    print(f"model {model_dir} | data {data} | max_seq_len {MAX_SEQ_LEN} | batch {BATCH}/rank | 2 CPU processes")
    for name, r in (("seed recipe (FSDP1, pad to max, AC)", seed), ("fsdp-tui trainer (defaults)", ours)):
        print(f"{name:<38} steps {r['steps']:>4}  real tokens {r['real_tokens']:>8}  epoch {r['seconds']:7.1f} s  "
              f"{r['real_tokens'] / r['seconds']:9.0f} real tok/s")
    ratio = (ours["real_tokens"] / ours["seconds"]) / (seed["real_tokens"] / seed["seconds"])
    print(f"ratio ours/seed real tok/s: {ratio:.1f}x (floor 3x: {'met' if ratio >= 3 else 'MISSED'}); "
          f"epoch time ratio seed/ours: {seed['seconds'] / ours['seconds']:.1f}x")


if __name__ == "__main__":
    main()
