"""What each step does and what runs around the steps.

- ``train.py``: one step (micro-batches, token-weighted loss over ranks, clipping) and evaluation.
- ``loss.py``: the cross-entropy a chunk of positions at a time inside the output layer's forward (the full
  logits never exist), and the run's choice of it (``model.cross_entropy``).
- ``steps.py``: the run's steps in order: logging, evaluation, samples and checkpoints at their cadence, the
  stop on request, the final save; ``parts.py``: what the steps are given, as types (the checkpoints by a
  protocol); ``state.py``: the :class:`TrainState` a checkpoint keeps (step, run length, data position).
- ``optim.py``: AdamW (weight-decay groups) and the learning-rate schedule.
- ``metrics.py``: what rank 0 reports (progress lines, metrics records through ``trainer.wire.protocol``).
- ``samples.py``: the model's answers to a few prompts at a cadence.
- ``stop_signal.py``: a checkpoint and a clean stop on a scheduler's warning.

May import: torch, ``trainer.wire``, ``trainer.data``, ``trainer.model``, ``trainer.parallel``; never
checkpoints or LoRA (a checkpointer reaches the steps as an object).
"""
