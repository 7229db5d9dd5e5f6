"""The steps of ``benchmarks/gpu_proof.py``: each one a name, a time limit per mode (``full`` on the GPU,
``quick``, ``dry`` on CPU), and a function that runs its commands through ``proof.call`` and turns their
output into the step's JSON (:class:`Outcome`). A step that cannot run raises :class:`Skip` with what
it checked."""

from __future__ import annotations

import json
import re
import socket
import statistics
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MFU_GOAL = 0.46
"""The 1B shape's MFU goal on an H100: above the best public FSDP figure."""
ASYNC_OVER_SYNC_GOAL = 0.1
"""An async save may block training for at most this share of a synchronous one."""


class Skip(Exception):
    """The step cannot run here; the message says what was checked."""


@dataclass
class Outcome:
    status: str  # passed | failed | timeout | skipped | error
    summary: str = ""
    reason: str | None = None
    result: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Step:
    name: str
    title: str
    limit_s: dict[str, int]
    run: Callable


def _status(call, ok: bool = True) -> str:
    return "timeout" if call.timed_out else "passed" if call.rc == 0 and ok else "failed"


def _json_lines(text: str, key: str) -> list[dict]:
    """The JSON objects a benchmark printed one per line (``{"bench": ...}``), in order."""
    out = []
    for line in text.splitlines():
        if line.startswith("{") and f'"bench": "{key}"' in line:
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def _why(call) -> str | None:
    if call.timed_out:
        return f"stopped at its time limit after {call.seconds:.0f} s"
    if call.rc != 0:
        lines = [ln for ln in (call.stderr or call.stdout).strip().splitlines() if ln.strip()]
        return f"exit {call.rc}: {lines[-1][:400] if lines else 'no output'}"
    return None


# 1. Every gpu-marked test ---------------------------------------------------------------------------

def gpu_test_files() -> list[str]:
    """The test files that hold a ``gpu``-marked test (collected alone: the rest of the suite needs
    packages a GPU node does not have)."""
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py")
                  if "pytest.mark.gpu" in p.read_text(encoding="utf-8"))


def gpu_tests(proof) -> Outcome:
    junit = proof.tmp / "gpu-tests.xml"
    files = gpu_test_files()
    call = proof.call([proof.python, "-m", "pytest", "-m", "gpu", "-v", "-p", "no:cacheprovider", "-o", "addopts=",
                       f"--junitxml={junit}", "-rA", *files])
    tests = []
    if not junit.exists():  # stopped before pytest wrote its report: the verdicts it printed so far
        for m in re.finditer(r"^(tests/\S+)::(\S+) (PASSED|FAILED|SKIPPED|ERROR)", call.stdout, re.M):
            tests.append({"test": f"{m[1][:-3].replace('/', '.')}::{m[2]}", "outcome": m[3].lower(),
                          "seconds": None, "message": None})
    else:
        for case in ET.parse(junit).iter("testcase"):
            outcome, message, detail = "passed", None, None
            for kind in ("failure", "error", "skipped"):
                node = case.find(kind)
                if node is not None:
                    outcome, message = {"failure": "failed"}.get(kind, kind), (node.get("message") or "")[:600]
                    detail = (node.text or "")[-2500:] if kind != "skipped" else None
            tests.append({"test": f"{case.get('classname')}::{case.get('name')}", "outcome": outcome,
                          "seconds": float(case.get("time") or 0), "message": message, "detail": detail})
    counts = {k: sum(t["outcome"] == k for t in tests) for k in ("passed", "failed", "error", "skipped")}
    ok = call.rc in (0, 5) and not counts["failed"] and not counts["error"] and bool(tests)
    status = "timeout" if call.timed_out else "passed" if ok else "failed"
    summary = ", ".join(f"{v} {k}" for k, v in counts.items() if v) or "no test ran"
    return Outcome(status, summary, _why(call) if status != "passed" else None,
                   {"files": files, "counts": counts, "tests": tests, "output_tail": call.stdout[-3000:]})


# 2. MFU ---------------------------------------------------------------------------------------------

