"""Step 7 of ``benchmarks/gpu_proof.py``: the memory prediction against ``torch.cuda.max_memory_allocated``.
Two model shapes (the Llama-3.2-1B shape and a wide four-block one; tiny ones in a dry run) under two
shardings (``full_shard``: each block gathered for its compute only; ``no_shard``: every block gathered
from its forward to its backward), bf16 on the GPU, two steps each through the trainer's own parts in one
``torchrun`` (``benchmarks/fit_worker.py``). The step records each prediction, its parts and the
measured peak; it passes when every case ran (the figures say how close they are, the step does not
judge them: ``within_25pct`` per case)."""

from __future__ import annotations

import json

from gpu_proof_steps import ROOT, Outcome, _status, _why, free_port, lora_shape

SHAPES = {"full": ("1b", "wide"), "quick": ("1b", "wide"), "dry": ("tiny", "tiny-wide")}
STRATEGIES = ("full_shard", "no_shard")


def fit(proof) -> Outcome:
    folders = {}
    for shape in SHAPES[proof.mode]:
        folder = proof.tmp / f"fit-{shape}"
        lora_folder = proof.tmp / "lora-model"  # the LoRA step's folder of that shape, when it ran: not written twice
        if shape == lora_shape(proof) and (lora_folder / "config.json").exists():
            folder = lora_folder
        elif not (folder / "config.json").exists():
            made = proof.call([proof.python, str(ROOT / "benchmarks/gpu_proof_model.py"), str(folder), shape], limit=240)
            if made.rc != 0:
                return Outcome(_status(made, False), "", f"building the {shape} model folder: {_why(made)}")
        folders[shape] = folder
    gpu = not proof.dry
    cases = [{"name": shape, "params": {
        "model_name": str(folder), "dataset_name": str(folder / "data.jsonl"), "output_dir": str(proof.tmp / "fit-out"),
        "max_seq_len": 2048 if gpu else 128, "per_device_batch_size": 2, "max_steps": 2,
        "model": {"compile": False}, "data": {"format": "text", "eval_fraction": 0.0, "shuffle": False},
        "fsdp": {"sharding": sharding}, "checkpoint": {"save_final": False, "export_hf": False}}}
        for shape, folder in folders.items() for sharding in STRATEGIES]
    spec, out = proof.tmp / "fit-cases.json", proof.tmp / "fit-out.jsonl"
    spec.write_text(json.dumps(cases))
    out.unlink(missing_ok=True)
    env = {"OMP_NUM_THREADS": "1"} if gpu else {"OMP_NUM_THREADS": "1", "MALLOC_MMAP_THRESHOLD_": str(128 * 1024)}
    call = proof.call([proof.python, "-m", "torch.distributed.run", "--nproc_per_node=1",
                       f"--master_port={free_port()}", str(ROOT / "benchmarks/fit_worker.py"), str(spec), str(out)],
                      env=env, cwd=proof.tmp)
    runs = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    for run in runs:
        peak = max(run["measured"])
        run["measured_gib"], run["predicted_gib"] = round(peak / 2**30, 3), round(run["predicted"] / 2**30, 3)
        run["error"] = round((peak - run["predicted"]) / run["predicted"], 4) if run["predicted"] else None
        run["within_25pct"] = run["error"] is not None and abs(run["error"]) <= 0.25
    summary = "; ".join(f"{r['name']} {r['sharding']}: predicted {r['predicted_gib']:.2f} GiB, measured "
                        f"{r['measured_gib']:.2f} ({r['error']:+.0%})" for r in runs)
    ok = len(runs) == len(cases)
    return Outcome(_status(call, ok), summary, _why(call) or (None if ok else f"{len(runs)} of {len(cases)} cases ran"),
                   {"measured_by": "torch.cuda.max_memory_allocated" if gpu else "VmHWM (resident peak)",
                    "runs": runs, "cases": len(cases)})
