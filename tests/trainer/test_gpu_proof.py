"""``benchmarks/gpu_proof.py``, the script a GPU machine runs in its few minutes: its CPU dry run end to
end (every step tiny: gloo, a two-block model, 1-3 steps), and how it keeps to its time (a step's
limit, the run's budget, a command stopped with its children, a fault or a skip of one step)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STEP_FILES = ["01-gpu-tests.json", "02-mfu.json", "03-checkpoint.json", "04-nettest.json", "05-lora.json",
              "06-peers.json", "07-fit.json", "08-loss.json"]


def _proof_module():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        spec = importlib.util.spec_from_file_location("gpu_proof", ROOT / "benchmarks/gpu_proof.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["gpu_proof"] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


def _ends(pid: int, within: float = 30.0) -> bool:
    """Whether process ``pid`` is gone (or a zombie) within ``within`` seconds, polled."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0] == "Z":
                return True
        except (FileNotFoundError, ProcessLookupError):
            return True
        time.sleep(0.05)
    return False


def _has_lora() -> bool:
    from trainer.wire.config import TrainerConfig

    return "lora" in TrainerConfig.model_fields


@pytest.mark.slow
def test_the_dry_run_runs_every_step_and_writes_its_json(tmp_path):
    import torch

    env = {k: v for k, v in os.environ.items() if k != "OUT"}
    env["CUDA_VISIBLE_DEVICES"] = ""
    out = subprocess.run([sys.executable, "benchmarks/gpu_proof.py", "--dry-run", "--results", str(tmp_path),
                          "--wheels", str(tmp_path / "no-wheels")], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=900)
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["00-setup.json", *STEP_FILES, "proof.log"]
    got = {name: json.loads((tmp_path / name).read_text()) for name in ["00-setup.json", *STEP_FILES]}
    for name, record in got.items():
        assert (record["device"], record["dry_run"], record["card"]) == ("cpu", True, "cpu"), name
        assert record["env"]["torch"] == torch.__version__ and record["env"]["cuda_available"] is False, name
        assert record["status"] in ("passed", "skipped"), (name, record.get("reason"), record.get("result"))

    setup = got["00-setup.json"]["result"]
    assert setup["installed"] == [] and setup["errors"] == [] and setup["fsdp_tui"].startswith("present")

    tests = got["01-gpu-tests.json"]["result"]
    assert len(tests["tests"]) >= 5 and tests["counts"]["skipped"] == len(tests["tests"])  # every one needs CUDA
    assert {t["test"].split("::")[0] for t in tests["tests"]} >= {"tests.trainer.ckpt.test_stager",
                                                                  "tests.nettest.test_nettest_burnin"}
    assert all(t["message"] for t in tests["tests"])

    runs = got["02-mfu.json"]["result"]["runs"]
    assert [r["packed"] for r in runs] == [0, 32] and all(r["tokens_per_s"] > 0 and r["mfu"] is None for r in runs)
    assert all(r["memory"]["rss_gib"] > 0 and r["mfu_goal_met"] is None for r in runs)

    ckpt = got["03-checkpoint.json"]["result"]
    assert all(len(ckpt["runs_s"][k]) == 1 for k in ("async", "sync", "seed")) and ckpt["median_s"]["sync"] > 0
    assert ckpt["async_over_sync"] > 0 and ckpt["goal_met"] is None

    net = got["04-nettest.json"]["result"]
    assert (net["backend"], net["nnodes"], net["world_size"]) == ("gloo", 1, 1) and net["figures"]

    lora = got["05-lora.json"]
    if _has_lora():
        assert lora["status"] == "passed", lora
        assert all(lora["result"]["runs"][v]["steps"] == 3 for v in ("full", "lora"))
        assert lora["result"]["runs"]["qlora"]["status"] == "skipped"
    else:
        assert lora["status"] == "skipped" and lora["reason"].startswith("the trainer has no LoRA")
    peers = got["06-peers.json"]
    if not (ROOT / "benchmarks/bench_vs_peers.py").exists():
        assert peers["status"] == "skipped" and "does not exist" in peers["reason"]
    fit = got["07-fit.json"]["result"]  # the memory prediction beside each case's measured peak
    assert [(r["name"], r["sharding"]) for r in fit["runs"]] == [
        (shape, sharding) for shape in ("tiny", "tiny-wide") for sharding in ("full_shard", "no_shard")]
    assert all(r["predicted_gib"] > 0 and r["measured_gib"] > 0 and r["error"] is not None for r in fit["runs"])
    assert fit["measured_by"].startswith("VmHWM")
    loss = got["08-loss.json"]["result"]  # the chunked loss against the full logits, tiny, in chunks of 64
    assert list(loss["runs"]) == ["full", "chunked"] and loss["runs"]["chunked"]["chunk_rows"] == 64
    assert all(r["peak_gib"] > 0 and r["tokens_per_s"] > 0 for r in loss["runs"].values())
    assert loss["loss_difference"] < 1e-5 and loss["memory_chunked_over_full"] > 0
    log = (tmp_path / "proof.log").read_text()
    assert "==== step 6: peers" in log and "bench_gpu.py --json --tiny" in log and "==== step 7: fit" in log
    assert "==== step 8: loss" in log
    assert out.stdout.splitlines()[-1].startswith("card: cpu | torch ")