def mfu(proof) -> Outcome:
    if proof.dry:
        shape = ["--tiny", "--batch", "2", "--seq", "128", "--warmup", "1", "--steps", "2", "--packed", "0", "32"]
    else:
        timed = ["--warmup", "3", "--steps", "10"] if proof.mode == "quick" else ["--warmup", "5", "--steps", "20"]
        shape = ["--batch", "8", "--seq", "2048", "--compile", "--packed", "0", "512", *timed]
    call = proof.call([proof.python, str(ROOT / "benchmarks/bench_gpu.py"), "--json", *shape],
                      env={"MASTER_PORT": str(free_port())})
    runs = _json_lines(call.stdout, "gpu")
    for run in runs:
        run["mfu_goal_met"] = None if proof.dry or run["mfu"] is None else run["mfu"] >= MFU_GOAL
    summary = "; ".join(f"{r['rows']}: {r['tokens_per_s']:,.0f} tok/s, MFU "
                        f"{'n/a' if r['mfu'] is None else format(r['mfu'], '.1%')}" for r in runs)
    return Outcome(_status(call, len(runs) == 2), summary, _why(call) or (None if len(runs) == 2 else
                   f"{len(runs)} of 2 row kinds measured"), {"runs": runs, "mfu_goal": MFU_GOAL})


# 3. Checkpoint ----------------------------------------------------------------------------------------

def checkpoint(proof) -> Outcome:
    size = ["--hidden", "64", "--layers", "2", "--repeat", "1"] if proof.dry else \
        ["--hidden", "1024", "--layers", "16", "--repeat", "2" if proof.mode == "quick" else "3"]
    call = proof.call([proof.python, str(ROOT / "benchmarks/bench_checkpoint.py"), "--json", "--nproc", "1", *size])
    found = _json_lines(call.stdout, "checkpoint")
    result = found[-1] if found else {}
    if result:
        ratio = result["async_over_sync"]
        result["goal_async_over_sync"] = ASYNC_OVER_SYNC_GOAL
        result["goal_met"] = None if proof.dry else ratio <= ASYNC_OVER_SYNC_GOAL
        med = result["median_s"]
        summary = (f"{result['params'] / 1e6:.0f}M params: async blocks {med['async'] * 1000:.0f} ms, sync "
                   f"{med['sync'] * 1000:.0f} ms ({ratio:.2f}x), seed {med['seed'] * 1000:.0f} ms")
    else:
        summary = ""
    return Outcome(_status(call, bool(found)), summary, _why(call) or (None if found else "no JSON line"), result)


# 4. nettest -----------------------------------------------------------------------------------------

_CARDS = ("H200", "H100", "B200", "A100", "L40S", "A10G", "A10", "L4", "V100", "T4", "MI300X")


def nettest(proof) -> Outcome:
    """``fsdp-tui nettest --quick`` through the real CLI on a workload for this machine alone."""
    if proof.dry:
        compute = "{accelerator_type: CPU, procs_per_node: 1}"  # as one GPU: one process, no torchrun
        size = "2"
    else:
        card = proof.info.get("card", "")
        model = next((c for c in _CARDS if re.search(rf"\b{c}\b", card)), "H100")
        compute = f"{{accelerator_type: GPU_{proof.info.get('gpus', 1)}x{model}}}"
        size = "64"
    workload = proof.tmp / "nettest.yaml"
    workload.write_text(f"experiment_name: gpu-proof\ncompute: {compute}\nenvironment: {{python: {proof.python}}}\n"
                        "env_variables: {OMP_NUM_THREADS: 1}\nmlflow: {enabled: false}\ncommand: \"true\"\n")
    cli = str(Path(proof.python).with_name("fsdp-tui"))
    call = proof.call([cli, "nettest", str(workload), "--quick", "--max-size", size, "--json"])
    try:
        data = json.loads(call.stdout)
    except ValueError:
        data = {}
    want = "gloo" if proof.dry else "nccl"
    checks = [] if data.get("backend") == want else [f"backend {data.get('backend')!r}, expected {want}"]
    if not proof.dry and not (data.get("burn_in") or {}).get("gemm_tflops"):
        checks.append("no burn-in GEMM figure")
    burn = data.get("burn_in") or {}
    largest = [f for f in data.get("figures", []) if f.get("op") == "all_gather"][-1:]
    summary = ", ".join(filter(None, [
        f"{data.get('backend')} x {data.get('world_size')}" if data else "",
        f"all-gather {largest[0]['bytes'] >> 20} MiB busbw {largest[0]['busbw'] / 1e9:.1f} GB/s" if largest else "",
        f"GEMM {', '.join(f'{t:.0f}' for t in burn.get('gemm_tflops', []))} TFLOP/s" if burn else ""]))
    status = "timeout" if call.timed_out else "passed" if call.rc == 0 and data and not checks else "failed"
    reason = _why(call) or ("; ".join(checks) if checks else None)
    return Outcome(status, summary, reason, data or {"output_tail": (call.stdout + call.stderr)[-3000:]})


