"""SIGUSR1 near a job's time limit: the trainer saves a complete checkpoint at the next step boundary,
exits 0, and the next job resumes from it (real torchrun, gloo, 2 CPU processes)."""

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from launcher.backends.agent.processes import catches
from tests.support.trainer.run import run_trainer, tiny_params, torchrun_argv, trainer_env
from trainer.wire import ckpt_layout
from trainer.wire.protocol import CHECKPOINT_SIGNAL_ENV


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


def _catches_sigusr1(pid: int) -> bool:
    return catches(pid, signal.SIGUSR1)  # what the SLURM node task asks before it signals a worker


def _run_signalled(tmp: Path, params: dict, after_line: str | None) -> tuple[int, str]:
    """Run the trainer with the variable set; SIGUSR1 to both workers once ``after_line`` starts a line,
    or (``None``) as soon as both have installed the handler, still starting up. Its exit code and log."""
    tmp.mkdir()
    (tmp / "params.yaml").write_text(yaml.safe_dump(params))
    env = {**trainer_env(tmp), CHECKPOINT_SIGNAL_ENV: "1"}
    proc = subprocess.Popen(torchrun_argv(2, "-m", "trainer", str(tmp / "params.yaml")), cwd=tmp, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    try:
        if after_line is None:
            deadline = time.monotonic() + 60
            while not ((workers := _workers(proc.pid)) and len(workers) == 2
                       and all(_catches_sigusr1(pid) for pid in workers)):
                assert time.monotonic() < deadline and proc.poll() is None, "the workers never caught SIGUSR1"
                time.sleep(0.01)
        else:
            for line in proc.stdout:
                lines.append(line)
                if line.startswith(after_line):
                    break
            workers = _workers(proc.pid)
        assert len(workers) == 2, lines
        for pid in workers:
            os.kill(pid, signal.SIGUSR1)
        lines += proc.stdout.readlines()
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    (tmp / "stdout.txt").write_text("".join(lines))
    return code, "".join(lines)


def _stopped_at(log: str) -> int:
    found = re.search(r"^checkpoint at step (\d+) on SIGUSR1 \(the job's time is nearly up\): stopping; "
                      r"a resubmitted job resumes from it$", log, re.M)
    assert found, log[-3000:]
    return int(found.group(1))


def _records(tmp: Path, kind: str) -> list[dict]:
    records = [json.loads(x) for x in (tmp / "metrics.jsonl").read_text().splitlines()]
    return [r for r in records if r["kind"] == kind]


@pytest.mark.slow
def test_sigusr1_checkpoints_stops_cleanly_and_the_next_job_resumes(tmp_path, tiny_model_dir):
    out_dir = tmp_path / "out"
    params = tiny_params(out_dir, max_steps=2000, checkpoint={"async_save": True, "every_steps": None},
                         logging={"eval_every_steps": None, "eval_max_batches": 1})
    code, log = _run_signalled(tmp_path / "first", params, "step=3/")
    assert code == 0, log[-3000:]
    step = _stopped_at(log)
    assert 3 <= step < 2000
    ckpts = ckpt_layout.list_checkpoints(str(out_dir / "checkpoints"))
    assert [(c.step, c.complete) for c in ckpts] == [(step, True)]
    assert not (out_dir / "hf").exists(), "no final export when stopped by the signal"
    assert [r["step"] for r in _records(tmp_path / "first", "signal_checkpoint")] == [step]
    assert max(r["step"] for r in _records(tmp_path / "first", "train")) == step

    # Signalled while still starting up (resuming): honoured at the first step boundary, the step it
    # resumed from, whose checkpoint is not saved again.
    code, log = _run_signalled(tmp_path / "early", params, None)
    assert code == 0, log[-3000:]
    assert f"resumed from {ckpts[0].path} at step {step}" in log
    assert _stopped_at(log) == step
    assert ckpt_layout.list_checkpoints(str(out_dir / "checkpoints")) == ckpts
    assert _records(tmp_path / "early", "train") == []

    params["max_steps"] = step + 2
    params["checkpoint"]["export_hf"] = False
    last = run_trainer(tmp_path / "last", params)
    assert last.returncode == 0, last.stderr[-3000:]
    assert f"resumed from {ckpts[0].path} at step {step}" in last.stdout
    assert [r["step"] for r in _records(tmp_path / "last", "train")] == [step + 1, step + 2]


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
