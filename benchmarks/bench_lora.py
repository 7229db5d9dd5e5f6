"""LoRA against full fine-tuning, and our LoRA against PEFT under Hugging Face ``Trainer``: one run, one
model, one data set, 2 CPU processes each.

    .venv/bin/python benchmarks/bench_lora.py [--steps 8] [--hidden 768] [--layers 6] [--keep DIR]
        [--runs full,lora,lora-unpacked,hf]

The model is Llama-shaped (32,000-token vocabulary, ``--hidden``/``--layers``; ~92M parameters by default)
with random weights saved as safetensors here: weights dominate its memory (2 sequences of 128 tokens a
rank). Runs, each ``--steps`` optimiser steps:

- ours, full fine-tuning (``fsdp.sharding: no_shard``, what ``auto`` picks for this size on this machine);
- ours, LoRA (r 16, alpha 32, ``all-linear``), the same sharding, packed (the trainer's default);
- ours, LoRA without packing (one example per row: what the ``Trainer`` baseline trains on);
- PEFT under ``transformers.Trainer`` with the same LoRA settings and examples (``use_cpu``: accelerate runs
  it as DDP on CPU, see FACTS), padded per batch by ``DataCollatorForSeq2Seq``.

Peak memory per rank is each worker process's ``VmHWM`` (peak resident set), polled from ``/proc`` while it
runs; "above imports" subtracts the peak of a process that only imports what a worker imports (torch,
transformers, peft, the trainer), measured here first: what the model, its training state and the
activations took. Tokens/s counts real (non-pad) tokens: ours from the trainer's ``train_summary`` line
(evaluation and checkpoints left out), Trainer's from the examples it trained on over its
``train_runtime``. The load average is printed with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
LORA = {"r": 16, "alpha": 32, "target_modules": "all-linear"}
BATCH, SEQ = 2, 128


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _peak_rss(cmd: list[str], env: dict, cwd: Path) -> tuple[str, dict[int, tuple[float, float]]]:
    """Run ``cmd``; its output, and each worker's (peak RSS, RSS when first seen) in GiB by pid."""
    import psutil

    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    peaks: dict[int, list[float]] = {}
    out: list[str] = []
    import threading

    reader = threading.Thread(target=lambda: out.extend(proc.stdout), daemon=True)
    reader.start()
    while proc.poll() is None:
        try:
            children = psutil.Process(proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            break
        for child in children:
            try:
                with open(f"/proc/{child.pid}/status", encoding="ascii") as f:
                    fields = dict(line.split(":", 1) for line in f if ":" in line)
                if "python" not in child.name() or child.pid == proc.pid:
                    continue
                hwm, rss = (int(fields[k].split()[0]) / 2**20 for k in ("VmHWM", "VmRSS"))
                peak = peaks.setdefault(child.pid, [hwm, rss])
                peak[0] = max(peak[0], hwm)
            except (OSError, KeyError, psutil.NoSuchProcess):
                continue
        time.sleep(0.2)
    reader.join(timeout=10)
    text = "".join(out)
    if proc.returncode != 0:
        raise SystemExit(text[-4000:])
    workers = {pid: (p[0], p[1]) for pid, p in peaks.items() if p[0] > 0.2}  # torchrun's own process is small
    return text, workers


def import_baseline(env: dict) -> float:
    """The peak resident set (GiB) of a process that imports what a worker imports, and nothing more."""
    code = ("import torch, transformers, peft, datasets; from transformers import AutoModelForCausalLM, Trainer; "
            "import trainer.loop.train, trainer.lora.adapters; "
            "print([l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1])")
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    return int(out.stdout.split()[-1]) / 2**20


def make_model(folder: Path, hidden: int, layers: int) -> Path:
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from trainer.assets import resolve_model

    tok = AutoTokenizer.from_pretrained(resolve_model("builtin:tiny-llama"))
    config = LlamaConfig(vocab_size=32000, hidden_size=hidden, intermediate_size=hidden * 8 // 3, num_hidden_layers=layers,
                         num_attention_heads=hidden // 64, num_key_value_heads=hidden // 64,
                         bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def ours(tmp: Path, model: Path, steps: int, name: str, env: dict, **over) -> dict:
    params = {"model_name": str(model), "dataset_name": "builtin:tiny-alpaca", "output_dir": str(tmp / name),
              "max_seq_len": SEQ, "per_device_batch_size": BATCH, "learning_rate": 1e-4, "max_steps": steps,
              "fsdp": {"sharding": "no_shard"}, "logging": {"eval_max_batches": 1},
              "checkpoint": {"save_final": False, "export_hf": False}, **over}
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(params))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={_port()}",
           "-m", "trainer", str(path)]
    text, workers = _peak_rss(cmd, env, ROOT)
    summary = re.search(r"train_summary steps=(\d+) real_tokens=(\d+) seconds=([\d.]+) tokens_per_s=(\d+)", text)
    return {"name": name, "tokens_per_s": float(summary.group(4)), "workers": workers}


