"""Checkpoints of a run: DCP saves and loads, where they go, and the proof that a resume continued.

- ``checkpoint.py``: the checkpointer (sync and async saves, resume, pruning, the Hugging Face export) and
  the application state DCP saves (weights, optimiser, schedule, :class:`trainer.loop.state.TrainState`).
- ``run.py``: a run's checkpoints as one part (what the steps save, what the job resumes), a loaded
  checkpoint's state fitted to this run (another world size, batch or length).
- ``inference.py``: a whole checkpoint loaded in one plain process (``python -m trainer.export``).
- ``store.py``: a folder or a bucket (fsspec); ``write.py``: each rank's share of the writes;
  ``spread.py``: a whole checkpoint sent from node 0 to the nodes that lack one before a resume.
- ``resume_check.py`` and ``resume_facts.py``: what a resume must continue (data order, losses,
  schedule), recorded at a save and compared at the first step after a resume.

May import: torch, ``trainer.wire``, ``trainer.parallel``, ``trainer.data`` (the order),
``trainer.loop.optim``; never LoRA (it builds on this room).
"""
