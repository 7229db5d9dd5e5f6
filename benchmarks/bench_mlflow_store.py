"""A new data dir's MLflow store, as a run's owner first writes to it: made by MLflow's migrations (the way
before, and the way still taken where no blank can be kept) beside a copy of the blank store kept once per
MLflow version (``launcher.runs.owner.mlflow_store``), each in a fresh process that has imported MLflow's
client already (the owner imports it before it takes the store's lock), alternating, the median of
``--repeat`` runs each: the CPU and wall seconds from nothing to the store opened by MLflow's client with
one experiment made.

    .venv/bin/python benchmarks/bench_mlflow_store.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAKE = """import json, sys, time
sys.path.insert(0, {root!r})
from pathlib import Path
from mlflow import MlflowClient
from launcher.runs.owner import mlflow_store
folder, way = Path(sys.argv[1]), sys.argv[2]
if way == "migrations":
    mlflow_store.blank_store = lambda: None  # as where no blank can be kept
cpu, wall = time.process_time(), time.perf_counter()
mlflow_store.made_whole(folder / "mlflow.db", folder / "mlflow-artifacts")
MlflowClient(tracking_uri=f"sqlite:///{{folder / 'mlflow.db'}}").create_experiment("e")
print(json.dumps({{"cpu_s": time.process_time() - cpu, "wall_s": time.perf_counter() - wall}}))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    script = MAKE.format(root=str(ROOT))
    found: dict[str, list[dict]] = {"migrations": [], "blank": []}
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "XDG_CACHE_HOME": str(Path(tmp) / "cache")}
        for i in range(args.repeat):
            for way in found:
                folder = Path(tmp) / f"{way}-{i}"
                folder.mkdir()
                out = subprocess.run([sys.executable, "-c", script, str(folder), way], capture_output=True,
                                     text=True, check=True, env=env)
                found[way].append(json.loads(out.stdout.strip().splitlines()[-1]))
    median = {way: {k: statistics.median(r[k] for r in runs) for k in ("cpu_s", "wall_s")}
              for way, runs in found.items()}
    print(f"{'way':<12} {'CPU s':>7} {'wall s':>7}   (median of {args.repeat}, a fresh process each)")
    for way, m in median.items():
        print(f"{way:<12} {m['cpu_s']:7.3f} {m['wall_s']:7.3f}")
    print(f"migrations / blank: CPU {median['migrations']['cpu_s'] / median['blank']['cpu_s']:.1f}x, "
          f"wall {median['migrations']['wall_s'] / median['blank']['wall_s']:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
