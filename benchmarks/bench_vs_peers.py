"""Our trainer against Hugging Face ``Trainer`` and TRL's ``SFTTrainer``, side by side, on the same tokens.

    .venv/bin/python benchmarks/bench_vs_peers.py [--sizes small,large] [--repeats 2] [--sides ...]
        [--model PATH] [--data FILE.jsonl] [--seq 256] [--batch 4] [--gpu] [--json FILE] [--keep DIR]

Needs the peers: ``pip install -e '.[all,test,peers]'`` (accelerate, trl). Every side is started the way a
user starts it, ``torchrun --nproc_per_node=2`` on CPU (gloo, fp32) or one process per GPU with ``--gpu``
(NCCL, bf16), on the same Llama folder (built here with ``save_pretrained`` at two sizes: ``small`` about
0.1M parameters, ``large`` about 11M; or ``--model``), the same alpaca examples (made here, or ``--data``)
tokenized the same way with the prompt masked, the same order, batch, learning rate (constant), AdamW
(betas 0.9/0.95, no weight decay), clip 1.0, sdpa. The sides:

- ``ours-no_shard``, ``ours-full_shard``: ``-m trainer`` with ``fsdp.sharding`` set, one example per row
  (``data.packing: false``), unshuffled, every step logged (the trainer's default);
- ``hf``: ``transformers.Trainer`` (``use_cpu``: accelerate runs it as ``DistributedDataParallel`` on CPU;
  its FSDP has no CPU path, so ``no_shard`` against DDP is the fair pair and ``full_shard`` against DDP what a
  user sees), padded per batch, sequential order;
- ``trl``, ``trl-packed``: ``trl.SFTTrainer`` on the same pre-tokenized examples, without and with its
  packing (``bfd``, padding-free);
- ``ours-packed``: the trainer with its packing (the default), on the same examples.

Each run trains one epoch of the same examples, so every side trains on the same real (non-pad) tokens
(checked and printed). Sides alternate within each repeat (the order turns each repeat) so that ratios
are taken under the same load; the load average is printed with every run. In-loop tokens/s is real tokens
over the loop's time (first step's start to last step's end; ours: the ``train_summary`` line); wall is
torchrun's start to its exit. The loss agreement compares each step's loss of ``ours-no_shard`` with ``hf``.
No side saves a checkpoint or exports (the ``Trainer``'s default saves nothing in a run this short).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SIDES = ("ours-no_shard", "ours-full_shard", "hf", "trl", "trl-packed", "ours-packed")
SIZES = {"small": {"hidden": 48, "intermediate": 128, "layers": 2, "heads": 4},
         "large": {"hidden": 384, "intermediate": 1024, "layers": 6, "heads": 6}}
STEPS = {"small": 100, "large": 20}
"""Optimiser steps of an unpacked run (one epoch of ``steps x world x batch`` examples)."""
GOALS = (("ours-no_shard", "hf", 1.2, "no_shard vs Trainer (DDP)"),
         ("ours-full_shard", "hf", 1.0, "full_shard vs Trainer (DDP)"),
         ("ours-packed", "trl", 2.0, "ours packed vs TRL unpacked"),
         ("ours-packed", "trl-packed", 1.0, "ours packed vs TRL packed"))
WALL_GOAL = 0.8
"""Our whole process (no_shard) at most this share of the ``Trainer``'s wall time."""
LOSS_TOLERANCE = 1e-5


@dataclass
class Run:
    size: str
    side: str
    repeat: int
    real_tokens: int = 0
    seconds: float = 0.0
    wall: float = 0.0
    steps: int = 0
    losses: list[float] = field(default_factory=list)
    load: tuple[float, float] = (0.0, 0.0)
    note: str = ""
    skipped: str | None = None

    @property
    def tokens_per_s(self) -> float:
        return self.real_tokens / self.seconds if self.seconds else 0.0


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_model(folder: Path, size: dict) -> Path:
    """A Llama folder with random weights (fixed seed) and the built-in 320-token tokenizer."""
    if (folder / "config.json").exists():
        return folder
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from trainer.assets import resolve_model

    tok = AutoTokenizer.from_pretrained(resolve_model("builtin:tiny-llama"))
    config = LlamaConfig(vocab_size=len(tok), hidden_size=size["hidden"], intermediate_size=size["intermediate"],
                         num_hidden_layers=size["layers"], num_attention_heads=size["heads"],
                         num_key_value_heads=size["heads"], max_position_embeddings=2048,
                         bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def make_data(path: Path, count: int, seed: int = 0) -> Path:
    """``count`` alpaca rows: a list of 2-14 made-up words and that list reversed (about 25-150 tokens
    each, about half of them prompt), deterministic."""
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(count):
            words = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 7))) for _ in range(rng.randint(2, 14))]
            f.write(json.dumps({"instruction": "Reverse the order of the words.", "input": " ".join(words),
                                "output": " ".join(reversed(words))}) + "\n")
    return path