def hf_trainer(tmp: Path, model: Path, steps: int, env: dict) -> dict:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={_port()}",
           str(Path(__file__).with_name("lora_hf_worker.py")), str(model), str(tmp / "hf"), str(steps), str(BATCH),
           str(SEQ), json.dumps(LORA)]
    text, workers = _peak_rss(cmd, env, ROOT)
    said = re.search(r"HF_TRAINER real_tokens=(\d+) seconds=([\d.]+)", text)
    return {"name": "PEFT + HF Trainer (DDP)", "tokens_per_s": int(said.group(1)) / float(said.group(2)),
            "workers": workers}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--keep", type=Path, help="work here (kept) instead of a temporary folder")
    parser.add_argument("--runs", default="full,lora,lora-unpacked,hf",
                        help="which runs, in this order (the ratios need full,lora and lora-unpacked,hf)")
    args = parser.parse_args()
    tmp = args.keep or Path(tempfile.mkdtemp(prefix="bench-lora-"))
    tmp.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "TQDM_DISABLE": "1"}
    env.pop("FSDP_TUI_METRICS_FILE", None)
    model = tmp / "model"
    if not (model / "config.json").exists():
        make_model(model, args.hidden, args.layers)
    baseline = import_baseline(env)
    load_before = os.getloadavg()
    runs = {"full": lambda: ours(tmp, model, args.steps, "ours, full fine-tuning", env),
            "lora": lambda: ours(tmp, model, args.steps, "ours, LoRA (packed)", env, lora=LORA),
            "lora-unpacked": lambda: ours(tmp, model, args.steps, "ours, LoRA (not packed)", env, lora=LORA,
                                          data={"packing": False}),
            "hf": lambda: hf_trainer(tmp, model, args.steps, env)}
    rows = {name: runs[name]() for name in args.runs.split(",")}
    load_after = os.getloadavg()
    print(f"model: {model} ({sum(f.stat().st_size for f in model.glob('*.safetensors')) / 2**20:.0f} MiB of fp32 "
          f"weights), {args.steps} steps, {BATCH} x {SEQ} tokens a rank, 2 CPU processes")
    print(f"load average before {load_before[0]:.2f} {load_before[1]:.2f}, after {load_after[0]:.2f} "
          f"{load_after[1]:.2f} ({os.cpu_count()} CPUs)")
    print(f"imports alone: peak {baseline:.2f} GiB a process")
    print(f"{'run':<26} {'tokens/s':>9} {'peak GiB/rank':>15} {'above imports':>14}")
    for row in rows.values():
        peaks = sorted(p for p, _ in row["workers"].values())
        print(f"{row['name']:<26} {row['tokens_per_s']:>9.0f} {' / '.join(f'{p:.2f}' for p in peaks):>15} "
              f"{max(peaks) - baseline:>14.2f}")
    if "full" in rows and "lora" in rows:
        full, lora = (max(p for p, _ in rows[k]["workers"].values()) for k in ("full", "lora"))
        print(f"LoRA peak / full peak: {lora / full:.2f} (above imports: {(lora - baseline) / (full - baseline):.2f});"
              " goal <= 0.5")
    if "hf" in rows:
        for name in ("lora-unpacked", "lora"):
            if name in rows:
                print(f"ours {name} / HF Trainer tokens/s: {rows[name]['tokens_per_s'] / rows['hf']['tokens_per_s']:.2f}x"
                      " (goal >= 1)")


if __name__ == "__main__":
    main()
