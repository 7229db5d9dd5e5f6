"""The memory wall of big vocabularies: peak memory per rank and tokens/s of our trainer (the chunked loss, the
full logits, each activation-checkpointing mode) against Hugging Face ``Trainer`` on the same tokens, and the
longest row that fits a memory limit, side by side in one run.

    .venv/bin/python benchmarks/bench_memory.py [--vocabs 128256,256000] [--seqs 512,1024,2048,4096,8192]
        [--sides ours,ours-full,hf] [--checkpointing off,full,selective] [--steps 4] [--budget-gib 6]
        [--limit-gib 5] [--longest 512:32768] [--shape 64x4] [--gpu] [--json FILE] [--keep DIR]

A Llama with a tiny hidden size (``--shape``: 64 wide, 4 layers) and a big vocabulary (``--vocabs``: Llama 3's 128,256 and
Gemma's 256,000 by default; the built-in 320-token tokenizer, so only the output layer's size changes) trains
``--steps`` steps of ``text`` rows (every token learned, one row a rank a step, cut at the sequence length:
no padding) under ``torchrun`` with 2 processes on CPU (gloo, fp32, one thread each) or one per GPU with
``--gpu`` (NCCL, bf16). The sides, each started as a user starts it:

- ``ours``: ``-m trainer`` as it comes (``model.cross_entropy: auto``: the loss in chunks), ``no_shard``;
- ``ours-full``: the same with ``model.cross_entropy: full``, the full logits as before the chunks;
- ``hf``: ``transformers.Trainer`` (``benchmarks/peers_worker.py``; on CPU accelerate runs it as DDP), the
  same examples tokenized by the trainer's code, the same order, batch, learning rate and optimiser.

With ``--checkpointing`` the ``ours`` side also runs with each other ``model.activation_checkpointing`` mode
(at the first vocabulary). Peak memory per rank is each worker process's high-water resident memory
(``ru_maxrss``; on GPUs ``torch.cuda.max_memory_allocated``), written as it exits by
``benchmarks/peak_probe/sitecustomize.py`` for every side alike; tokens/s is real tokens over the loop's time
(first step's start to last step's end). A side whose full logits (``seq x vocab x 4`` bytes a rank) would
take its two ranks past ``--budget-gib`` at about four (``Trainer``) or five (ours) copies is not run, and says so; every run is also held
by a cgroup (v1 memory controller) of that size, so a wrong guess ends in that run, not the machine.

``--longest`` then finds, for ``ours`` and ``ours-full`` at the first vocabulary, the longest row (doubling
from the first length to the last) for which one step completes inside a cgroup of ``--limit-gib`` for the
whole job: the row a given memory holds.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
PROBE = ROOT / "benchmarks" / "peak_probe"
SHAPE = {"hidden": 64, "layers": 4, "heads": 4}
"""The model's width and depth (``--shape``): tiny, so that the output layer and its loss are what grows."""
COPIES = {"ours-full": 5.0, "hf": 4.0}
"""About how many copies of a rank's fp32 logits a full-logits step holds at its peak (4.6 measured for ours
before the chunks, 3.6 for ``Trainer``, with a margin): what decides whether that side is run within the
budget."""
BASE_GIB = 0.7
"""A rank's memory besides the logits at these shapes (interpreter, torch, the model and its Adam state)."""
GOALS = {"memory": 0.5, "speed": 1.0, "longest": 2.0}
GIB = 2**30


@dataclass
class Run:
    side: str
    vocab: int
    seq: int
    checkpointing: str = "off"
    peak_gib: list[float] | None = None
    tokens: int = 0
    seconds: float = 0.0
    wall: float = 0.0
    loss: float | None = None
    skipped: str | None = None
    failed: str | None = None
    note: str = ""

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0

    @property
    def peak(self) -> float:
        return max(self.peak_gib or [0.0])


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_model(folder: Path, vocab: int) -> Path:
    """A Llama of ``SHAPE`` with ``vocab`` output rows (random, fixed seed) and the built-in tokenizer."""
    if (folder / "config.json").exists():
        return folder
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from trainer.assets import resolve_model

    tok = AutoTokenizer.from_pretrained(resolve_model("builtin:tiny-llama"))
    config = LlamaConfig(vocab_size=vocab, hidden_size=SHAPE["hidden"], intermediate_size=2 * SHAPE["hidden"],
                         num_hidden_layers=SHAPE["layers"], num_attention_heads=SHAPE["heads"],
                         num_key_value_heads=SHAPE["heads"], max_position_embeddings=65536,
                         bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                         tie_word_embeddings=False)
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(folder)
    tok.model_max_length = 1 << 20  # rows longer than its 512 are what this measures
    tok.save_pretrained(folder)
    return folder


