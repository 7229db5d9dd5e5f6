"""The app's screens and modals, one per module, and the components a screen owns.

- Full screens: ``home`` (workloads, runs, sweeps), ``editor``, ``monitor`` (one run live: it composes
  ``monitor_views.MonitorViews``, ``monitor_lines.SummaryLines`` and ``stacks.StackGathering``),
  ``checkpoints``, ``sweep`` (a sweep, or marked runs compared), ``samples``, ``ranks``, ``gpus``, ``nettest``.
- Modals: ``confirm``, ``delete_run``, ``unsaved``, ``templates``, ``command_bar``, ``rank_picker``,
  ``rank_log``, ``stacks``, ``store_damaged``.
- Helpers: ``workload_files`` (the workload files the app lists), ``from_worker`` (a worker's result drawn
  only while its screen stands).

Rules: a screen asks the app through :mod:`tui.messages` (never its methods), reads the app through
``getters.app(AppBase)`` and the core through the app's ``client`` (:mod:`launcher.api`); a worker posts its
result to its screen. Import rules (``pyproject.toml``, checked by ``lint-imports``): ``launcher.api`` and the
pure ``launcher.workload``, ``events``, ``paths``, ``words``; never a room behind the door.
"""
