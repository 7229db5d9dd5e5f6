"""Data at fine-tuning size, side by side in one run: the time before the first step and each rank's peak
memory, on generated alpaca rows (200,000 and 1,000,000 by default), 2 CPU ranks, ``builtin:tiny-llama``:

- ours, first start (an empty cache: the node tokenizes into it) and cached start (a second run);
- ``datasets``: ``load_dataset("json")`` + ``map(batched=True, num_proc=2)`` with the same fast tokenizer
  (what the issue's goal is measured against), first and cached;
- TRL's ``SFTTrainer``: its own preparation of the same rows (prompt/completion, ``dataset_num_proc=2``),
  the constructor timed (``trl`` is the ``peers`` extra);
- the trainer before the cache (``--old-commit``, its ``trainer/`` taken with ``git archive``) at
  ``--old-rows`` (it keeps every example as tensors on every rank: ~7.5 GB a rank at 200,000 rows, so
  smaller here);
- tokens/s of a streamed two-source mixture against the same mixture from the cache.

    flock /tmp/fsdp-bench.lock .venv/bin/python benchmarks/bench_data.py [--rows [200000 1000000]]
        [--old-rows 50000] [--old-commit 0071383] [--mix-steps 40] [--work DIR] [--skip trl,old,mix]

Peak memory: each rank's ``VmHWM`` (peak resident) and, summed over the node's ranks, their proportional
set size (``Pss``: a page two ranks map counts half for each), polled every 0.2 s; of it, the token
cache's mapped files: resident in each rank, and their ``Pss`` summed over the node (one copy a node
however many ranks map it).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
LETTERS = "abcdefghijklmnopqrstuvwxyz"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def alpaca_rows(path: Path, count: int, seed: int = 0) -> Path:
    """``count`` alpaca rows of made-up words, ~390 bytes each (200,000 rows: ~79 MB, the issue's size)."""
    if path.exists():
        return path
    rng = random.Random(seed)

    def words(lo: int, hi: int) -> str:
        return " ".join("".join(rng.choice(LETTERS) for _ in range(rng.randint(2, 9)))
                        for _ in range(rng.randint(lo, hi)))

    tmp = path.with_suffix(".part")
    with open(tmp, "w") as f:
        for i in range(count):
            f.write(json.dumps({"instruction": "Rewrite the words. " + words(3, 12),
                                "input": words(0, 25) if i % 3 else "", "output": words(10, 60)}) + "\n")
    tmp.rename(path)
    return path


def text_rows(path: Path, count: int, seed: int = 1) -> Path:
    if path.exists():
        return path
    rng = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(count):
            f.write(json.dumps({"text": " ".join(str(rng.randint(0, 999)) for _ in range(rng.randint(20, 120)))}) + "\n")
    return path


class Peaks:
    """Each process tagged with ``tag`` in its environment: its peak resident memory, and the node's summed
    proportional set size at its highest, polled until stopped."""

    def __init__(self, tag: str, mapped: Path | None = None) -> None:
        self.needle = f"FSDP_TUI_RUN_ID={tag}".encode()
        self.mapped = f" {mapped}/" if mapped is not None else None
        self.hwm: dict[int, int] = {}
        self.pss_sum = 0
        self.cache_rss: dict[int, int] = {}
        self.cache_pss_sum = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()

    def _poll(self) -> None:
        while not self.stop.wait(0.2):
            total = cache_total = 0
            for entry in Path("/proc").iterdir():
                if not entry.name.isdigit():
                    continue
                try:
                    if self.needle not in (entry / "environ").read_bytes().split(b"\0"):
                        continue
                    cmd = (entry / "cmdline").read_bytes()
                    if b"torch.distributed.run" in cmd:
                        continue  # the launcher, not a rank
                    status = (entry / "status").read_text()
                    hwm = int(re.search(r"VmHWM:\s+(\d+)", status).group(1)) * 1024
                    self.hwm[int(entry.name)] = max(self.hwm.get(int(entry.name), 0), hwm)
                    pss = re.search(r"Pss:\s+(\d+)", (entry / "smaps_rollup").read_text())
                    total += int(pss.group(1)) * 1024 if pss else 0
                    if self.mapped is not None:
                        rss, shared = self._cache_pages(entry / "smaps")
                        self.cache_rss[int(entry.name)] = max(self.cache_rss.get(int(entry.name), 0), rss)
                        cache_total += shared
                except (OSError, AttributeError):
                    continue
            self.pss_sum = max(self.pss_sum, total)
            self.cache_pss_sum = max(self.cache_pss_sum, cache_total)

    def _cache_pages(self, smaps: Path) -> tuple[int, int]:
        """Resident and proportional bytes of the token cache's files this process maps."""
        rss = pss = 0
        inside = False
        assert self.mapped is not None
        for line in smaps.read_text().splitlines():
            if re.match(r"[0-9a-f]+-[0-9a-f]+ ", line):
                inside = self.mapped in line
            elif inside and line.startswith("Rss:"):
                rss += int(line.split()[1]) * 1024
            elif inside and line.startswith("Pss:"):
                pss += int(line.split()[1]) * 1024
        return rss, pss

    def done(self) -> dict:
        self.stop.set()
        self.thread.join()
        ranks = sorted(self.hwm.values(), reverse=True)
        out = {"rank_peak_gb": [round(v / 1e9, 2) for v in ranks], "node_pss_peak_gb": round(self.pss_sum / 1e9, 2)}
        if self.mapped is not None:
            out["cache_mapped_rank_gb"] = [round(v / 1e9, 2) for v in sorted(self.cache_rss.values(), reverse=True) if v]
            out["cache_mapped_node_pss_gb"] = round(self.cache_pss_sum / 1e9, 2)
        return out


def trainer_run(work: Path, name: str, params: dict, env: dict, pythonpath: Path = ROOT, nproc: int = 2) -> dict:
    """One trainer run under torchrun: seconds to its first step line, its own start-up figures, its
    throughput summary and each rank's peak memory."""
    folder = work / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    (folder / "params.yaml").write_text(yaml.safe_dump({**params, "output_dir": str(folder / "out")}))
    tag = f"bench-data-{name}-{os.getpid()}"
    run_env = {**env, "PYTHONPATH": str(pythonpath), "FSDP_TUI_RUN_ID": tag, "OMP_NUM_THREADS": "1",
               "FSDP_TUI_METRICS_FILE": str(folder / "metrics.jsonl"), "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}", f"--master_port={_port()}",
           "-m", "trainer", str(folder / "params.yaml")]
    cache = params.get("data", {}).get("cache_dir")
    peaks = Peaks(tag, Path(cache) if cache else None)
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=folder, env=run_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    first_step, lines = None, []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line)
        if first_step is None and line.startswith("step=1/"):
            first_step = time.perf_counter() - start
    proc.wait()
    wall = time.perf_counter() - start
    memory = peaks.done()
    text = "".join(lines)
    (folder / "stdout.txt").write_text(text)
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed:\n{text[-4000:]}")
    data_s = re.search(r"start-up: data ([\d.]+) s", text)
    summary = re.search(r"tokens_per_s=(\d+)", text)
    said = [ln.strip() for ln in lines if ln.startswith("data: ") and ("tokeniz" in ln or "cache" in ln)]
    return {"first_step_s": round(first_step or wall, 1), "data_s": float(data_s.group(1)) if data_s else None,
            "wall_s": round(wall, 1), "tokens_per_s": int(summary.group(1)) if summary else None, "said": said,
            **memory}


