"""The flight recorder dump the trainer writes when asked (``trainer/flight.py``), in a real process group:
gloo here (every run); NCCL on a GPU machine (gpu-marked: this machine has no CUDA). Rank-skips-a-collective
over a whole run is in tests/runs/owner/test_stall.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """import os, sys, time
import torch
import torch.distributed as dist
from trainer import flight

backend = sys.argv[1]
dist.init_process_group(backend, rank=0, world_size=1)
assert flight.start(0)
device = "cuda" if backend == "nccl" else "cpu"
for _ in range(3):
    dist.all_reduce(torch.ones(4, device=device))
if device == "cuda":
    torch.cuda.synchronize()
print("collectives done", flush=True)
deadline = time.time() + 60
while not os.path.exists(os.environ["TORCH_FR_DUMP_TEMP_FILE"] + "0.json") and time.time() < deadline:
    time.sleep(0.1)
"""


def _dump_of_one_rank(tmp_path: Path, backend: str) -> dict:
    prefix = str(tmp_path / "flight-recorder-")
    env = {**os.environ, "TORCH_FR_BUFFER_SIZE": "2000",
           "TORCH_FR_DUMP_TEMP_FILE": prefix, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()),
           "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, backend], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "collectives done"
        assert Path(prefix + "ready").exists()
        Path(prefix + "request").write_text("now")
        assert proc.wait(timeout=90) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    return json.loads(Path(prefix + "0.json").read_text())


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_gloo_collectives_are_recorded_and_dumped_on_request(tmp_path):
    entries = _dump_of_one_rank(tmp_path, "gloo")["entries"]
    assert [(e["collective_seq_id"], e["profiling_name"]) for e in entries] == [
        (1, "gloo:all_reduce"), (2, "gloo:all_reduce"), (3, "gloo:all_reduce")]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (NCCL)")
def test_nccl_collectives_are_recorded_and_dumped_on_request(tmp_path):
    entries = _dump_of_one_rank(tmp_path, "nccl")["entries"]
    assert [e["collective_seq_id"] for e in entries][-3:] == [1, 2, 3]
    assert all(e["profiling_name"].startswith("nccl:all_reduce") for e in entries[-3:])


def test_no_dump_path_no_thread(monkeypatch):
    from trainer import flight

    monkeypatch.delenv("TORCH_FR_DUMP_TEMP_FILE", raising=False)
    before = time.monotonic()
    assert flight.start(0) is False and time.monotonic() - before < 5


def test_a_dump_keeps_the_newest_entries_only():
    from trainer import flight

    full = json.dumps({"version": "2.10", "entries": [{"collective_seq_id": i} for i in range(1, 601)]}).encode()
    kept = json.loads(flight._newest(full))
    assert [e["collective_seq_id"] for e in kept["entries"]] == list(range(101, 601)) and kept["version"] == "2.10"
    small = json.dumps({"entries": [{"collective_seq_id": 1}]}).encode()
    assert flight._newest(small) == small