def test_a_step_keeps_to_its_limit_and_the_budget_and_its_json_says_what_happened(tmp_path):
    gp = _proof_module()
    from gpu_proof_steps import Outcome, Skip, Step

    proof = gp.Proof("dry", sys.executable, dict(os.environ), [tmp_path], tmp_path, time.monotonic() + 600)
    seen = {}

    def child_left_behind(p):
        # A command past its limit: its output so far is kept, and its process group (a child too) ends.
        call = p.call([sys.executable, "-c", "import subprocess, sys, time; c = subprocess.Popen([sys.executable, "
                       "'-c', 'import time; time.sleep(600)']); print(c.pid, flush=True); time.sleep(600)"], limit=3)
        seen["call"] = call
        return Outcome("timeout" if call.timed_out else "passed", result={"pid": int(call.stdout.split()[0])})

    def skip(p):
        raise Skip("nothing to run here")

    def broken(p):
        return {}["missing"]

    record = gp.run_step(proof, 1, Step("slow", "", {"dry": 30}, child_left_behind), True)
    assert record["status"] == "timeout" and seen["call"].rc is None and record["limit_s"] == 30
    assert _ends(record["result"]["pid"]), "the command's child outlived it"
    assert json.loads((tmp_path / "01-slow.json").read_text())["status"] == "timeout"

    assert gp.run_step(proof, 2, Step("skip", "", {"dry": 30}, skip), True)["reason"] == "nothing to run here"
    fault = gp.run_step(proof, 3, Step("broken", "", {"dry": 30}, broken), True)
    assert fault["status"] == "error" and "KeyError" in fault["reason"] and "traceback" in fault["result"]
    assert gp.run_step(proof, 4, Step("other", "", {"dry": 30}, skip), False) is None
    assert not (tmp_path / "04-other.json").exists()

    proof.deadline = time.monotonic() + 10  # less than a step's minimum is left of the run's budget
    late = gp.run_step(proof, 5, Step("late", "", {"dry": 30}, skip), True)
    assert late["status"] == "skipped" and late["reason"].startswith("out of time")
    assert "==== step 1: slow" in (tmp_path / "proof.log").read_text()
    assert gp.BUDGET_S["full"] <= 540 and gp.BUDGET_S["quick"] <= 300  # 9 minutes; steps 1-3 in 5
    names = [s.name for s in gp.STEPS]
    for only, mode, runs in (("", "full", [1, 2, 3, 4, 5, 6, 7, 8]), ("", "quick", [1, 2, 3]),
                             ("", "dry", [1, 2, 3, 4, 5, 6, 7, 8]), ("fit", "full", [7]), ("loss", "full", [8]),
                             ("2, nettest", "full", [2, 4]), ("4", "quick", []), ("lora", "dry", [5])):
        assert [i for i, n in enumerate(names, 1) if gp.chosen(i, n, only, mode)] == runs, (only, mode)