def make_data(path: Path, model: Path, count: int, seq: int) -> Path:
    """``count`` text rows of made-up words, each at least ``seq`` tokens long (cut to it by every side)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model)
    rng = random.Random(seq)
    letters = "abcdefghijklmnopqrstuvwxyz"
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(count):
            words: list[str] = []
            while len(tok(" ".join(words)).input_ids) <= seq:
                words += ["".join(rng.choice(letters) for _ in range(rng.randint(2, 8))) for _ in range(seq // 4)]
            f.write(json.dumps({"text": " ".join(words)}) + "\n")
    return path


class Cgroup:
    """A cgroup v1 memory group of ``limit`` bytes that a command runs in (none where the controller is not
    mounted writable: the command runs unheld, said in the run's note)."""

    ROOT = Path("/sys/fs/cgroup/memory")

    def __init__(self, name: str, limit: int) -> None:
        self.path = self.ROOT / name
        try:
            self.path.mkdir()
            (self.path / "memory.limit_in_bytes").write_text(str(limit))
        except OSError:
            self.path = None

    def argv(self, argv: list[str]) -> list[str]:
        if self.path is None:
            return argv
        return ["sh", "-c", f'echo $$ > {self.path}/cgroup.procs && exec "$@"', "sh", *argv]

    def oom_killed(self) -> bool:
        if self.path is None:
            return False
        control = (self.path / "memory.oom_control").read_text()
        return int(re.search(r"oom_kill (\d+)", control).group(1)) > 0 if "oom_kill " in control else \
            int((self.path / "memory.failcnt").read_text()) > 0

    def close(self) -> None:
        if self.path is not None:
            for _ in range(50):
                try:
                    self.path.rmdir()
                    return
                except OSError:  # its last process is still leaving
                    time.sleep(0.1)


class Bench:
    def __init__(self, args, tmp: Path) -> None:
        self.args, self.tmp = args, tmp
        self.nproc = 2
        self.env = {**os.environ, "PYTHONPATH": f"{PROBE}{os.pathsep}{ROOT}", "TQDM_DISABLE": "1",
                    "OMP_NUM_THREADS": "1"}
        if args.gpu:
            import torch

            self.nproc = max(1, torch.cuda.device_count())
            self.env.pop("OMP_NUM_THREADS")
        self.env.pop("FSDP_TUI_METRICS_FILE", None)
        self.count = 0

    def data(self, model: Path, seq: int) -> Path:
        path = self.tmp / f"text-{seq}.jsonl"
        return path if path.exists() else make_data(path, model, self.args.steps * self.nproc, seq)

    def run(self, run: Run, model: Path, limit_gib: float, steps: int) -> Run:
        self.count += 1
        prefix = self.tmp / f"peak-{self.count}"
        data = self.data(model, run.seq)
        if run.side == "hf":
            settings = {"side": "hf", "model": str(model), "data": str(data), "format": "text",
                        "out": str(self.tmp / "out-hf"), "seq": run.seq, "batch": 1, "lr": 1e-3, "steps": steps,
                        "max_grad_norm": 1.0, "bf16": self.args.gpu}
            argv = [str(ROOT / "benchmarks/peers_worker.py"), json.dumps(settings)]
        else:
            params = {"model_name": str(model), "dataset_name": str(data), "output_dir": str(self.tmp / "out"),
                      "max_seq_len": run.seq, "per_device_batch_size": 1, "learning_rate": 1e-3, "max_steps": steps,
                      "seed": 0, "model": {"activation_checkpointing": run.checkpointing,
                                           "cross_entropy": "full" if run.side == "ours-full" else "auto"},
                      "data": {"format": "text", "packing": False, "shuffle": False, "eval_fraction": 0.0},
                      "optim": {"schedule": "constant", "max_grad_norm": 1.0, "weight_decay": 0.0},
                      "fsdp": {"sharding": "no_shard", "mixed_precision": "bf16" if self.args.gpu else "fp32"},
                      "checkpoint": {"save_final": False, "export_hf": False}}
            path = self.tmp / f"params-{self.count}.yaml"
            path.write_text(yaml.safe_dump(params))
            argv = ["-m", "trainer", str(path)]
        cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={self.nproc}",
               f"--master_port={_port()}", *argv]
        group = Cgroup(f"fsdp-bench-{os.getpid()}-{self.count}", int(limit_gib * GIB))
        start = time.perf_counter()
        try:
            out = subprocess.run(group.argv(cmd), cwd=self.tmp, env={**self.env, "FSDP_BENCH_PEAK": str(prefix)},
                                 capture_output=True, text=True, timeout=3600)
            run.wall = time.perf_counter() - start
            killed = group.oom_killed()
        finally:
            group.close()
        if group.path is None:
            run.note = "not held by a cgroup (no writable memory controller)"
        if out.returncode != 0:
            run.failed = (f"killed at the {limit_gib:g} GiB limit" if killed else
                          f"exit {out.returncode}: {(out.stderr or out.stdout).strip().splitlines()[-1:]}")
            return run
        peaks = [json.loads(p.read_text()) for p in sorted(self.tmp.glob(f"{prefix.name}-*.json"))]
        key = "cuda_max_allocated_bytes" if self.args.gpu else "max_rss_bytes"
        run.peak_gib = [p.get(key, 0) / GIB for p in peaks]
        if run.side == "hf":
            line = next(ln for ln in out.stdout.splitlines() if ln.startswith("PEERS_RESULT "))
            got = json.loads(line.removeprefix("PEERS_RESULT "))
            run.tokens, run.seconds, run.loss = got["real_tokens"], got["seconds"], (got["losses"] or [None])[-1]
        else:
            m = re.search(r"train_summary steps=(\d+) real_tokens=(\d+) seconds=([\d.]+)", out.stdout)
            if m is None:
                run.failed = f"no train_summary line: {out.stdout[-500:]}"
                return run
            run.tokens, run.seconds = int(m.group(2)), float(m.group(3))
            said = [ln for ln in out.stdout.splitlines() if ln.startswith("cross-entropy:")]
            run.note = "; ".join(s.split(" (")[0] for s in said) + (f"; {run.note}" if run.note else "")
        return run

    def fits(self, run: Run) -> str | None:
        """Why a full-logits side is not run at this shape (``None``: it is)."""
        if run.side == "ours" or self.args.gpu:
            return None
        logits = run.seq * run.vocab * 4 / GIB
        need = self.nproc * (BASE_GIB + COPIES[run.side] * logits)
        if need > self.args.budget_gib:
            return (f"not run: a rank's full logits are {logits:.2f} GiB, ~{COPIES[run.side]:g} copies of them on "
                    f"{self.nproc} ranks pass the {self.args.budget_gib:g} GiB budget")
        return None


