"""``model.compile: auto`` compiles where it pays (GPU runs long enough to pay back compiling) and says
why; an explicit setting is taken as given; the launcher warns only about an explicit compile on CPU.
(The GPU branch is a decision on the device type only: no GPU is needed or touched here.)"""

import pytest

from trainer.model import COMPILE_MIN_STEPS, choose_compile


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