class _FakeGpu:
    """A proof on a GPU, mocked (this machine has none): each command's argv is kept and answered with
    what the real command prints there (a benchmark's JSON line, nettest's JSON, the trainer's metrics
    file), so the branches only a GPU takes build their commands and read their output under test."""

    def __init__(self, mode: str, tmp: Path, answer):
        self.mode, self.dry, self.python, self.tmp = mode, False, sys.executable, tmp
        self.info = {"card": "NVIDIA H100 80GB HBM3", "gpus": 1, "bitsandbytes": "0.50.2"}
        self.argvs, self.answer = [], answer

    def call(self, argv, limit=None, env=None, cwd=None):
        from gpu_proof import Call

        self.argvs.append(argv)
        rc, stdout = self.answer(argv, env or {})
        return Call(argv, rc, stdout, "", 1.0)


def _bench_line(**fields) -> str:
    return json.dumps(fields)


def test_the_gpu_branches_build_their_commands_and_read_their_output(tmp_path, monkeypatch):
    _proof_module()
    import gpu_proof_steps as steps

    printed = ("tests/trainer/ckpt/test_stager.py::test_copy PASSED [ 20%]\n"
               "tests/nettest/test_nettest_burnin.py::test_nccl_on_this_machines_gpu FAILED [ 40%]\n")
    got = steps.gpu_tests(_FakeGpu("full", tmp_path, lambda argv, env: (None, printed)))  # stopped: no report
    assert got.status == "timeout" and got.result["counts"] == {"passed": 1, "failed": 1, "error": 0, "skipped": 0}
    assert got.result["tests"][1]["test"] == "tests.nettest.test_nettest_burnin::test_nccl_on_this_machines_gpu"

    mfu_lines = "\n".join(_bench_line(bench="gpu", rows=rows, packed=packed, tokens_per_s=tps, mfu=mfu)
                          for rows, packed, tps, mfu in (("whole examples", 0, 55000.0, 0.47),
                                                         ("4 packed examples of 512", 512, 41000.0, 0.35)))
    proof = _FakeGpu("full", tmp_path, lambda argv, env: (0, "warm-up line\n" + mfu_lines))
    got = steps.mfu(proof)
    assert got.status == "passed" and [r["mfu_goal_met"] for r in got.result["runs"]] == [True, False]
    argv = proof.argvs[-1]
    assert {"--compile", "--json"} <= set(argv) and argv[argv.index("--batch") + 1] == "8"
    assert argv[argv.index("--packed") + 1:argv.index("--packed") + 3] == ["0", "512"]
    quick = _FakeGpu("quick", tmp_path, lambda argv, env: (0, mfu_lines.splitlines()[0]))
    got = steps.mfu(quick)  # cut short after the whole rows: what it measured is kept
    assert got.status == "failed" and got.reason == "1 of 2 row kinds measured" and len(got.result["runs"]) == 1
    assert quick.argvs[-1][quick.argvs[-1].index("--steps") + 1] == "10"

    ckpt = _bench_line(bench="checkpoint", params=334e6, async_over_sync=0.05,
                       median_s={"async": 0.4, "sync": 8.0, "seed": 0.7})
    got = steps.checkpoint(_FakeGpu("full", tmp_path, lambda argv, env: (0, ckpt)))
    assert got.status == "passed" and got.result["goal_met"] is True and "(0.05x)" in got.summary

    report = {"backend": "nccl", "world_size": 1, "figures": [{"op": "all_gather", "bytes": 64 << 20, "busbw": 0.0}],
              "burn_in": {"gemm_tflops": [702.5], "health": {"0": {"gpus": []}}}}
    for rc, data, status, reason in ((0, report, "passed", None),
                                     (0, {**report, "burn_in": None}, "failed", "no burn-in GEMM figure"),
                                     (1, report, "failed", "exit 1: ")):
        net = _FakeGpu("full", tmp_path, lambda argv, env, rc=rc, data=data: (rc, json.dumps(data)))
        got = steps.nettest(net)
        assert got.status == status and (got.reason or "").startswith(reason or ""), got
        assert "accelerator_type: GPU_1xH100" in (tmp_path / "nettest.yaml").read_text()
        assert net.argvs[-1][1:3] == ["nettest", str(tmp_path / "nettest.yaml")]
    assert "GEMM 702 TFLOP/s" in steps.nettest(_FakeGpu("full", tmp_path, lambda a, e: (0, json.dumps(report)))).summary

    def trainer(argv, env):
        if argv[1] == "-c":
            return 0, '{"lora": true, "quantize": true}'
        if "trainer" in argv:
            params = Path(argv[-1]).read_text()
            peak = 30.0 if "lora:" not in params else 12.0 if "nf4" not in params else 6.0
            Path(env["FSDP_TUI_METRICS_FILE"]).write_text("".join(json.dumps(
                {"kind": "train", "step": s, "loss": 11.0 - s, "tokens_per_s": 30000.0 + 1000 * s,
                 "memory": [{"peak_gib": peak}]}) + "\n" for s in range(1, 6)))
        return 0, ""

    lora = _FakeGpu("full", tmp_path, trainer)
    got = steps.lora(lora)
    runs = got.result["runs"]
    assert got.status == "passed" and [runs[v]["status"] for v in ("full", "lora", "qlora")] == ["passed"] * 3
    assert runs["qlora"]["params"]["lora"]["quantize"] == "nf4" and runs["full"]["params"]["max_seq_len"] == 2048
    assert (runs["lora"]["memory_vs_full"], runs["qlora"]["memory_vs_full"]) == (0.4, 0.2)
    assert runs["full"]["tokens_per_s"] == 34000.0  # median of the steps after the first two
    assert lora.argvs[1][-1] == "1b"  # the model folder at the 1B shape
    (tmp_path / "again").mkdir()
    without = _FakeGpu("full", tmp_path / "again", trainer)
    without.info["bitsandbytes"] = None  # not carried: QLoRA says so, LoRA still runs
    runs = steps.lora(without).result["runs"]
    assert runs["qlora"]["status"] == "skipped" and "bitsandbytes is not installed" in runs["qlora"]["reason"]
    assert runs["lora"]["status"] == "passed"

    script = tmp_path / "bench_vs_peers.py"
    script.write_text("")
    monkeypatch.setattr(steps, "PEERS", script)
    monkeypatch.setattr(steps, "ROOT", tmp_path)

    def peers(argv, env):
        if "--help" in argv:
            return 0, "usage: bench_vs_peers.py [--gpu] [--json FILE]"
        Path(argv[argv.index("--json") + 1]).write_text('{"ours_over_hf": 1.9}')
        return 0, "ours / HF Trainer: 1.9x"

    peer = _FakeGpu("full", tmp_path, peers)
    got = steps.peers(peer)
    assert got.status == "passed" and got.result["json"] == {"ours_over_hf": 1.9} and "--gpu" in peer.argvs[-1]