# 5. LoRA / QLoRA vs full --------------------------------------------------------------------------------

_LORA_PROBE = ("import json; from trainer.wire import config as c; lc = getattr(c, 'LoraConfig', None); "
               "print(json.dumps({'lora': 'lora' in c.TrainerConfig.model_fields, "
               "'quantize': lc is not None and 'quantize' in lc.model_fields}))")


def lora(proof) -> Outcome:
    """Full fine-tuning, LoRA and QLoRA of one 1B-shaped model folder (random weights written locally)
    through ``torchrun -m trainer``, each run's peak memory and tokens/s from its metrics records."""
    probe = proof.call([proof.python, "-c", _LORA_PROBE], limit=60)
    if probe.rc != 0:
        raise Skip(f"could not read the trainer's settings: {_why(probe)}")
    has = json.loads(probe.stdout.strip().splitlines()[-1])
    if not has["lora"]:
        raise Skip("the trainer has no LoRA (trainer.wire.config.TrainerConfig has no 'lora' setting)")
    folder, shape = proof.tmp / "lora-model", lora_shape(proof)
    made = proof.call([proof.python, str(ROOT / "benchmarks/gpu_proof_model.py"), str(folder), shape], limit=240)
    if made.rc != 0:
        return Outcome(_status(made, False), "", f"building the model folder: {_why(made)}")
    variants = {"full": None, "lora": {"r": 16, "alpha": 32}, "qlora": {"r": 16, "alpha": 32, "quantize": "nf4"}}
    runs, summary, status = {}, [], "passed"
    for name, settings in variants.items():
        why = _qlora_missing(proof, has) if name == "qlora" else None
        if why:
            runs[name] = {"status": "skipped", "reason": why}
            continue
        run = _train(proof, folder, name, settings)
        runs[name] = run
        if run["status"] != "passed":
            status = "timeout" if run["status"] == "timeout" else "failed"
            if status == "timeout":
                break
        elif run.get("tokens_per_s"):
            summary.append(f"{name} {run['tokens_per_s']:,.0f} tok/s, peak {run['peak_gib']:.1f} GiB")
    full = runs.get("full", {})
    for name in ("lora", "qlora"):
        run = runs.get(name, {})
        if full.get("peak_gib") and run.get("peak_gib"):
            run["memory_vs_full"] = round(run["peak_gib"] / full["peak_gib"], 3)
            run["tokens_per_s_vs_full"] = round(run["tokens_per_s"] / full["tokens_per_s"], 3)
    reasons = [f"{n}: {r['reason']}" for n, r in runs.items() if r.get("reason") and r["status"] != "skipped"]
    return Outcome(status, "; ".join(summary), "; ".join(reasons) or None, {"shape": shape, "runs": runs})


def lora_shape(proof) -> str:
    """The model shape the LoRA step builds its folder for (the fit step reuses that folder)."""
    return "tiny" if proof.dry else "1b"


def _qlora_missing(proof, has: dict) -> str | None:
    if not has["quantize"]:
        return "the trainer has no QLoRA (trainer.wire.config.LoraConfig has no 'quantize' setting)"
    if proof.dry:
        return "QLoRA needs CUDA (bitsandbytes' 4-bit kernels): not in a dry run"
    if not proof.info.get("bitsandbytes"):
        return "bitsandbytes is not installed on this node (carry its wheel in .whl/)"
    return None


