"""Seed-000 recipe vs our trainer's defaults: same tiny model, same data, same 2 CPU processes, one epoch.

    .venv/bin/python benchmarks/bench_trainer_cpu.py [--sets short,long] [--models tiny,vocab32k|PATH]
        [--data FILE.jsonl[:SEQ]]

Two data sets: ``short`` is the shipped ``builtin:tiny-alpaca`` at max_seq_len 128; ``long`` is 200
alpaca-format examples with long inputs and answers (made here, deterministic) at max_seq_len 512.
Two models: ``tiny`` is ``builtin:tiny-llama`` (0.24M parameters, its own 320-token vocabulary);
``vocab32k`` is the same model with a Llama-2-sized output layer (32,000 rows, 4.3M parameters, made
here from a fixed seed): at this size the output layer and its cross-entropy are most of the step, as
they are for small real models. A path to a Hugging Face model folder works too.
For each, both runs are timed as a whole (wall: torchrun start to exit, start-up, evaluation, saves and
export included) and inside the training loop (real, non-pad tokens per second, evaluation and
checkpoint time left out). Floors: in-loop >= 4x and wall >= 3x the recipe's, on both sets.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
BATCH = 8
FLOORS = {"in-loop": 4.0, "wall": 3.0}


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun(args: list[str], env: dict, cwd: Path) -> tuple[str, float]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={_port()}", *args]
    start = time.perf_counter()
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=3600)
    wall = time.perf_counter() - start
    if out.returncode != 0:
        raise SystemExit(out.stdout[-3000:] + out.stderr[-3000:])
    return out.stdout, wall


def long_examples(path: Path, count: int = 200, seed: int = 0) -> Path:
    """Alpaca rows whose input is a list of 3-28 made-up words and whose answer is that list
    reversed: 60 to 450 tokens each (alpaca-like), of widely varying length."""
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(count):
            words = ["".join(rng.choice(letters) for _ in range(rng.randint(3, 8))) for _ in range(rng.randint(3, 28))]
            f.write(json.dumps({"instruction": "Reverse the order of the words.", "input": " ".join(words),
                                "output": " ".join(reversed(words))}) + "\n")
    return path


def vocab_model(tmp: Path, rows: int = 32000) -> str:
    """``builtin:tiny-llama`` with ``rows`` output rows (its tokenizer uses the first 320)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from trainer.assets import resolve_model

    base = resolve_model("builtin:tiny-llama")
    config = AutoConfig.from_pretrained(base)
    config.vocab_size = rows
    torch.manual_seed(0)
    target = tmp / f"tiny-llama-{rows}"
    AutoModelForCausalLM.from_config(config).save_pretrained(target)
    AutoTokenizer.from_pretrained(base).save_pretrained(target)
    return str(target)


def run_set(name: str, model_dir: str, data: str, max_seq_len: int, env: dict, tmp: Path) -> dict:
    seed_out, seed_wall = _torchrun([str(ROOT / "benchmarks/seed_recipe.py"), model_dir, data, str(max_seq_len),
                                     str(BATCH)], env, ROOT)
    seed = json.loads(seed_out.strip().splitlines()[-1])
    params = {"model_name": model_dir, "dataset_name": data, "output_dir": str(tmp / f"{Path(model_dir).name}-{name}-out"),
              "max_seq_len": max_seq_len, "per_device_batch_size": BATCH, "learning_rate": 3e-3, "num_epochs": 1}
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(params))
    out, wall = _torchrun(["-m", "trainer", str(path)], env, tmp)
    m = re.search(r"train_summary steps=(\d+) real_tokens=(\d+) seconds=([\d.]+)", out)
    ours = {"steps": int(m.group(1)), "real_tokens": int(m.group(2)), "seconds": float(m.group(3))}
    notes = [line for line in out.splitlines() if line.startswith(("attention:", "packing:", "sharding:", "training "))]
    return {"name": name, "model": Path(model_dir).name, "max_seq_len": max_seq_len, "data": data, "seed": {**seed, "wall": seed_wall},
            "ours": {**ours, "wall": wall}, "notes": notes}


def report(r: dict) -> bool:
    print(f"\n[{r['name']}] model {r['model']} | data {r['data']} | max_seq_len {r['max_seq_len']} | batch {BATCH}/rank | 2 CPU processes")
    for line in r["notes"]:
        print(f"  ours: {line}")
    for label, x in (("seed recipe (FSDP1, pad to max, AC)", r["seed"]), ("fsdp-tui trainer (defaults)", r["ours"])):
        print(f"  {label:<38} steps {x['steps']:>4}  real tokens {x['real_tokens']:>8}  loop {x['seconds']:7.1f} s  "
              f"{x['real_tokens'] / x['seconds']:9.0f} real tok/s  wall {x['wall']:6.1f} s")
    in_loop = (r["ours"]["real_tokens"] / r["ours"]["seconds"]) / (r["seed"]["real_tokens"] / r["seed"]["seconds"])
    wall = r["seed"]["wall"] / r["ours"]["wall"]
    ok = in_loop >= FLOORS["in-loop"] and wall >= FLOORS["wall"]
    print(f"  in-loop real tok/s ours/seed {in_loop:.2f}x (floor {FLOORS['in-loop']:.0f}x) | "
          f"wall seed/ours {wall:.2f}x (floor {FLOORS['wall']:.0f}x): {'met' if ok else 'MISSED'}")
    return ok


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sets", default="short,long")
    parser.add_argument("--models", default="tiny,vocab32k")
    parser.add_argument("--data", action="append", default=[], metavar="PATH[:SEQ]",
                        help="an alpaca-format JSON Lines file to run as one more set (max_seq_len SEQ, "
                             "default 512); with --sets '' it runs alone")
    args = parser.parse_args()
    from trainer.assets import resolve_dataset, resolve_model

    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}
    results = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        sets = {"short": (resolve_dataset("builtin:tiny-alpaca"), 128),
                "long": (str(long_examples(tmp / "long_alpaca.jsonl")), 512)}
        for spec in args.data:
            path, _, seq = spec.partition(":")
            sets[Path(path).name] = (str(Path(path).resolve()), int(seq or 512))
        names = [n for n in args.sets.split(",") if n] + [Path(spec.partition(":")[0]).name for spec in args.data]
        models = {"tiny": lambda: resolve_model("builtin:tiny-llama"), "vocab32k": lambda: vocab_model(tmp)}
        for model in args.models.split(","):
            model_dir = models[model]() if model in models else model
            for name in dict.fromkeys(names):
                data, seq = sets[name]
                results.append(report(run_set(name, model_dir, data, seq, env, tmp)))
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
