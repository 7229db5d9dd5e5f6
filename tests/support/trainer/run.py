"""For the trainer's tests: run the real trainer under real torchrun (gloo, CPU processes), its parameters,
its environment, and rows tokenized by its own code."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import yaml

from tests.support.processes import send
from trainer.model.source import ModelSource

ROOT = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent
"""The trainer tests' helpers: the workers torchrun starts, the torch 2.11 stager's simulation."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def source_of(cfg) -> ModelSource:
    """The model and tokenizer a test's parameters (a :class:`trainer.wire.config.TrainerConfig`) name, by the
    trainer's one resolver, as a job resolves them at its start."""
    return ModelSource.resolve(cfg.model_name, cfg.model.tokenizer)


def trainer_env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])), OMP_NUM_THREADS="1", FSDP_TUI_ASSETS=str(ASSETS),
               FSDP_TUI_METRICS_FILE=str(tmp / "metrics.jsonl"), PYTHONUNBUFFERED="1")
    return env


ASSETS = Path(os.environ.get("FSDP_TUI_TEST_ASSETS", "/tmp/fsdp-tui-test-assets"))


def torchrun_argv(nproc: int, *args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}",
            f"--master_port={free_port()}", *args]


def run_trainer(tmp: Path, params: dict, nproc: int = 2, timeout: int = 300,
                env: dict | None = None) -> subprocess.CompletedProcess:
    tmp.mkdir(parents=True, exist_ok=True)
    path = tmp / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    out = subprocess.run(torchrun_argv(nproc, "-m", "trainer", str(path)), cwd=tmp, env={**trainer_env(tmp), **(env or {})},
                         capture_output=True, text=True, timeout=timeout)
    (tmp / "stdout.txt").write_text(out.stdout + out.stderr)
    return out


def run_trainers(runs: list[tuple[Path, dict, dict | None]], nproc: int = 2,
                 timeout: int = 600) -> list[subprocess.CompletedProcess]:
    """Independent trainer runs of ``nproc`` ranks, each ``(folder, params, extra env)`` as
    :func:`run_trainer` takes them, in one torchrun (``runs_worker.py``: one start of each rank for all of
    them); one result per run, its output the run's own and its exit code the highest of its ranks'. A run
    that no marker ends (the processes died in it) gets torchrun's code and everything from its start."""
    import json
    import re

    spec = []
    for tmp, params, env in runs:
        tmp.mkdir(parents=True, exist_ok=True)
        (tmp / "params.yaml").write_text(yaml.safe_dump(params))
        mine = {k: v for k, v in trainer_env(tmp).items() if os.environ.get(k) != v}
        spec.append({"params": str(tmp / "params.yaml"), "cwd": str(tmp), "env": {**mine, **(env or {})}})
    first = runs[0][0]
    (first.parent / f"{first.name}.runs.json").write_text(json.dumps(spec))
    out = subprocess.run(torchrun_argv(nproc, str(HERE / "runs_worker.py"), str(first.parent / f"{first.name}.runs.json")),
                         cwd=first, env=trainer_env(first), capture_output=True, text=True, timeout=timeout)
    mark = re.compile(r"^==== run (\d+) ended (-?\d+)\n", re.M)
    pieces = {name: mark.split(getattr(out, name)) for name in ("stdout", "stderr")}
    results = []
    for index, (tmp, _, _) in enumerate(runs):
        texts, code = {}, out.returncode or 1
        for name, parts in pieces.items():
            # [before the first mark, index, code, after it, index, code, ...]
            at = 1 + 3 * index
            texts[name] = parts[at - 1] if at - 1 < len(parts) else ""
            if at + 1 < len(parts) and int(parts[at]) == index:
                code = int(parts[at + 1])
        results.append(subprocess.CompletedProcess(out.args, code, texts["stdout"], texts["stderr"]))
        (tmp / "stdout.txt").write_text(texts["stdout"] + texts["stderr"])
    return results


def tiny_params(output_dir: Path, **over) -> dict:
    params = {
        "model_name": "builtin:tiny-llama", "dataset_name": "builtin:tiny-alpaca",
        "output_dir": str(output_dir), "max_seq_len": 128, "per_device_batch_size": 8,
        "learning_rate": 0.003, "max_steps": 40, "model": {"from_scratch": True},
        "optim": {"warmup_steps": 5}, "logging": {"eval_every_steps": 20, "eval_max_batches": 4},
        "checkpoint": {"every_steps": 20, "keep_last": 2},
    }
    for key, value in over.items():
        if isinstance(value, dict):
            params.setdefault(key, {}).update(value)
        else:
            params[key] = value
    return params


def alpaca_examples(model_dir: Path, count: int, max_len: int, mask_prompt: bool) -> tuple[list[dict], int]:
    """The first ``count`` shipped alpaca rows tokenized by the trainer's own code, and the pad id."""
    import json

    from transformers import AutoTokenizer

    from trainer.data.rows import Tokenize

    tok = AutoTokenizer.from_pretrained(model_dir)
    with open(ROOT / "trainer/data/tiny_alpaca.jsonl") as f:
        rows = [json.loads(line) for line in f.readlines()[:count]]
    t = Tokenize(tok, "alpaca", max_len, mask_prompt=mask_prompt)
    return [t(r) for r in rows], tok.pad_token_id


def kill_tagged(tag: str) -> list[int]:
    """Every process whose environment names the run ``tag`` (``FSDP_TUI_RUN_ID``), killed: a rank
    killed mid-run as a crash would; the pids it found."""
    needle = f"FSDP_TUI_RUN_ID={tag}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if needle in (entry / "environ").read_bytes().split(b"\0"):
                    pids.append(int(entry.name))
            except OSError:
                continue
    send(pids)
    return pids