def _train(proof, folder: Path, name: str, lora_settings: dict | None) -> dict:
    import yaml  # after the setup: the node may have lacked it

    work = proof.tmp / f"train-{name}"
    work.mkdir()
    gpu = not proof.dry
    params = {"model_name": str(folder), "dataset_name": str(folder / "data.jsonl"), "output_dir": str(work / "out"),
              "max_seq_len": 2048 if gpu else 128, "per_device_batch_size": 4 if gpu else 2,
              "max_steps": 12 if gpu else 3, "learning_rate": 1e-4, "model": {"compile": False},
              "data": {"format": "text", "eval_fraction": 0.0, "shuffle": False},
              "checkpoint": {"save_final": False, "export_hf": False}, "logging": {"every_steps": 1}}
    if lora_settings:
        params["lora"] = lora_settings
    (work / "params.yaml").write_text(yaml.safe_dump(params))
    metrics = work / "metrics.jsonl"
    call = proof.call([proof.python, "-m", "torch.distributed.run", "--nproc_per_node=1", f"--master_port={free_port()}",
                       "-m", "trainer", str(work / "params.yaml")], cwd=work,
                      env={"FSDP_TUI_METRICS_FILE": str(metrics), "OMP_NUM_THREADS": "1"})
    records = [json.loads(x) for x in metrics.read_text().splitlines() if x.strip()] if metrics.exists() else []
    train = [r for r in records if r.get("kind") == "train"]
    steady = train[2:] or train  # the first steps allocate and warm up
    peaks = [m.get("peak_gib", m.get("rss_gib")) for r in train for m in r.get("memory") or [] if m]
    adapters = [ln for ln in call.stdout.splitlines() if ln.startswith("lora:")]
    return {"status": _status(call, bool(train)), "reason": _why(call) or (None if train else "no train record"),
            "steps": len(train), "tokens_per_s": statistics.median(r["tokens_per_s"] for r in steady) if steady else None,
            "peak_gib": max(p for p in peaks if p is not None) if any(p is not None for p in peaks) else None,
            "memory_key": "peak_gib" if gpu else "rss_gib", "loss_first_last": [train[0]["loss"], train[-1]["loss"]]
            if train else None, "adapters": adapters[0] if adapters else None, "params": params}


# 6. The trainer vs Hugging Face Trainer ---------------------------------------------------------------

PEERS = ROOT / "benchmarks/bench_vs_peers.py"


def peers(proof) -> Outcome:
    """``bench_vs_peers.py --gpu`` (``--json FILE`` where it offers it) with what is left of the budget; in a
    dry run only its ``--help``, checked to offer ``--gpu`` (the comparison takes minutes on CPU)."""
    if not PEERS.exists():
        raise Skip(f"{PEERS.relative_to(ROOT)} does not exist yet")
    helped = proof.call([proof.python, str(PEERS), "--help"], limit=60)
    if helped.rc != 0 or "--gpu" not in helped.stdout:
        raise Skip(f"{PEERS.relative_to(ROOT)} has no --gpu flag ({_why(helped) or 'not in its --help'})")
    if proof.dry:
        return Outcome("passed", "--help offers --gpu (not run in a dry run)", None, {"help": helped.stdout[-2000:]})
    out = proof.tmp / "peers.json"
    extra = ["--json", str(out)] if "--json" in helped.stdout else []
    call = proof.call([proof.python, str(PEERS), "--gpu", *extra])
    data = json.loads(out.read_text()) if out.exists() else None
    return Outcome(_status(call), call.stdout.strip().splitlines()[-1][:300] if call.stdout.strip() else "",
                   _why(call), {"json": data, "output_tail": call.stdout[-4000:]})


# 7. The loss without the logits ---------------------------------------------------------------------------

LOSS_SHAPES = {"gpu": ["--vocab", "128256", "--seq", "4096", "--hidden", "2048", "--layers", "2", "--steps", "6"],
               "dry": ["--vocab", "8192", "--seq", "512", "--hidden", "64", "--layers", "1", "--steps", "2",
                       "--chunk-rows", "64"]}
