"""The workload, pure: YAML text -> validated ``Workload`` -> per-node ``RunPlan``.

No I/O beyond reading the workload file, no subprocess, no asyncio: :func:`plan_file` in
``launcher.workload.load`` is the one entry that ``run``, ``doctor``, the app and the editor use.
"""
