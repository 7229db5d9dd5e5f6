"""The built-in FSDP2 trainer for Hugging Face causal LMs (runs on the nodes, under torchrun).

The rooms (each ``__init__`` says what lives there and what it may import):

- ``wire/``: the vocabulary the trainer shares with the launcher: the metrics and samples file formats,
  the checkpoint layout, the parameters (``TrainerConfig``), what a data file and a model folder hold,
  the interconnect self-test's plan. Standard library and pydantic only: the operator's side imports it
  and never anything else of ``trainer``.
- ``data/``: examples into token rows (formats, chat templates, prompt masking, packing), the rows of a
  run and their resumable order; ``tiny_alpaca.jsonl`` is the built-in dataset.
- ``model/``: the Hugging Face model built without weights and filled shard by shard, its attention
  (packed rows, masks), the output layer on learned positions, a mixture-of-experts router loss.
- ``loop/``: what each step does and what runs around the steps: the step, the optimiser, metrics,
  samples, the stop on a scheduler's warning.
- ``ckpt/``: DCP checkpoints (a folder or a bucket, each rank's writes, one spread to the nodes that
  lack it) and the proof that a resume continued the run.
- ``lora/``: LoRA adapters (PEFT), their exports, QLoRA's 4-bit base.
- ``nettest/``: the interconnect self-test's node script (standard library and torch only).
- at the top: the entries (``__main__.py`` trains and only orchestrates, ``export.py`` exports a
  checkpoint, ``assets.py`` builds the built-in model), ``job.py`` (the run's parts assembled from the
  rooms), ``parallel.py`` (the process group and FSDP2 sharding) and ``flight.py`` (torch's flight
  recorder, dumped on request: any script may use it).

Import rules (``pyproject.toml``, checked by ``lint-imports``): ``wire`` imports no torch and nothing of
``trainer`` outside itself; nothing in ``trainer`` imports the operator's side.
"""