"""A 128k vocabulary and 4k tokens on the GPU (a Llama 2048 wide, 2 blocks); tiny on CPU, with chunks."""


def loss(proof) -> Outcome:
    """``model.cross_entropy``: the chunked loss against the full logits (``benchmarks/bench_loss.py``, each in
    its own process, through the trainer's micro-step): peak memory, tokens/s and the loss each gives; Liger
    Kernel's fused kernel beside them where the node has it."""
    shape = LOSS_SHAPES["dry" if proof.dry else "gpu"]
    modes = ["full", "chunked"]
    if not proof.dry and proof.info.get("liger-kernel"):
        modes.append("fused")
    runs: dict[str, dict] = {}
    status = "passed"
    for mode in modes:
        call = proof.call([proof.python, str(ROOT / "benchmarks/bench_loss.py"), "--mode", mode, *shape],
                          env={"OMP_NUM_THREADS": "1"} if proof.dry else None)
        found = _json_lines(call.stdout, "loss")
        runs[mode] = found[-1] if found else {"status": _status(call, False), "reason": _why(call) or "no JSON line"}
        if not found:
            status = "timeout" if call.timed_out else "failed"
            if call.timed_out:
                break
    full, chunked = runs.get("full", {}), runs.get("chunked", {})
    result: dict = {"runs": runs}
    summary = ""
    if full.get("peak_gib") and chunked.get("peak_gib"):
        result.update(memory_chunked_over_full=round(chunked["peak_gib"] / full["peak_gib"], 3),
                      tokens_per_s_chunked_over_full=round(chunked["tokens_per_s"] / full["tokens_per_s"], 3),
                      loss_difference=abs(chunked["loss"] - full["loss"]))
        summary = (f"vocab {full['vocab']}, seq {full['seq']}: peak {full['peak_gib']:.2f} -> "
                   f"{chunked['peak_gib']:.2f} GiB ({result['memory_chunked_over_full']:.2f}x), "
                   f"{full['tokens_per_s']:,.0f} -> {chunked['tokens_per_s']:,.0f} tok/s "
                   f"({result['tokens_per_s_chunked_over_full']:.2f}x), loss difference {result['loss_difference']:.1e}")
        if result["loss_difference"] > 1e-2 * max(1.0, abs(full["loss"])):
            status = "failed"
    if "fused" not in runs and not proof.dry:
        result["fused"] = "not run: liger-kernel is not installed on this node"
    reason = "; ".join(f"{m}: {r['reason']}" for m, r in runs.items() if r.get("reason")) or (
        "the chunked loss differs from the full logits'" if status == "failed" else None)
    return Outcome(status, summary, reason, result)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


STEPS = (
    Step("gpu_tests", "every gpu-marked test", {"full": 200, "quick": 150, "dry": 240}, gpu_tests),
    Step("mfu", "MFU: Llama-3.2-1B shape, seq 2048, bf16, compile, whole and packed rows",
         {"full": 200, "quick": 110, "dry": 180}, mfu),
    Step("checkpoint", "training blocked by an async save vs a sync one, staging included",
         {"full": 100, "quick": 70, "dry": 180}, checkpoint),
    Step("nettest", "fsdp-tui nettest on this node: NCCL, burn-in, health", {"full": 90, "quick": 90, "dry": 180},
         nettest),
    Step("lora", "full vs LoRA vs QLoRA on a 1B shape: peak memory, tokens/s", {"full": 200, "quick": 200, "dry": 300},
         lora),
    Step("peers", "the trainer vs Hugging Face Trainer (bench_vs_peers.py --gpu)",
         {"full": 300, "quick": 300, "dry": 60}, peers),
    Step("fit", "the memory prediction against max_memory_allocated: two shapes, full_shard and no_shard",
         {"full": 240, "quick": 240, "dry": 300}, lambda proof: _fit_step(proof)),
    Step("loss", "the chunked loss vs the full logits at vocabulary 128k, seq 4k: peak memory, tokens/s",
         {"full": 120, "quick": 120, "dry": 120}, loss),
)


def _fit_step(proof) -> Outcome:
    from gpu_proof_fit import fit  # its own module: it imports this one

    return fit(proof)