def table(runs: list[Run]) -> None:
    print(f"\n  {'side':<10} {'vocab':>7} {'seq':>6} {'ckpt':<9} {'peak GiB/rank':>14} {'tok/s':>8} {'loop s':>7}"
          f" {'wall s':>7}  note")
    for r in runs:
        if r.skipped or r.failed:
            print(f"  {r.side:<10} {r.vocab:>7} {r.seq:>6} {r.checkpointing:<9} {r.skipped or r.failed}")
            continue
        peaks = "/".join(f"{p:.2f}" for p in r.peak_gib or [])
        print(f"  {r.side:<10} {r.vocab:>7} {r.seq:>6} {r.checkpointing:<9} {peaks:>14} {r.tokens_per_s:>8.0f}"
              f" {r.seconds:>7.1f} {r.wall:>7.1f}  {r.note}")


def ratios(runs: list[Run]) -> list[dict]:
    """Ours against each other side at every shape both ran (checkpointing off)."""
    out = []
    done = {(r.side, r.vocab, r.seq): r for r in runs if r.checkpointing == "off" and r.peak_gib}
    for (side, vocab, seq), ours in done.items():
        if side != "ours":
            continue
        for other in ("hf", "ours-full"):
            peer = done.get((other, vocab, seq))
            if peer is None or not peer.tokens_per_s:
                continue
            out.append({"vocab": vocab, "seq": seq, "against": other, "memory": ours.peak / peer.peak,
                        "speed": ours.tokens_per_s / peer.tokens_per_s})
    for r in out:
        memory, speed = f"{r['memory']:.2f}x", f"{r['speed']:.2f}x"
        if r["against"] == "hf":
            memory += f" (goal <= {GOALS['memory']}x: {'met' if r['memory'] <= GOALS['memory'] else 'MISSED'})"
            speed += f" (goal >= {GOALS['speed']}x: {'met' if r['speed'] >= GOALS['speed'] else 'MISSED'})"
        print(f"  ours / {r['against']:<9} vocab {r['vocab']:>7} seq {r['seq']:>5}: peak memory a rank {memory}, "
              f"tokens/s {speed}")
    return out


def checkpointing(runs: list[Run]) -> None:
    by = {(r.vocab, r.seq, r.checkpointing): r for r in runs if r.side == "ours" and r.peak_gib}
    for (vocab, seq, mode), r in sorted(by.items()):
        off = by.get((vocab, seq, "off"))
        if mode == "off" or off is None:
            continue
        print(f"  activation checkpointing {mode:<9} vocab {vocab:>7} seq {seq:>5}: peak {r.peak:.2f} GiB "
              f"({r.peak / off.peak:.2f}x off), tokens/s {r.tokens_per_s:.0f} ({r.tokens_per_s / off.tokens_per_s:.2f}x off)")