DATASETS_MAP = r"""
import json, resource, sys, time
start = time.perf_counter()
import datasets
from transformers import AutoTokenizer
datasets.disable_progress_bars()
path, model, cache, proc = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
tok = AutoTokenizer.from_pretrained(model)
imported = time.perf_counter()
ds = datasets.load_dataset("json", data_files=path, split="train", cache_dir=cache)
loaded = time.perf_counter() - imported
eos = tok.eos_token
def encode(batch):
    prompts = [f"### Instruction:\n{i}\n\n" + (f"### Input:\n{x}\n\n" if x else "") + "### Response:\n"
               for i, x in zip(batch["instruction"], batch["input"])]
    p = tok(prompts, add_special_tokens=False)["input_ids"]
    a = tok([o + eos for o in batch["output"]], add_special_tokens=False)["input_ids"]
    ids = [[tok.bos_token_id] + x + y for x, y in zip(p, a)]
    labels = [[-100] * (len(x) + 1) + y for x, y in zip(p, a)]
    return {"input_ids": ids, "labels": labels}
out = ds.map(encode, batched=True, batch_size=1000, num_proc=proc if proc > 1 else None, remove_columns=ds.column_names)
total = time.perf_counter() - imported
print("RESULT " + json.dumps({"imports_s": round(imported - start, 1), "load_s": round(loaded, 1),
                              "load_and_map_s": round(total, 1), "rows": len(out),
                              "peak_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6, 2),
                              "children_peak_gb": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1e6, 2)}))
"""

