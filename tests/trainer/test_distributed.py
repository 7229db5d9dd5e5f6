"""The trainer end to end under real torchrun with gloo: training, strategies, export, resume.

The module's independent two-rank runs (the demo, the reference of the resume after SIGKILL, a GPT-2
folder with a JSONL file, the first half of the async resume) run one after the other in one torchrun
(``two_rank_runs``): each is the trainer's own entry in a folder of its own, with the output and exit
code of its own, at the cost of one start of the ranks."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.support.trainer.run import (
    HERE,
    ROOT,
    kill_tagged,
    run_trainer,
    run_trainers,
    tiny_params,
    torchrun_argv,
    trainer_env,
)
from trainer.ckpt.checkpoint import list_checkpoints, newest_complete

pytestmark = pytest.mark.slow


def _records(tmp: Path) -> list[dict]:
    return [json.loads(line) for line in (tmp / "metrics.jsonl").read_text().splitlines()]


def _resume_params(out: Path) -> dict:
    return tiny_params(out, max_steps=16, checkpoint={"every_steps": 6, "keep_last": 3, "export_hf": False},
                       logging={"eval_every_steps": None, "eval_max_batches": 1})


def _async_params(out: Path, staging: Path) -> dict:
    return tiny_params(out, max_steps=6, checkpoint={"every_steps": 3, "async_save": True,
                                                     "staging_dir": str(staging), "export_hf": False},
                       logging={"eval_every_steps": None, "eval_max_batches": 1})


def _gpt2_folder(tmp: Path, tiny_model_dir: Path) -> dict:
    """A GPT-2-shaped model (another architecture than our Llama) saved as a plain HF folder, and a JSONL
    file of alpaca rows: the run's parameters."""
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    model_dir = tmp / "gpt2-tiny"
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    config = GPT2Config(vocab_size=len(tok), n_positions=128, n_embd=32, n_layer=2, n_head=2,
                        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    GPT2LMHeadModel(config).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    data = tmp / "mine.jsonl"
    data.write_text("".join(json.dumps({"instruction": f"Say {w}.", "input": "", "output": w}) + "\n"
                            for w in ["yes", "no", "maybe", "sure"] * 20))
    return {"model_name": str(model_dir), "dataset_name": str(data), "output_dir": str(tmp / "out"),
            "max_seq_len": 64, "per_device_batch_size": 2, "max_steps": 3,
            "checkpoint": {"save_final": False, "export_hf": False}}


@pytest.fixture(scope="module")
def two_rank_runs(tmp_path_factory, tiny_model_dir) -> dict[str, tuple[Path, subprocess.CompletedProcess]]:
    """Each independent two-rank run of the module, by name: its folder and its result."""
    tmp = tmp_path_factory.mktemp("runs")
    runs = {
        "demo": (tmp / "demo", tiny_params(tmp / "demo" / "out")),
        "resume_ref": (tmp / "ref", _resume_params(tmp / "ref" / "out")),
        "gpt2": (tmp / "gpt2" / "run", _gpt2_folder(tmp / "gpt2", tiny_model_dir)),
        "async": (tmp / "async" / "two", _async_params(tmp / "async" / "out", tmp / "async" / "staging")),
    }
    outs = run_trainers([(folder, params, None) for folder, params in runs.values()])
    return {name: (folder, out) for (name, (folder, _)), out in zip(runs.items(), outs, strict=True)}


@pytest.fixture(scope="module")
def demo_run(two_rank_runs):
    tmp, out = two_rank_runs["demo"]
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return tmp, out


def test_demo_trains_loss_and_eval_loss_fall(demo_run):
    tmp, out = demo_run
    records = _records(tmp)
    train = [r for r in records if r["kind"] == "train"]
    evals = [r["eval_loss"] for r in records if r["kind"] == "eval"]
    assert [r["step"] for r in train] == list(range(1, 41))
    assert train[-1]["loss"] < train[0]["loss"] * 0.75
    assert evals[-1] <= evals[0] * 0.7, evals
    assert all(r["tokens_per_s"] > 0 and len(r["memory"]) == 2 and r["memory"][1]["rss_gib"] > 0 for r in train)
    assert all(len(r["rank_step_s"]) == 2 and all(s > 0 for s in r["rank_step_s"]) for r in train)  # each rank's own
    assert "step=40/40 loss=" in out.stdout
    assert "exported Hugging Face model" in out.stdout
    assert "Writing model shards" not in out.stdout + out.stderr  # no progress bars in node logs
    # what it trains on, said once at start and recorded for `fsdp-tui show`
    data = [r for r in records if r["kind"] == "data"]
    assert len(data) == 1 and data[0]["step"] == 0 and data[0]["format"] == "alpaca"
    assert data[0]["examples"] + data[0]["eval_examples"] == 2400 and data[0]["max_seq_len"] == 128
    assert f"data: {data[0]['examples']} examples + {data[0]['eval_examples']} held out (alpaca), " in out.stdout


def test_a_finished_run_started_again_trains_nothing_and_writes_nothing(demo_run, tmp_path):
    tmp, _ = demo_run
    before = sorted(p.relative_to(tmp / "out") for p in (tmp / "out").rglob("*"))
    again = run_trainer(tmp_path, tiny_params(tmp / "out"), nproc=1)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"nothing to train: {tmp / 'out' / 'checkpoints' / 'step-00000040'} is step 40 of 40; nothing is " \
           "written" in again.stdout
    assert sorted(p.relative_to(tmp / "out") for p in (tmp / "out").rglob("*")) == before  # no step-40-1, no export
    assert "train_summary" not in again.stdout and "exported" not in again.stdout


def test_checkpoints_are_complete_and_pruned(demo_run):
    tmp, _ = demo_run
    ckpts = list_checkpoints(tmp / "out" / "checkpoints")
    assert [(c.step, c.complete) for c in ckpts] == [(20, True), (40, True)]
    meta = json.loads((Path(ckpts[-1].path) / "meta.json").read_text())
    assert meta["step"] == 40 and meta["world_size"] == 2


_LOADS = """\
import sys, traceback
export, ckpt = sys.argv[1:]
try:
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tok = AutoTokenizer.from_pretrained(export)
    m = AutoModelForCausalLM.from_pretrained(export)
    ids = tok('### Instruction:\\nAdd the two numbers.\\n\\n### Input:\\n2 + 3\\n\\n### Response:\\n', return_tensors='pt')
    out = m.generate(**ids, max_new_tokens=6, do_sample=False)
    print('GENERATED', out.shape[1] > ids['input_ids'].shape[1], repr(tok.decode(out[0][ids['input_ids'].shape[1]:])))
except Exception:
    print('EXPORT FAILED', traceback.format_exc())
try:
    from trainer.export import load_for_inference
    model, _ = load_for_inference(ckpt)
    print('PARAMS', sum(p.numel() for p in model.parameters()))
except Exception:
    print('DCP FAILED', traceback.format_exc())
"""


@pytest.fixture(scope="module")
def loaded(demo_run) -> str:
    """One fresh, plain process (no torchrun, no process group) loads the demo's Hugging Face export and
    generates, then loads its newest DCP checkpoint; each part's failure is printed, not raised, so each
    test below sees its own."""
    tmp, _ = demo_run
    export = tmp / "out" / "hf" / "step-00000040"
    ckpt = newest_complete(tmp / "out" / "checkpoints")
    out = subprocess.run([sys.executable, "-c", _LOADS, str(export), str(ckpt)], capture_output=True, text=True,
                         timeout=240, env=trainer_env(tmp), cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def test_export_loads_in_a_fresh_process_and_generates(loaded):
    assert "GENERATED True" in loaded, loaded[-3000:]


def test_dcp_checkpoint_loads_in_a_plain_process(loaded):
    assert "PARAMS 238144" in loaded, loaded[-3000:]


def _one_step(tmp: Path, model_dir: Path, nproc: int, *configs: str) -> dict:
    """``configs``: ``sharding:offload``, each one step in the same torchrun job of ``nproc`` ranks."""
    prefix = tmp / f"w{nproc}"
    script = str(HERE / "one_step.py")
    out = subprocess.run(torchrun_argv(nproc, script, str(model_dir), str(prefix), *configs), cwd=ROOT,
                         env=trainer_env(tmp), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return {c: torch.load(f"{prefix}-{c.replace(':', '-')}.pt") for c in configs}


def test_sharding_strategies_agree_after_one_step(tmp_path, tiny_model_dir):
    """One torchrun of four ranks (hybrid sharding needs 2x2) steps every strategy from the same init."""
    four = _one_step(tmp_path, tiny_model_dir, 4, "no_shard:0", "full_shard:0", "shard_grad_op:0", "full_shard:1",
                     "hybrid_shard:0")
    runs = {
        "no_shard": four["no_shard:0"],
        "full_shard": four["full_shard:0"],
        "shard_grad_op": four["shard_grad_op:0"],
        "hybrid_shard 2x2": four["hybrid_shard:0"],
        "full_shard + offload": four["full_shard:1"],
    }
    ref = runs.pop("no_shard")
    for name, run in runs.items():
        assert run["loss"] == pytest.approx(ref["loss"], rel=1e-6), name
        assert run["params"].keys() == ref["params"].keys()
        for key, value in ref["params"].items():
            torch.testing.assert_close(run["params"][key], value, rtol=1e-5, atol=1e-6, msg=f"{name}: {key}")


def test_resume_after_sigkill_gives_the_same_losses(tmp_path, two_rank_runs):
    ref_dir, ref = two_rank_runs["resume_ref"]
    assert ref.returncode == 0, ref.stderr[-3000:]
    ref_losses = {r["step"]: r["loss"] for r in _records(ref_dir) if r["kind"] == "train"}
    params = _resume_params(tmp_path / "ref" / "out")

    tmp = tmp_path / "killed"
    tmp.mkdir()
    params["output_dir"] = str(tmp / "out")
    (tmp / "params.yaml").write_text(json.dumps(params))
    tag = f"resume-test-{os.getpid()}"
    env = {**trainer_env(tmp), "FSDP_TUI_RUN_ID": tag}
    proc = subprocess.Popen(torchrun_argv(2, "-m", "trainer", str(tmp / "params.yaml")), cwd=tmp,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in proc.stdout:
        if line.startswith("step=8/"):
            break
    # SIGKILL torchrun and its workers (each in a session of its own), found by their run tag.
    killed = kill_tagged(tag)
    assert len(killed) >= 3
    proc.wait(timeout=30)
    time.sleep(0.5)
    ckpt_root = tmp / "out" / "checkpoints"
    newest = newest_complete(ckpt_root)
    assert newest is not None and 6 <= int(newest.name[5:]) < 16, "killed before the end, after one save"
    done = int(newest.name[5:])
    partial = ckpt_root / "step-00000015"  # a save killed before DCP finished: never chosen
    partial.mkdir(exist_ok=True)
    (partial / "__0_0.distcp").write_bytes(b"partial")

    # The attempt after the kill claims to continue an earlier run and itself (a retry of a resume): its
    # checkpoint, written by itself, is one of them.
    params["checkpoint"] = {**params["checkpoint"], "resume_runs": ["an-earlier-run"]}
    resumed = run_trainer(tmp, params, env={"FSDP_TUI_RUN_ID": tag})
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resumed from {newest} at step {done}" in resumed.stdout
    after = [r for r in _records(tmp) if r["kind"] == "train"]
    start = max(i for i, r in enumerate(after) if r["step"] == done + 1)  # the resumed attempt's records
    resumed_losses = {r["step"]: r["loss"] for r in after[start:]}
    assert sorted(resumed_losses) == list(range(done + 1, 17))
    for step, loss in resumed_losses.items():
        assert loss == pytest.approx(ref_losses[step], rel=1e-6, abs=1e-7), step
    # The resume proves itself at its first step: everything the checkpoint recorded matches.
    recorded = json.loads((newest / "meta.json").read_text())["resume"]
    assert (recorded["step"], recorded["world_size"], recorded["seed"]) == (done, 2, 42)
    assert [round(x, 4) for x in recorded["losses"]] == [round(ref_losses[s], 4) for s in range(1, done + 1)]
    checks = [r for r in _records(tmp) if r["kind"] == "resume_check"]
    assert [c["verdict"] for c in checks] == ["verified"], checks
    assert set(checks[0]["checked"]) == {"checkpoint's run", "step", "seed", "data", "next batch", "data position",
                                         "learning rate", "loss", "shard digests"}
    assert f"resume check: verified at step {done} (from step {done} of run {tag}): checked step" in resumed.stdout


def test_trains_any_local_hf_model_folder_and_alpaca_jsonl(two_rank_runs):
    """A GPT-2-shaped model (another architecture than our Llama) saved as a plain HF folder."""
    run_dir, out = two_rank_runs["gpt2"]
    assert out.returncode == 0, out.stderr[-3000:]
    losses = [r["loss"] for r in _records(run_dir) if r["kind"] == "train"]
    assert len(losses) == 3 and all(loss > 0 for loss in losses)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_trains_on_gpu_with_nccl_and_bf16(tmp_path, tiny_model_dir):
    params = tiny_params(tmp_path / "out", max_steps=10, checkpoint={"every_steps": 5, "async_save": True})
    out = run_trainer(tmp_path, params, nproc=min(2, torch.cuda.device_count()))
    assert out.returncode == 0, out.stderr[-3000:]
    train = [r for r in _records(tmp_path) if r["kind"] == "train"]
    assert train[-1]["loss"] < train[0]["loss"]
    memory = train[-1]["memory"][0]
    assert memory["peak_gib"] > 0 and memory["device_used_gib"] > memory["reserved_gib"]  # + context, NCCL
    assert all(s > 0 for s in train[-1]["rank_step_s"])  # the update timed with CUDA events


def test_async_staged_checkpoints_then_resume_on_another_world_size(two_rank_runs):
    first_dir, first = two_rank_runs["async"]
    tmp_path = first_dir.parent
    out_dir, staging = tmp_path / "out", tmp_path / "staging"
    params = _async_params(out_dir, staging)
    assert first.returncode == 0, first.stderr[-3000:]
    ckpts = list_checkpoints(out_dir / "checkpoints")
    assert [(c.step, c.complete) for c in ckpts] == [(3, True), (6, True)]
    assert not any(staging.iterdir()), "staged checkpoints are moved into place"

    params["max_steps"] = 9
    second = run_trainer(tmp_path / "one", params, nproc=1)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "resumed from" in second.stdout and "step-00000006 at step 6" in second.stdout
    steps = [r["step"] for r in _records(tmp_path / "one") if r["kind"] == "train"]
    assert steps == [7, 8, 9]
    # Another world size is said, not hidden: the data position is compared as a global sample index.
    check = next(r for r in _records(tmp_path / "one") if r["kind"] == "resume_check")
    assert check["verdict"] == "resharded" and check["world_before"] == 2 and check["world_after"] == 1, check
    assert {"step", "seed", "data", "data position", "loss"} <= set(check["checked"])
    assert check["not_checked"] == ["learning rate (the schedule is 9 steps now, 6 then)"]
    assert (f"resume check: resharded at step 6 (from step 6), 2 ranks {check['sharding_before']} -> 1 rank "
            f"{check['sharding_after']}: checked step") in second.stdout

    # A deliberately wrong resume: another seed (another shuffle and held-out split) is caught and named.
    params.update(max_steps=10, seed=7)
    third = run_trainer(tmp_path / "seed", params, nproc=2)
    assert third.returncode == 0, third.stderr[-3000:]
    check = next(r for r in _records(tmp_path / "seed") if r["kind"] == "resume_check")
    assert check["verdict"] == "differs" and check["from_step"] == 9, check
    assert "seed: 42 in the checkpoint, 7 now" in check["differs"]
    assert any(d.startswith("data: not the rows the checkpoint trained on") for d in check["differs"])
    assert "resume check: differs at step 9 (from step 9): seed: 42 in the checkpoint, 7 now" in third.stdout
