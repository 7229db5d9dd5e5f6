"""The app's widgets: each owns its ``DEFAULT_CSS`` and the messages it posts (``NodeOverview.NodeChosen``,
``ProblemsList.Jump``...); screens compose and wire them. They draw what they are given (a ``RunView``, rows
of ``RunStats``, run summaries) and read nothing themselves: no worker, no store, no node.

- A run live: ``node_log`` (a node's pane, batched and bounded), ``log_view`` and ``kept_lines`` (the log
  widget under it), ``metrics`` (sparklines and memory gauges), ``node_overview`` (a row per node).
- Lists and comparisons: ``row_table`` (the table the others build on), ``runs_table``, ``sweeps_table``,
  ``comparison_table``, ``comparison_plots``.
- The editor: ``completion`` (the YAML area and its completion menu), ``problems``.
- Chrome: ``header``, ``footer``.
"""