def test_the_fit_step_on_a_gpu_compares_each_case_with_max_memory_allocated(tmp_path):
    """The GPU branch of step 7 (the GPU mocked: each command answered as the real one answers there):
    one rank on the card, no allocator setting, the 1B folder of the LoRA step reused, each case's
    prediction against its measured peak."""
    _proof_module()
    from gpu_proof_fit import fit

    (tmp_path / "lora-model").mkdir()
    (tmp_path / "lora-model" / "config.json").write_text("{}")
    peaks = {("1b", "full_shard"): (20.0, 21.0), ("1b", "no_shard"): (22.0, 30.0), ("wide", "full_shard"): (8.0, 7.5),
             ("wide", "no_shard"): (8.5, 8.0)}

    def worker(argv, env):
        if argv[-1] == "wide":  # the second shape's folder is made
            return 0, "wide: 0.9B parameters"
        cases = json.loads(Path(argv[-2]).read_text())
        with open(argv[-1], "a") as out:
            for case in cases:
                key = (Path(case["params"]["model_name"]).name.replace("lora-model", "1b").replace("fit-", ""),
                       case["params"]["fsdp"]["sharding"])
                predicted, measured = peaks[key]
                out.write(json.dumps({"name": key[0], "sharding": key[1], "device": "cuda",
                                      "measured": [int(measured * 2**30)], "predicted": int(predicted * 2**30),
                                      "parts": {}, "params": 1}) + "\n")
        return 0, ""

    proof = _FakeGpu("full", tmp_path, worker)
    got = fit(proof)
    assert got.status == "passed" and got.result["measured_by"] == "torch.cuda.max_memory_allocated"
    assert [(r["name"], r["sharding"], r["within_25pct"]) for r in got.result["runs"]] == [
        ("1b", "full_shard", True), ("1b", "no_shard", False), ("wide", "full_shard", True), ("wide", "no_shard", True)]
    assert "1b no_shard: predicted 22.00 GiB, measured 30.00 (+36%)" in got.summary
    run = proof.argvs[-1]
    assert "--nproc_per_node=1" in run and run[-3].endswith("benchmarks/fit_worker.py")
    assert [a[-1] for a in proof.argvs[:-1]] == ["wide"]  # the 1B folder of the LoRA step is not made again
    spec = json.loads(Path(run[-2]).read_text())
    assert {c["params"]["max_seq_len"] for c in spec} == {2048}


