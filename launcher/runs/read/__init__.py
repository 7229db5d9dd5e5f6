"""The readers of a run's records: the follower that replays a run's events, logs and metrics as they
grow (the app, ``watch``, ``logs``), the monitor's view, ``show``'s report, comparisons, checkpoint
listing and export through the run's backend, and clone. A reader writes no record; a reader that finds a
live run without an owner starts one (:func:`launcher.runs.core.ownership.spawn_owner`) rather than
writing itself.

It may import ``launcher.runs.core``, the Backend protocol and its registry (checkpoints are asked of the
run's nodes), the workload, events and paths; never ``launcher.runs.owner`` (the writers), the doors or
the sweeps.
"""