def longest(bench: Bench, model: Path, vocab: int, lengths: list[int]) -> dict:
    """For ``ours`` and ``ours-full``: the longest row of ``lengths`` (in order, stopping at the first that does
    not complete) whose one step completes inside a ``--limit-gib`` cgroup."""
    found = {}
    for side in ("ours", "ours-full"):
        best = None
        for seq in lengths:
            run = bench.run(Run(side, vocab, seq), model, bench.args.limit_gib, steps=1)
            state = run.failed or f"ok, peak {run.peak:.2f} GiB a rank, {run.wall:.0f} s"
            print(f"  longest row, {side:<9} vocab {vocab} seq {seq:>6}: {state}", flush=True)
            if run.failed:
                break
            best = seq
        found[side] = best
    if found.get("ours") and found.get("ours-full"):
        ratio = found["ours"] / found["ours-full"]
        ceiling = " (the longest tried: it may hold longer)" if found["ours"] == lengths[-1] else ""
        print(f"  longest row in {bench.args.limit_gib:g} GiB: ours {found['ours']}{ceiling}, full logits "
              f"{found['ours-full']}: {ratio:.0f}x (goal >= {GOALS['longest']:g}x: "
              f"{'met' if ratio >= GOALS['longest'] else 'MISSED'})")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocabs", default="128256,256000")
    parser.add_argument("--seqs", default="512,1024,2048,4096,8192")
    parser.add_argument("--sides", default="ours,ours-full,hf")
    parser.add_argument("--checkpointing", default="off,full,selective",
                        help="model.activation_checkpointing modes of ours (at the first vocabulary)")
    parser.add_argument("--ckpt-seqs", default="2048,4096,8192", help="lengths the checkpointing modes run at")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--budget-gib", type=float, default=6.0, help="the most one run's ranks may hold together")
    parser.add_argument("--limit-gib", type=float, default=5.0, help="the memory limit of the longest-row search")
    parser.add_argument("--longest", default="512:32768", help="FIRST:LAST lengths of the longest-row search "
                                                              "(doubling); empty: no search")
    parser.add_argument("--shape", default="64x4", help="the model's WIDTHxLAYERS (4 heads)")
    parser.add_argument("--gpu", action="store_true")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--keep", type=Path)
    args = parser.parse_args()
    SHAPE["hidden"], SHAPE["layers"] = (int(x) for x in args.shape.split("x"))
    tmp = args.keep or Path(tempfile.mkdtemp(prefix="bench-memory-"))
    tmp.mkdir(parents=True, exist_ok=True)
    bench = Bench(args, tmp)
    vocabs = [int(v) for v in args.vocabs.split(",") if v]
    seqs = [int(s) for s in args.seqs.split(",") if s]
    sides = [s for s in args.sides.split(",") if s]
    modes = [m for m in args.checkpointing.split(",") if m and m != "off"]
    print(f"load average at the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} CPUs); "
          f"{bench.nproc} ranks on {'GPU (NCCL, bf16)' if args.gpu else 'CPU (gloo, fp32)'}; model: Llama, hidden "
          f"{SHAPE['hidden']}, {SHAPE['layers']} layers; {args.steps} steps of 1 text row a rank", flush=True)
    runs: list[Run] = []
    for vocab in vocabs:
        model = make_model(tmp / f"llama-{args.shape}-{vocab}", vocab)
        for seq in seqs:
            plan = [Run(side, vocab, seq) for side in sides]
            if vocab == vocabs[0] and str(seq) in args.ckpt_seqs.split(",") and "ours" in sides:
                plan += [Run("ours", vocab, seq, mode) for mode in modes]
            for run in plan:
                run.skipped = bench.fits(run)
                if run.skipped is None:
                    bench.run(run, model, args.budget_gib, args.steps)
                runs.append(run)
                state = run.skipped or run.failed or (f"peak {run.peak:.2f} GiB a rank, {run.tokens_per_s:.0f} tok/s, "
                                                      f"wall {run.wall:.0f} s")
                print(f"[{vocab} {seq} {run.side} {run.checkpointing}] {state} (load {os.getloadavg()[0]:.1f})",
                      flush=True)
    table(runs)
    print()
    got = ratios(runs)
    checkpointing(runs)
    found = {}
    if args.longest:
        first, last = (int(x) for x in args.longest.split(":"))
        lengths = [first * 2**i for i in range(20) if first * 2**i <= last]
        found = longest(bench, make_model(tmp / f"llama-{args.shape}-{vocabs[0]}", vocabs[0]), vocabs[0], lengths)
    memory = [r["memory"] for r in got if r["against"] == "hf"]
    if memory:
        print(f"\nmedian peak memory ours / Trainer: {statistics.median(memory):.2f}x over {len(memory)} shapes")
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.json:
        args.json.write_text(json.dumps({"runs": [asdict(r) for r in runs], "ratios": got, "longest": found}, indent=1))


if __name__ == "__main__":
    main()
