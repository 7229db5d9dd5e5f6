"""The memory prediction against reality on CPU, the whole matrix: four model shapes under three shardings,
two steps each, in one ``torchrun`` of two gloo ranks through the trainer's own parts
(``benchmarks/fit_worker.py``), each rank's measured peak beside what the trainer predicted for that run.
``tests/trainer/loop/test_fit_measured.py`` runs five of these cases (every shape, every sharding) through the
same functions and holds each within 25%; this prints all twelve, their errors and the sharding's effect.

    .venv/bin/python benchmarks/bench_fit.py [--json FILE]

The shapes differ where the prediction has parts to get right: blocks too small for a unit of their own
(the whole model in the root's), blocks grouped into units, a tied vocabulary large enough for the loss's
logits to weigh, and a few large blocks. A CPU rank's peak is its resident memory (``VmHWM``) above what it
held before the model. glibc keeps freed memory below its mmap threshold for later allocations, so resident
memory would measure the allocator's history as much as the run; the ranks run with
``MALLOC_MMAP_THRESHOLD_`` at 128 KiB, so that freed tensors go back at once and the peak is the tensors'
(as a GPU's ``max_memory_allocated`` is).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHAPES = {
    "root-only": dict(hidden_size=256, intermediate_size=768, num_hidden_layers=4, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=8000, tie_word_embeddings=False),
    "grouped-units": dict(hidden_size=384, intermediate_size=1024, num_hidden_layers=8, num_attention_heads=6,
                          num_key_value_heads=2, vocab_size=4000, tie_word_embeddings=False),
    "tied-vocab": dict(hidden_size=320, intermediate_size=864, num_hidden_layers=2, num_attention_heads=5,
                       num_key_value_heads=5, vocab_size=32000, tie_word_embeddings=True),
    "large-blocks": dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=2, num_attention_heads=16,
                         num_key_value_heads=4, vocab_size=2000, tie_word_embeddings=False),
}
STRATEGIES = ("full_shard", "shard_grad_op", "no_shard")
TOLERANCE = 0.25
WORDS = ["the", "of", "and", "to", "in", "a", "is", "that", "for", "it", "as", "was", "with", "be", "by", "on"]


def make_models(folder: Path, names) -> dict[str, Path]:
    """Each named shape saved as a Hugging Face folder (random weights, seed 0)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    folders = {}
    for name in names:
        torch.manual_seed(0)
        folders[name] = folder / name
        LlamaForCausalLM(LlamaConfig(**SHAPES[name], max_position_embeddings=512)).save_pretrained(folders[name])
    return folders


def measure(tmp: Path, pairs: list[tuple[str, str]], tokenizer: Path, env: dict[str, str]) -> tuple[list[dict], str]:
    """Each (shape, sharding) of ``pairs`` trained and measured in one torchrun of two ranks: one result a
    case, in order, and what the run said when it failed (empty otherwise)."""
    data = tmp / "data.jsonl"
    data.write_text("".join(json.dumps({"text": " ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(120))})
                            + "\n" for i in range(64)))
    folders = make_models(tmp, dict.fromkeys(name for name, _ in pairs))
    cases = [{"name": name, "params": {
        "model_name": str(folders[name]), "dataset_name": str(data), "output_dir": str(tmp / "out"),
        "max_seq_len": 128, "per_device_batch_size": 2, "max_steps": 2, "seed": 1,
        "model": {"tokenizer": str(tokenizer), "compile": False},
        "data": {"format": "text", "eval_fraction": 0.0}, "fsdp": {"sharding": sharding},
        "checkpoint": {"save_final": False, "export_hf": False}}} for name, sharding in pairs]
    (tmp / "cases.json").write_text(json.dumps(cases))
    out = tmp / "out.jsonl"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={port}",
                           str(ROOT / "benchmarks/fit_worker.py"), str(tmp / "cases.json"), str(out)],
                          cwd=tmp, env={**env, "OMP_NUM_THREADS": "1", "MALLOC_MMAP_THRESHOLD_": str(128 * 1024)},
                          capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        return [], done.stdout[-3000:] + done.stderr[-3000:]
    return [json.loads(line) for line in out.read_text().splitlines()], ""


def table(results: list[dict]) -> list[tuple[str, str, int, int, float]]:
    """One row a case: shape, sharding, predicted and measured MiB (the higher rank's), the error."""
    rows = []
    for r in results:
        peak = max(r["measured"])
        rows.append((r["name"], r["sharding"], r["predicted"] >> 20, peak >> 20, (peak - r["predicted"]) / r["predicted"]))
    return rows


def show(rows) -> str:
    return "\n".join(f"{n:14s} {s:14s} predicted {p:5d} MiB measured {m:5d} MiB {e:+.0%}" for n, s, p, m, e in rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="every case's result written here")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from trainer.assets import resolve_model

    with tempfile.TemporaryDirectory(prefix="bench-fit-") as tmp:
        tokenizer = Path(resolve_model("builtin:tiny-llama", Path(tmp) / "assets"))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        results, failed = measure(Path(tmp), [(n, s) for n in SHAPES for s in STRATEGIES], tokenizer, env)
    if failed:
        print(failed, file=sys.stderr)
        return 1
    rows = table(results)
    print(show(rows))
    worst = max(rows, key=lambda row: abs(row[4]))
    print(f"largest error: {worst[4]:+.0%} ({worst[0]}, {worst[1]}); within {TOLERANCE:.0%}: "
          f"{sum(abs(row[4]) <= TOLERANCE for row in rows)} of {len(rows)}")
    for shape in SHAPES:
        by = {row[1]: row[3] for row in rows if row[0] == shape}
        print(f"{shape}: full_shard measures {by['full_shard'] / by['no_shard']:.2f}x no_shard")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
