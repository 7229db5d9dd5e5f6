"""The GPU burn-in's judging, on nvidia-smi and kernel-log text in the tools' own formats as the node reads it
(tests/data/nvidia_smi: written in the layout nvidia-smi prints, not recorded on this machine: it has no
GPU; the node's parsing alone: tests/trainer/nettest/test_node.py). The burn-in itself runs only where GPUs
exist (the ``gpu``-marked test)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from launcher.nettest.burnin import burnin_lines, health_problems, slow_gpus
from trainer.nettest.node import parse_nvlink, parse_smi_health, parse_xid

DATA = Path(__file__).resolve().parents[1] / "data" / "nvidia_smi"


def test_health_problems_say_what_to_do_and_clean_counters_say_nothing():
    health = {"gpus": parse_smi_health((DATA / "a100_pending_remap.txt").read_text()),
              "nvlink": parse_nvlink((DATA / "nvlink_one_inactive.txt").read_text()),
              "xid": parse_xid((DATA / "dmesg_xid.txt").read_text()), "smi_readable": True}
    problems = health_problems(health)
    assert problems[0] == ("GPU 00000000:10:1C.0: a row remap (or page retirement) is pending: reset the GPU "
                           "(or reboot) before training on it")
    assert any(p.startswith("GPU 00000000:10:1D.0: 3 uncorrectable ECC errors") for p in problems)
    assert any("a row remapping failed: the card needs replacing" in p for p in problems)
    assert any("1 NVLink link inactive (2 up)" in p for p in problems)
    assert "the last: [ 8123.456789] NVRM: Xid" in problems[-1]
    clean = {"gpus": [{"bus_id": "x", "ecc_volatile_uncorrectable": 0, "remap_pending": False,
                       "remap_failure": False}], "nvlink": {}, "xid": [], "smi_readable": True}
    assert health_problems(clean) == []
    assert health_problems("garbage") == ["its health report is not readable"]
    assert health_problems({"gpus": [{"bus_id": "\x1b[31mx"}], "smi_readable": False}) == [
        "nvidia-smi gave nothing: its counters were not checked"]


@pytest.mark.parametrize(("tflops", "local", "slow"), [
    ([700, 690, 705, 698], 2, []),
    ([700, 690, 480, 698], 2, [(2, 1, 0)]),
    ([700], 1, []),
])
def test_the_slow_gpu_is_named_against_the_median_of_the_others(tflops, local, slow):
    assert [(s.rank, s.node, s.local_rank) for s in slow_gpus(tflops, local)] == slow


def test_burnin_words():
    lines = burnin_lines([700, 690, 480, 698], 2, {0: {"gpus": [], "smi_readable": True}}, ("a", "b"), 989)
    assert lines[0] == "bf16 GEMM: median 694 TFLOP/s per GPU (70% of the 989 TFLOP/s peak), range 480-700"
    assert lines[1].startswith("slow GPU: node 1 (b) GPU 0: 480 TFLOP/s against 698 for the others (0.69x")
    assert lines[2] == "node 0 (a): ECC, remapped rows, NVLink and Xid lines clean"
    assert burnin_lines([], 1, {}, (), None) == []


@pytest.mark.gpu
@pytest.mark.skipif(shutil.which("nvidia-smi") is None, reason="needs a GPU (no nvidia-smi here)")
def test_nccl_on_this_machines_gpu(tmp_path):
    """The same test with NCCL and the burn-in on this machine's GPUs."""
    import subprocess

    from tests.support.cli import cli, write_workload

    listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    count = len([line for line in listed.stdout.splitlines() if line.startswith("GPU ")])
    assert listed.returncode == 0 and count > 0, listed.stderr
    wl = write_workload(tmp_path, f"""experiment_name: nettest-gpu
compute: {{accelerator_type: GPU_{count}xH100}}
environment: {{python: {sys.executable}}}
mlflow: {{enabled: false}}
command: "true"
""")
    home = tmp_path / "home"
    out = cli(home, "nettest", wl, "--quick", "--max-size", "64", "--json", timeout=400)
    assert out.stdout.strip(), out.stderr[-3000:]
    data = json.loads(out.stdout)
    assert data["backend"] == "nccl" and data["nnodes"] == 1 and data["local_world_size"] == count, data
    assert len(data["burn_in"]["gemm_tflops"]) == count and min(data["burn_in"]["gemm_tflops"]) > 10
    assert "0" in data["burn_in"]["health"]
