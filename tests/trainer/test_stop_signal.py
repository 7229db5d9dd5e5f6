"""SIGUSR1 near a job's time limit: the trainer saves a complete checkpoint at the next step boundary,
exits 0, and the next job resumes from it (real torchrun, gloo, 2 CPU processes)."""

import json
import os
import re
import signal
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.trainer.conftest import run_trainer, tiny_params, torchrun_argv, trainer_env
from trainer import ckpt_layout
from trainer.protocol import CHECKPOINT_SIGNAL_ENV


def _workers(parent: int) -> list[int]:
    """torchrun's children that are trainer ranks (RANK in their environment): what the backend signals."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            environ = (entry / "environ").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        if ppid == parent and any(v.startswith(b"RANK=") for v in environ):
            found.append(int(entry.name))
    return found


@pytest.mark.slow
def test_sigusr1_checkpoints_stops_cleanly_and_the_next_job_resumes(tmp_path, tiny_model_dir):
    out_dir = tmp_path / "out"
    params = tiny_params(out_dir, max_steps=2000, checkpoint={"async_save": True, "every_steps": None},
                         logging={"eval_every_steps": None, "eval_max_batches": 1})
    first = tmp_path / "first"
    first.mkdir()
    (first / "params.yaml").write_text(yaml.safe_dump(params))
    env = {**trainer_env(first), CHECKPOINT_SIGNAL_ENV: "1"}
    proc = subprocess.Popen(torchrun_argv(2, "-m", "trainer", str(first / "params.yaml")), cwd=first, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("step=3/"):
                break
        workers = _workers(proc.pid)
        assert len(workers) == 2, lines
        for pid in workers:
            os.kill(pid, signal.SIGUSR1)
        lines += proc.stdout.readlines()
        assert proc.wait(timeout=120) == 0, "".join(lines[-40:])
    finally:
        if proc.poll() is None:
            proc.kill()
    log = "".join(lines)
    (first / "stdout.txt").write_text(log)
    found = re.search(r"^checkpoint at step (\d+) on SIGUSR1 \(the job's time is nearly up\): stopping; "
                      r"a resubmitted job resumes from it$", log, re.M)
    assert found, log[-3000:]
    step = int(found.group(1))
    assert 3 <= step < 2000
    ckpts = ckpt_layout.list_checkpoints(str(out_dir / "checkpoints"))
    assert [(c.step, c.complete) for c in ckpts] == [(step, True)]
    assert not (out_dir / "hf").exists(), "no final export when stopped by the signal"
    records = [json.loads(x) for x in (first / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["kind"] == "signal_checkpoint" and records[-1]["step"] == step
    assert max(r["step"] for r in records if r["kind"] == "train") == step

    params["max_steps"] = step + 2
    params["checkpoint"]["export_hf"] = False
    second = run_trainer(tmp_path / "second", params)
    assert second.returncode == 0, second.stderr[-3000:]
    assert f"resumed from {ckpts[0].path} at step {step}" in second.stdout
    steps = [json.loads(x)["step"] for x in (tmp_path / "second" / "metrics.jsonl").read_text().splitlines()
             if json.loads(x)["kind"] == "train"]
    assert steps == [step + 1, step + 2]


@pytest.mark.parametrize("value", [None, "1"])
def test_the_handler_is_installed_only_when_the_job_asks(tmp_path, monkeypatch, value):
    import faulthandler

    import trainer.__main__ as entry

    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(tiny_params(tmp_path / "out")))
    if value is None:
        monkeypatch.delenv(CHECKPOINT_SIGNAL_ENV, raising=False)
    else:
        monkeypatch.setenv(CHECKPOINT_SIGNAL_ENV, value)
    seen = {}

    def fake_run(cfg, stop) -> None:
        seen.update(stop=stop, handler=signal.getsignal(signal.SIGUSR1))
        if stop is not None:
            signal.raise_signal(signal.SIGUSR1)  # kept for the next step boundary, the process lives on
            seen["received"] = stop.received

    monkeypatch.setattr(entry, "run", fake_run)
    before = signal.getsignal(signal.SIGUSR1)
    try:
        assert entry.main([str(path)]) == 0
    finally:
        signal.signal(signal.SIGUSR1, before)
        faulthandler.unregister(signal.SIGUSR2)
    if value is None:
        assert seen["stop"] is None and seen["handler"] == before, "SIGUSR1 left as it was"
    else:
        assert seen["handler"] == seen["stop"]._handle and seen["received"]
