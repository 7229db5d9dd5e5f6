"""``model.compile: auto`` compiles where it pays (GPU runs long enough to pay back compiling) and says
why; an explicit setting is taken as given; the launcher warns only about an explicit compile on CPU.
(The GPU branch is a decision on the device type only: no GPU is needed or touched here.)"""

import pytest

from trainer.model.build import COMPILE_MIN_STEPS, choose_compile


@pytest.mark.parametrize("setting, device, steps, compiled, note", [
    ("auto", "cpu", 10_000, False, "compile: off (auto: CPU"),
    ("auto", "cuda", COMPILE_MIN_STEPS - 1, False, f"fewer than {COMPILE_MIN_STEPS}"),
    ("auto", "cuda", COMPILE_MIN_STEPS, True, "compile: on (auto: GPU"),
    (True, "cpu", 5, True, None),
    (False, "cuda", 10_000, False, None),
])
def test_auto_compiles_long_gpu_runs_only(setting, device, steps, compiled, note):
    got, line = choose_compile(setting, device, steps)
    assert got is compiled
    assert (line is None) if note is None else (note in line)


@pytest.mark.parametrize("value, warned", [("auto", False), (True, True), (False, False)])
def test_launcher_warns_only_for_an_explicit_compile_on_cpu(tmp_path, value, warned):
    from launcher.workload.load import validate_text

    text = ("experiment_name: c\ncompute:\n  accelerator_type: CPU\n  num_accelerators: 2\n"
            "parameters:\n  model_name: builtin:tiny-llama\n  dataset_name: builtin:tiny-alpaca\n"
            f"  output_dir: out\n  model:\n    compile: {str(value).lower()}\n")
    problems = validate_text(text, str(tmp_path / "w.yaml")).problems
    assert any("model.compile" in p.format() for p in problems) is warned, [p.format() for p in problems]


def test_compiled_blocks_stay_few_graphs_over_lengths_packing_batch_sizes_and_eval(tiny_model_dir, monkeypatch):
    """The trainer's own compile path (``aot_eager`` for inductor: the same dynamo graphs and guards,
    no code generation) under full activation checkpointing: new lengths, a packed batch (mask), another
    batch size and an eval add at most the mask variant, far from dynamo's recompile limit."""
    import torch
    import torch.distributed as dist

    from tests.support.trainer.run import alpaca_examples, free_port
    from trainer.data.rows import collate, pack, pad_rows
    from trainer.loop import train
    from trainer.model import build as model
    from trainer.model.source import ModelSource
    from trainer.wire.config import ModelConfig

    torch._dynamo.reset()
    net = model.load_model(ModelSource.resolve(str(tiny_model_dir)), ModelConfig(from_scratch=True), seed=0)
    model.apply_activation_checkpointing(net, "full")
    model.apply_compile(net, backend="aot_eager")
    watch = model.CompileWatch()
    examples, pad = alpaca_examples(tiny_model_dir, 36, 128, mask_prompt=True)

    def step(rows) -> None:
        batch = collate(rows, pad)
        train.micro_step(net, batch, train.shifted_labels(batch, "cpu"), "cpu", 1.0)

    step(pad_rows(examples[0:4], pad))
    assert watch.news(1).startswith("compile: 1 graph compiled by step 1")
    step(pad_rows(examples[4:8], pad))  # other lengths
    assert watch.news(2) is None
    step(pack(examples[12:30], 128, pad)[:2])  # packed rows: a mask
    step(pad_rows(examples[30:32], pad))  # another batch size
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    try:
        train.evaluate(net, [collate(pad_rows(examples[32:36], pad), pad)], "cpu", with_exact_match=False)
    finally:
        dist.destroy_process_group()
    assert model.CompileWatch.graphs() <= 2 < model.CompileWatch.limit()
    news = watch.news(5)
    assert news is None or "recompiled" in news