TRL_PREP = r"""
import json, os, resource, sys, time
os.environ.setdefault("TQDM_DISABLE", "1")
start = time.perf_counter()
import datasets
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import SFTConfig, SFTTrainer
datasets.disable_progress_bars()
path, model, cache, proc, out = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
tok = AutoTokenizer.from_pretrained(model)
net = AutoModelForCausalLM.from_pretrained(model)
imported = time.perf_counter()
ds = datasets.load_dataset("json", data_files=path, split="train", cache_dir=cache)
def pc(batch):
    return {"prompt": [f"### Instruction:\n{i}\n\n" + (f"### Input:\n{x}\n\n" if x else "") + "### Response:\n"
                       for i, x in zip(batch["instruction"], batch["input"])], "completion": batch["output"]}
ds = ds.map(pc, batched=True, remove_columns=ds.column_names)
args = SFTConfig(output_dir=out, max_length=512, dataset_num_proc=proc if proc > 1 else None, use_cpu=True,
                 report_to=[], per_device_train_batch_size=8, max_steps=3)
SFTTrainer(model=net, args=args, train_dataset=ds, processing_class=tok)
print("RESULT " + json.dumps({"imports_s": round(imported - start, 1), "prep_s": round(time.perf_counter() - imported, 1),
                              "rows": len(ds),
                              "peak_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6, 2),
                              "children_peak_gb": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1e6, 2)}))
"""


