"""The run's owner: the detached supervisor (``python -m launcher.runs.owner.supervisor``, or started ahead of
its run by a launch and handed the run: ``warm.py``) and what only it runs: the run policy against the backend, following each node, writing the run's records (log mirrors,
metrics, events, state), the stall and idle-GPU watches and MLflow tracking. One owner per run holds its lock; nobody
else writes these records.

It may import ``launcher.runs.core``, the Backend protocol and its registry (``launcher.backends.base``,
``launcher.backends.registry``), the doctor's preflight, the workload, events, paths and secrets; never
``launcher.runs.read``, the doors (``launch``, ``leftovers``) or ``launcher.runs.sweeps``.
"""