def test_the_loss_step_on_a_gpu_builds_its_commands_and_reads_their_lines(tmp_path):
    """Mocked GPU (none here): the chunked loss and the full logits at a 128k vocabulary and 4k tokens, each in its
    own process; Liger's fused kernel where the node has the package; a loss that differs fails the step."""
    _proof_module()
    import gpu_proof_steps as steps

    def answer(losses):
        def reply(argv, env):
            mode = argv[argv.index("--mode") + 1]
            peak, tps = {"full": (9.5, 30000.0), "chunked": (3.8, 33000.0), "fused": (3.1, 41000.0)}[mode]
            return 0, _bench_line(bench="loss", mode=mode, vocab=128256, seq=4096, peak_gib=peak, tokens_per_s=tps,
                                  loss=losses[mode], chunk_rows=65)
        return reply

    proof = _FakeGpu("full", tmp_path, answer({"full": 11.77, "chunked": 11.77, "fused": 11.77}))
    got = steps.loss(proof)
    assert got.status == "passed", got
    assert got.result["memory_chunked_over_full"] == 0.4 and got.result["tokens_per_s_chunked_over_full"] == 1.1
    assert [a[a.index("--mode") + 1] for a in proof.argvs] == ["full", "chunked"]
    assert {"--vocab", "128256", "--seq", "4096"} <= set(proof.argvs[0]) and "--chunk-rows" not in proof.argvs[0]
    assert got.result["fused"].startswith("not run: liger-kernel is not installed")
    assert "peak 9.50 -> 3.80 GiB (0.40x)" in got.summary
    with_liger = _FakeGpu("full", tmp_path, answer({"full": 11.77, "chunked": 11.77, "fused": 11.77}))
    with_liger.info["liger-kernel"] = "0.8.0"
    assert list(steps.loss(with_liger).result["runs"]) == ["full", "chunked", "fused"]
    differs = steps.loss(_FakeGpu("full", tmp_path, answer({"full": 11.77, "chunked": 9.0, "fused": 11.77})))
    assert differs.status == "failed" and differs.reason == "the chunked loss differs from the full logits'"