def script(code: str, *args: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=7200,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    found = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
    if out.returncode != 0 or not found:
        raise SystemExit(out.stdout[-3000:] + out.stderr[-3000:])
    return json.loads(found[-1][len("RESULT "):])


def old_trainer(work: Path, commit: str, repo: Path) -> Path:
    """The trainer as it was at ``commit`` (its ``trainer/`` from the object store; nothing checked out)."""
    target = work / f"old-{commit}"
    if not (target / "trainer").exists():
        target.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "-C", str(repo), "archive", commit, "trainer"], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(target)], input=archive.stdout, check=True)
    return target


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, nargs="*", default=[200_000, 1_000_000],
                    help="the sizes of the start-up comparison (none: only --old-rows and the mixture)")
    ap.add_argument("--old-rows", type=int, default=50_000)
    ap.add_argument("--old-commit", default="0071383")
    ap.add_argument("--repo", type=Path, default=ROOT, help="the git repository that holds --old-commit")
    ap.add_argument("--mix-rows", type=int, default=100_000)
    ap.add_argument("--mix-steps", type=int, default=40)
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "fsdp-bench-data")
    ap.add_argument("--skip", default="", help="comma list of: trl, old, mix, datasets")
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "FSDP_TUI_ASSETS": str(work / "assets")}
    from trainer.assets import resolve_model

    os.environ["FSDP_TUI_ASSETS"] = env["FSDP_TUI_ASSETS"]
    model = resolve_model("builtin:tiny-llama")
    base = {"model_name": "builtin:tiny-llama", "max_seq_len": 512, "per_device_batch_size": 8, "max_steps": 3,
            "model": {"from_scratch": True}, "logging": {"eval_max_batches": 1},
            "checkpoint": {"save_final": False, "export_hf": False}, "data": {"format": "alpaca"}}
    results: dict = {"machine": f"{os.cpu_count()} cores", "runs": {}}

    def say(name: str, value: dict) -> None:
        results["runs"][name] = value
        print(f"{name:34s} {json.dumps(value)}", flush=True)

    for rows in args.rows:
        data = alpaca_rows(work / f"alpaca-{rows}.jsonl", rows)
        cache = work / f"cache-{rows}"
        shutil.rmtree(cache, ignore_errors=True)
        params = {**base, "dataset_name": str(data), "data": {**base["data"], "cache_dir": str(cache)}}
        first = trainer_run(work, f"ours-first-{rows}", params, env)
        say(f"ours first start, {rows:,} rows", first)
        cached = trainer_run(work, f"ours-cached-{rows}", params, env)
        say(f"ours cached start, {rows:,} rows", cached)
        one = trainer_run(work, f"ours-cached-1rank-{rows}", params, env, nproc=1)
        say(f"ours cached, 1 rank, {rows:,} rows", one)
        if "datasets" not in skip:
            hf_cache = work / f"hf-{rows}"
            shutil.rmtree(hf_cache, ignore_errors=True)
            say(f"datasets map first, {rows:,} rows", script(DATASETS_MAP, str(data), model, str(hf_cache), "2"))
            say(f"datasets map cached, {rows:,} rows", script(DATASETS_MAP, str(data), model, str(hf_cache), "2"))
        if "trl" not in skip:
            trl_cache = work / f"trl-{rows}"
            shutil.rmtree(trl_cache, ignore_errors=True)
            say(f"TRL SFTTrainer prep first, {rows:,} rows",
                script(TRL_PREP, str(data), model, str(trl_cache), "2", str(work / "trl-out")))
            say(f"TRL SFTTrainer prep cached, {rows:,} rows",
                script(TRL_PREP, str(data), model, str(trl_cache), "2", str(work / "trl-out")))
    if "old" not in skip:
        data = alpaca_rows(work / f"alpaca-{args.old_rows}.jsonl", args.old_rows)
        old = old_trainer(work, args.old_commit, args.repo)
        params = {**base, "dataset_name": str(data), "data": {"format": "alpaca"}}
        say(f"trainer at {args.old_commit}, {args.old_rows:,} rows", trainer_run(work, "old", params, env, old))
        cache = work / f"cache-old-{args.old_rows}"
        shutil.rmtree(cache, ignore_errors=True)
        params["data"] = {"format": "alpaca", "cache_dir": str(cache)}
        say(f"ours first start, {args.old_rows:,} rows", trainer_run(work, "ours-old-size", params, env))
    if "mix" not in skip:
        a = alpaca_rows(work / f"alpaca-{args.mix_rows}.jsonl", args.mix_rows)
        t = text_rows(work / f"text-{args.mix_rows}.jsonl", args.mix_rows)
        cache = work / "cache-mix"
        mix = {**base, "max_steps": args.mix_steps, "datasets": [{"path": str(a), "weight": 3, "format": "alpaca"},
                                                                  {"path": str(t), "weight": 1, "format": "text"}],
               "data": {"cache_dir": str(cache)}}
        trainer_run(work, "mix-warm", {**mix, "max_steps": 1}, env)  # the cache built: what follows reads it
        say("mixture from the cache", trainer_run(work, "mix-cached", mix, env))
        say("mixture streamed (a thread)", trainer_run(work, "mix-streamed", {**mix, "data": {
            "cache_dir": str(cache), "streaming": True}}, env))
        say("mixture streamed (a worker process)", trainer_run(work, "mix-streamed-worker", {**mix, "data": {
            "cache_dir": str(cache), "streaming": True, "num_workers": 1}}, env))
    runs = results["runs"]
    print("\nratios")
    for rows in args.rows:
        for kind, ours_key, theirs_key in (("first", "data_s", "load_and_map_s"), ("cached", "data_s", "load_and_map_s")):
            ours = runs.get(f"ours {kind} start, {rows:,} rows", {}).get(ours_key)
            theirs = runs.get(f"datasets map {kind}, {rows:,} rows", {}).get(theirs_key)
            if ours and theirs:
                print(f"  {rows:>9,} rows, {kind}: ours (the trainer's data start-up) / datasets load + map = "
                      f"{ours / theirs:.2f}")
    cached = runs.get("mixture from the cache")
    for name in ("mixture streamed (a thread)", "mixture streamed (a worker process)"):
        if cached and runs.get(name) and cached.get("tokens_per_s"):
            print(f"  {name} tokens/s / from the cache = {runs[name]['tokens_per_s'] / cached['tokens_per_s']:.2f}")
    (work / "results.json").write_text(json.dumps(results, indent=1))
    print(f"\nresults: {work / 'results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
