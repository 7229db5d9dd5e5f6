"""Parameter sweeps: the sweep's record (``sweeps/<id>/``), its driver (a detached process that starts
the variants as ordinary runs through :func:`launcher.runs.launch.start_run` and alone writes the sweep's
record) and the control the app and the CLI call (start, cancel).

It may import the doors (``launcher.runs.launch``), ``launcher.runs.core`` and the owner's MLflow sink
(the sweep's parent MLflow run); the readers and the owners of its runs never import it.
"""
