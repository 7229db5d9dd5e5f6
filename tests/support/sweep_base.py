"""The workload the sweep tests sweep over: the built-in trainer on 2 CPU processes, 4 steps."""

SWEEP_BASE = """\
experiment_name: sweep-test
compute: {accelerator_type: CPU, procs_per_node: 2, num_accelerators: 2}
parameters:
  model_name: builtin:tiny-llama
  dataset_name: builtin:tiny-alpaca
  output_dir: outputs
  max_steps: 4
"""
"""Seven lines: a ``sweep:`` section written after it starts at line 8."""
