"""The trainer's data end to end under torchrun (gloo, CPU processes): a streamed mixture killed and
resumed trains what an unbroken run trains (same world size: the same losses; another: the same rows,
the resume check's verdict), its shares and bounded evaluation said; a cached mixture's second start
reads the node's cache and every rank maps one copy.

The module's independent two-rank runs (the streamed mixture's unbroken reference, the cached mixture's
first start) run one after the other in one torchrun (``two_rank_runs``): each is the trainer's own entry
in a folder of its own, with the output and exit code of its own, at the cost of one start of the ranks.
The streamed run does not touch the token cache, so the cached mixture's first start still tokenizes.
The runs that follow (killed, resumed, on one rank, the cached mixture's second start) run as before."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.trainer.run import (
    kill_tagged,
    run_trainer,
    run_trainers,
    tiny_params,
    torchrun_argv,
    trainer_env,
)

pytestmark = pytest.mark.slow

WORDS = ("one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")


def _records(tmp: Path) -> list[dict]:
    return [json.loads(line) for line in (tmp / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> Path:
    import random

    root = tmp_path_factory.mktemp("sources")
    rng = random.Random(0)
    with open(root / "alpaca.jsonl", "w") as f:
        for _ in range(3000):
            f.write(json.dumps({"instruction": "Say the words.", "input": "",
                                "output": " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 24)))}) + "\n")
    with open(root / "numbers.jsonl", "w") as f:
        for _ in range(1500):
            f.write(json.dumps({"text": " ".join(str(rng.randint(0, 99)) for _ in range(rng.randint(2, 20)))}) + "\n")
    return root


def _params(out: Path, sources: Path, **data) -> dict:
    params = tiny_params(out, max_steps=10, per_device_batch_size=4, max_seq_len=64,
                         datasets=[{"path": str(sources / "alpaca.jsonl"), "weight": 3},
                                   {"path": str(sources / "numbers.jsonl"), "weight": 1, "name": "numbers"}],
                         data={"eval_max_rows": 40, **data},
                         logging={"eval_every_steps": 4, "eval_max_batches": 3, "eval_max_s": 1e-6},
                         checkpoint={"every_steps": 4, "keep_last": 5, "export_hf": False})
    del params["dataset_name"]
    return params


def _streamed_params(out: Path, sources: Path) -> dict:
    return _params(out, sources, streaming=True)


def _cached_params(out: Path, sources: Path) -> dict:
    params = _params(out, sources)
    params.update(max_steps=3, checkpoint={"every_steps": None, "save_final": False, "export_hf": False})
    return params


@pytest.fixture(scope="module")
def two_rank_runs(tmp_path_factory, sources, tiny_model_dir) -> dict[str, tuple[Path, subprocess.CompletedProcess]]:
    """Each independent two-rank run of the module, by name: its folder and its result."""
    tmp = tmp_path_factory.mktemp("runs")
    runs = {
        "stream_ref": (tmp / "ref", _streamed_params(tmp / "ref" / "out", sources)),
        "cached_first": (tmp / "a", _cached_params(tmp / "a" / "out", sources)),
    }
    outs = run_trainers([(folder, params, None) for folder, params in runs.values()])
    return {name: (folder, out) for (name, (folder, _)), out in zip(runs.items(), outs, strict=True)}


def _losses(tmp: Path, after: int = 0) -> dict[int, float]:
    train = [r for r in _records(tmp) if r["kind"] == "train"]
    start = max((i for i, r in enumerate(train) if r["step"] == after + 1), default=0)
    return {r["step"]: r["loss"] for r in train[start:]}


def _wait_gone(pids: list[int], within: float = 30.0) -> None:
    """Until every killed process has ended (or is a zombie), polled."""
    deadline = time.monotonic() + within
    for pid in pids:
        while time.monotonic() < deadline:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    if f.read().rsplit(") ", 1)[1][0] == "Z":
                        break
            except OSError:
                break
            time.sleep(0.05)


def test_a_streamed_mixture_killed_and_resumed_trains_what_an_unbroken_run_trains(tmp_path, sources, two_rank_runs):
    ref_dir, ref = two_rank_runs["stream_ref"]
    params = _streamed_params(ref_dir / "out", sources)
    assert ref.returncode == 0, ref.stdout[-3000:] + ref.stderr[-3000:]
    ref_losses = _losses(ref_dir)
    assert sorted(ref_losses) == list(range(1, 11))
    # what the start says: streamed sources, their held-out rows, bounded evaluation
    assert "data: alpaca.jsonl: streamed (data.streaming): read and tokenized as it is trained on, its first 30 rows " \
           "held out" in ref.stdout
    assert "evaluation: 40 held-out rows (at most data.eval_max_rows: 40), each evaluation at most 1e-06 s" in ref.stdout
    assert "evaluation stopped after 1 batches: logging.eval_max_s is 1e-06 s" in ref.stdout
    data = next(r for r in _records(ref_dir) if r["kind"] == "data")
    assert data["streamed"] and [s["name"] for s in data["sources"]] == ["alpaca.jsonl", "numbers"]
    last = [r for r in _records(ref_dir) if r["kind"] == "train"][-1]
    assert sum(last["mix_rows"]) == 10 * 8 and abs(last["mix_rows"][0] / 80 - 0.75) < 0.1
    assert "mix: alpaca.jsonl" in ref.stdout

    # killed for real after its step-4 checkpoint, then started again on the same two ranks
    tmp = tmp_path / "killed"
    tmp.mkdir()
    params["output_dir"] = str(tmp / "out")
    (tmp / "params.yaml").write_text(json.dumps(params))
    tag = f"stream-resume-{os.getpid()}"
    proc = subprocess.Popen(torchrun_argv(2, "-m", "trainer", str(tmp / "params.yaml")), cwd=tmp,
                            env={**trainer_env(tmp), "FSDP_TUI_RUN_ID": tag}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("step=6/"):
            break
    killed = kill_tagged(tag)
    assert len(killed) >= 3
    proc.wait(timeout=30)
    _wait_gone(killed)
    resumed = run_trainer(tmp, params, env={"FSDP_TUI_RUN_ID": tag})
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "at step 4" in resumed.stdout
    for step, loss in _losses(tmp, after=4).items():
        assert loss == pytest.approx(ref_losses[step], rel=1e-6, abs=1e-7), step
    check = next(r for r in _records(tmp) if r["kind"] == "resume_check")
    assert check["verdict"] == "verified", check
    assert {"next batch", "data position", "rows from each source", "data"} <= set(check["checked"])

    # another world size, the same rows a step: one rank of 8 from the unbroken run's step-4 checkpoint
    one = tmp_path / "one"
    (one / "out" / "checkpoints").mkdir(parents=True)
    shutil.copytree(ref_dir / "out" / "checkpoints" / "step-00000004",
                    one / "out" / "checkpoints" / "step-00000004")
    params.update(output_dir=str(one / "out"), per_device_batch_size=8)
    single = run_trainer(one, params, nproc=1)
    assert single.returncode == 0, single.stdout[-3000:] + single.stderr[-3000:]
    check = next(r for r in _records(one) if r["kind"] == "resume_check")
    assert check["verdict"] == "resharded" and (check["world_before"], check["world_after"]) == (2, 1), check
    assert {"next batch", "data position", "rows from each source"} <= set(check["checked"])
    for step, loss in _losses(one, after=4).items():
        assert loss == pytest.approx(ref_losses[step], rel=1e-4), step


def test_a_cached_mixture_is_tokenized_once_and_read_from_the_cache_after(tmp_path, sources, two_rank_runs):
    first_dir, first = two_rank_runs["cached_first"]
    params = _cached_params(first_dir / "out", sources)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert first.stdout.count("examples tokenized in") == 2  # each source once, by one rank
    params["output_dir"] = str(tmp_path / "b" / "out")
    second = run_trainer(tmp_path / "b", params)
    assert second.returncode == 0, second.stderr[-3000:]
    assert second.stdout.count("examples read from the cache") == 2 and "tokenized in" not in second.stdout.split(
        "read from the cache")[0]
    assert _losses(first_dir) == pytest.approx(_losses(tmp_path / "b"), rel=1e-6)
    data = next(r for r in _records(tmp_path / "b") if r["kind"] == "data")
    assert [s["share"] for s in data["sources"]] == [0.75, 0.25] and not data["streamed"]
