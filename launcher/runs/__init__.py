"""Runs: each launch has one owner, a detached supervisor process that alone writes the run's records;
everyone else (the app, the headless commands, the sweep driver) reads those records.

The rooms say that design (each ``__init__`` says what lives there and what it may import):

- ``core/``: what both sides share: the run store, where a record's files lie and how they are read, the
  ownership lock, and the pure decoding of a node's output (line splitting, the sanitizer, triage).
- ``owner/``: everything only a run's owner runs: the supervisor, the run policy, following each node,
  writing the records, stall watch, MLflow tracking.
- ``read/``: the readers of a run's records: the follower the app and ``watch`` use, the monitor's view,
  reports, comparisons, checkpoint listing, clone. Readers never import ``owner/``.
- ``sweeps/``: a sweep's driver (a detached process that starts ordinary runs), its record, its control.
- ``launch.py``, ``leftovers.py``, ``gpu_holders.py``, ``cleanup.py``: what :mod:`launcher.api` (the front
  ends' one door) calls: start, adopt, cancel a run; reap what runs left on nodes lost in earlier runs; list
  and stop what holds GPU memory after our runs; remove a run's folders. They start an owner
  (``python -m launcher.runs.owner.supervisor``), never run one in-process.

Import rules (``pyproject.toml``, checked by ``lint-imports``): sweeps > launch, leftovers > owner | read
(independent of each other) > core.
"""
