"""The vocabulary the trainer and the launcher share: what travels between a job's nodes and the
operator's machine, and the rules both sides apply to the same files.

- ``protocol.py``: the metrics wire format (one JSON line per record) and the variables the launcher sets;
  ``reporter.py`` writes it from any script (no torch); ``samples.py``: the samples file's format.
- ``config.py``: the built-in trainer's parameters (pydantic), so the launcher validates ``parameters``
  with the very model the trainer reads; ``data_config.py`` the data's sections, ``section.py`` their base.
- ``ckpt_layout.py``: the checkpoints' layout and when one is whole; ``ckpt_paths.py``: where they lie (the
  node agent carries a copy of both).
- ``data_files.py`` and ``formats.py``: local data files read with each row's line, and what each format
  needs of a row (``validate`` applies both to a workload's dataset, reading the first rows through
  ``data_peek.py``).
- ``model_family.py`` and ``lora_targets.py``: what a model folder's ``config.json`` and weight files say.
- ``cross_entropy.py``: how the loss meets the vocabulary (the chunk a chunked loss holds, when ``auto``
  chunks, what a family does to its logits), for the trainer and the memory prediction alike.
- ``nettest_pairs.py`` and ``nettest_budget.py``: the interconnect self-test's pairs and time budget,
  shared by the node script and the verdict.
- ``startup.py``: a process's heavy imports without the cyclic garbage collector (the trainer's ranks, the
  owner's first use of MLflow).

May import: the standard library, pydantic, and modules of this room. Never torch, transformers,
datasets, peft or anything else of ``trainer`` (``lint-imports`` checks it): the operator's side imports
this room, and only this room of the trainer. This ``__init__`` imports nothing: the node agent ships
the checkpoint rules alone, under this package name.
"""