def num_params(model: Path) -> int:
    from safetensors import safe_open

    with safe_open(str(model / "model.safetensors"), "pt") as f:
        return sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys())  # noqa: SIM118 (not a dict)


class Bench:
    """Runs one side at a time and keeps what each printed."""

    def __init__(self, args, tmp: Path) -> None:
        self.args, self.tmp = args, tmp
        self.nproc = 2
        if args.gpu:
            import torch

            self.nproc = max(1, torch.cuda.device_count())
        self.env = {**os.environ, "PYTHONPATH": str(ROOT), "TQDM_DISABLE": "1", "OMP_NUM_THREADS": "1"}
        if args.gpu:
            self.env.pop("OMP_NUM_THREADS")
        self.env.pop("FSDP_TUI_METRICS_FILE", None)
        self.missing = {side: why for side in SIDES if (why := _missing(side))}

    def torchrun(self, argv: list[str], env: dict) -> tuple[str, float]:
        cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={self.nproc}",
               f"--master_port={_port()}", *argv]
        start = time.perf_counter()
        out = subprocess.run(cmd, cwd=self.tmp, env=env, capture_output=True, text=True, timeout=3600)
        wall = time.perf_counter() - start
        if out.returncode != 0:
            raise SystemExit(f"{' '.join(argv[:3])} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
        return out.stdout, wall

    def run(self, size: str, side: str, repeat: int, model: Path, data: Path) -> Run:
        run = Run(size, side, repeat)
        if side in self.missing:
            run.skipped = self.missing[side]
            return run
        before = os.getloadavg()[0]
        if side.startswith("ours"):
            self._ours(run, model, data)
        else:
            self._peer(run, model, data)
        run.load = (before, os.getloadavg()[0])
        return run

    def _ours(self, run: Run, model: Path, data: Path) -> None:
        sharding = {"ours-packed": "auto"}.get(run.side, run.side.removeprefix("ours-"))
        params = {"model_name": str(model), "dataset_name": str(data), "output_dir": str(self.tmp / f"out-{run.side}"),
                  "max_seq_len": self.args.seq, "per_device_batch_size": self.args.batch, "learning_rate": 1e-3,
                  "num_epochs": 1, "seed": 0,
                  "data": {"format": "alpaca", "packing": run.side == "ours-packed", "shuffle": False,
                           "eval_fraction": 0.0},
                  "optim": {"schedule": "constant", "warmup_steps": 0, "max_grad_norm": 1.0, "weight_decay": 0.0},
                  "fsdp": {"sharding": sharding, "mixed_precision": "bf16" if self.args.gpu else "fp32"},
                  "checkpoint": {"save_final": False, "export_hf": False}}
        path = self.tmp / f"{run.side}.yaml"
        import yaml

        path.write_text(yaml.safe_dump(params))
        metrics = self.tmp / f"metrics-{run.side}-{run.size}-{run.repeat}.jsonl"
        metrics.unlink(missing_ok=True)
        out, run.wall = self.torchrun(["-m", "trainer", str(path)], {**self.env, "FSDP_TUI_METRICS_FILE": str(metrics)})
        m = re.search(r"train_summary steps=(\d+) real_tokens=(\d+) seconds=([\d.]+)", out)
        if m is None:
            raise SystemExit(f"{run.side}: no train_summary line:\n{out[-3000:]}")
        run.steps, run.real_tokens, run.seconds = int(m.group(1)), int(m.group(2)), float(m.group(3))
        records = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
        run.losses = [r["loss"] for r in records if r.get("kind") == "train"]
        run.note = "; ".join(line for line in out.splitlines() if line.startswith(("sharding:", "attention:", "packing:")))

    def _peer(self, run: Run, model: Path, data: Path) -> None:
        settings = {"side": run.side, "model": str(model), "data": str(data), "out": str(self.tmp / f"out-{run.side}"),
                    "seq": self.args.seq, "batch": self.args.batch, "lr": 1e-3, "epochs": 1, "max_grad_norm": 1.0,
                    "bf16": self.args.gpu}
        out, run.wall = self.torchrun([str(ROOT / "benchmarks/peers_worker.py"), json.dumps(settings)], self.env)
        line = next((ln for ln in out.splitlines() if ln.startswith("PEERS_RESULT ")), None)
        if line is None:
            raise SystemExit(f"{run.side}: no result line:\n{out[-3000:]}")
        got = json.loads(line.removeprefix("PEERS_RESULT "))
        run.steps, run.real_tokens, run.seconds, run.losses = got["steps"], got["real_tokens"], got["seconds"], got["losses"]
        run.note = f"accelerate: {got['distributed']}, model wrapped as {got['torch_module']}"


def _missing(side: str) -> str | None:
    """Why a peer side cannot run here (its package is not installed), else None."""
    import importlib.util

    needs = {"hf": ("accelerate",), "trl": ("accelerate", "trl", "datasets"), "trl-packed": ("accelerate", "trl", "datasets")}
    for name in needs.get(side, ()):
        if importlib.util.find_spec(name) is None:
            return f"{name} is not installed (pip install -e '.[peers]')"
    return None


def ratios(runs: list[Run], size: str) -> dict:
    """Per repeat, each goal's in-loop ratio (runs of the same repeat ran back to back), then their median."""
    by = {(r.side, r.repeat): r for r in runs if r.size == size and r.skipped is None}
    repeats = sorted({r.repeat for r in runs if r.size == size})
    out = {}
    for ours, peer, goal, label in GOALS:
        each = [by[(ours, k)].tokens_per_s / by[(peer, k)].tokens_per_s for k in repeats
                if (ours, k) in by and (peer, k) in by and by[(peer, k)].tokens_per_s]
        if each:
            out[label] = {"ours": ours, "peer": peer, "goal": goal, "each": each, "median": statistics.median(each)}
    walls = [by[("ours-no_shard", k)].wall / by[("hf", k)].wall for k in repeats
             if ("ours-no_shard", k) in by and ("hf", k) in by]
    if walls:
        out["wall no_shard / Trainer"] = {"ours": "ours-no_shard", "peer": "hf", "goal": WALL_GOAL, "each": walls,
                                          "median": statistics.median(walls), "at_most": True}
    return out


def verdict(r: dict) -> str:
    """met / MISSED, or undecided when the repeats fall on both sides of the goal."""
    each, goal = r["each"], r["goal"]
    ok = [(x <= goal) if r.get("at_most") else (x >= goal) for x in each]
    if all(ok):
        return "met"
    if not any(ok):
        return "MISSED"
    return "undecided (repeats on both sides of the goal)"


def loss_agreement(runs: list[Run], size: str) -> float | None:
    a = [r for r in runs if r.size == size and r.side == "ours-no_shard" and r.losses]
    b = [r for r in runs if r.size == size and r.side == "hf" and r.losses]
    if not a or not b or len(a[0].losses) != len(b[0].losses):
        return None
    return max(abs(x - y) for x, y in zip(a[0].losses, b[0].losses, strict=True))


def report(runs: list[Run], sizes: dict[str, tuple[Path, int]], args, nproc: int) -> dict:
    device = "GPU (NCCL, bf16)" if args.gpu else "CPU (gloo, fp32)"
    print(f"\n{nproc} processes on {device}; seq {args.seq}, batch {args.batch} a process; {os.cpu_count()} CPUs")
    results: dict = {"device": device, "nproc": nproc, "seq": args.seq, "batch": args.batch, "sizes": {}}
    for size, (model, params) in sizes.items():
        print(f"\n[{size}] {model.name}: {params / 1e6:.3f}M parameters")
        print(f"  {'side':<16} {'rep':>3} {'steps':>5} {'real tokens':>11} {'loop s':>7} {'tok/s':>8} {'wall s':>7}"
              f" {'load':>11}  notes")
        for r in (r for r in runs if r.size == size):
            if r.skipped:
                print(f"  {r.side:<16} {r.repeat:>3} skipped: {r.skipped}")
                continue
            print(f"  {r.side:<16} {r.repeat:>3} {r.steps:>5} {r.real_tokens:>11} {r.seconds:>7.2f} {r.tokens_per_s:>8.0f}"
                  f" {r.wall:>7.1f} {r.load[0]:>5.1f}-{r.load[1]:<5.1f}  {r.note}")
        got = ratios(runs, size)
        for label, r in got.items():
            each = ", ".join(f"{x:.2f}" for x in r["each"])
            sign = "<=" if r.get("at_most") else ">="
            print(f"  {label:<32} median {r['median']:.2f}x (each repeat: {each}); goal {sign} {r['goal']}x: {verdict(r)}")
        agree = loss_agreement(runs, size)
        if agree is not None:
            print(f"  loss, ours no_shard vs Trainer, every step: max |difference| {agree:.2e}"
                  f" ({'within' if agree <= LOSS_TOLERANCE else 'OUTSIDE'} {LOSS_TOLERANCE:g})")
        tokens = {r.side: r.real_tokens for r in runs if r.size == size and not r.skipped and r.repeat == 0}
        print(f"  real tokens per side: {tokens}")
        results["sizes"][size] = {"model": str(model), "params": params, "ratios": got, "loss_max_diff": agree,
                                  "runs": [asdict(r) for r in runs if r.size == size]}
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="small,large", help="of: small (~0.1M), large (~11M)")
    parser.add_argument("--model", type=Path, help="a Hugging Face Llama-like folder to run instead of --sizes")
    parser.add_argument("--data", type=Path, help="an alpaca JSON Lines file instead of the made-up examples "
                                                  "(its first steps x processes x batch rows)")
    parser.add_argument("--steps", type=int, help="optimiser steps of an unpacked run (default: small 100, large 20)")
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--batch", type=int, default=4, help="examples a process per step")
    parser.add_argument("--repeats", type=int, help="rounds of every side (default 2; 1 with --gpu)")
    parser.add_argument("--sides", default=",".join(SIDES))
    parser.add_argument("--gpu", action="store_true", help="on this node's GPUs: one process each, NCCL, bf16")
    parser.add_argument("--json", type=Path, help="write every run and ratio here")
    parser.add_argument("--keep", type=Path, help="work here (kept) instead of a temporary folder")
    args = parser.parse_args()
    args.repeats = args.repeats or (1 if args.gpu else 2)
    sides = [s for s in args.sides.split(",") if s]
    unknown = [s for s in sides if s not in SIDES]
    if unknown:
        parser.error(f"--sides: unknown {', '.join(unknown)} (known: {', '.join(SIDES)})")
    tmp = args.keep or Path(tempfile.mkdtemp(prefix="bench-peers-"))
    tmp.mkdir(parents=True, exist_ok=True)
    bench = Bench(args, tmp)
    sizes: dict[str, tuple[Path, int]] = {}
    data: dict[str, Path] = {}
    names = ["model"] if args.model else [s for s in args.sizes.split(",") if s]
    for name in names:
        model = args.model.resolve() if args.model else make_model(tmp / f"llama-{name}", SIZES[name])
        steps = args.steps or STEPS.get(name, 30)
        count = steps * bench.nproc * args.batch
        if args.data:
            lines = args.data.read_text(encoding="utf-8").splitlines()[:count]
            data[name] = tmp / f"data-{name}.jsonl"
            data[name].write_text("\n".join(lines) + "\n", encoding="utf-8")
        else:
            data[name] = make_data(tmp / f"data-{name}.jsonl", count)
        sizes[name] = (model, num_params(model))
    print(f"load average at the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} CPUs)")
    runs: list[Run] = []
    for name, (model, _) in sizes.items():
        for k in range(args.repeats):
            turn = sides[k % len(sides):] + sides[: k % len(sides)]  # each repeat starts with another side
            for side in turn:
                run = bench.run(name, side, k, model, data[name])
                runs.append(run)
                if run.skipped is None:
                    print(f"[{name} {k}] {side}: {run.tokens_per_s:.0f} tok/s in the loop, wall {run.wall:.1f} s, "
                          f"load {run.load[0]:.1f}-{run.load[1]:.1f}", flush=True)
    results = report(runs, sizes, args, bench.nproc)
    results["load_end"] = os.getloadavg()
    print(f"\nload average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    summary = [f"{size} {label} {r['median']:.2f}x" for size, got in results["sizes"].items()
               for label, r in got["ratios"].items()]
    print("summary: " + ("; ".join(summary) if summary else "no ratio (a side of each pair was skipped)"))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
