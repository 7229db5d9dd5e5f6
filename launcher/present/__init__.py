"""The front ends' presentation room: the door's typed values (``launcher.api``) turned into text for a
person: table cells and columns, lines, bars, the words a pane ends with. Pure: every function takes values
and answers text (or the rows a table or chart draws), reads no file, asks no node and holds no state but
what a caller hands it.

The app (``tui/``) and the headless commands (``launcher/cli/``) import these modules directly; the door
never hands them out (``tests/api/test_door_names.py``). One concept a module:

- :mod:`.comparison`: runs side by side: the columns, a cell, and the table, CSV, Markdown and JSON text.
- :mod:`.samples`: a run's samples as people read them: each prompt's answers by step, two sides compared.
- :mod:`.stop_output`: what a stop makes a job print, folded away in the panes, and the line they end with.
- :mod:`.checkpoints`: a checkpoint listing's "complete" column.
- :mod:`.nettest`: an interconnect test's headline, its one-line summary, its pairs of nodes as lines and as bars.
- :mod:`.plan_preview`: what a dry run and the editor say of a plan's memory and cost.
- :mod:`.gpus`: whose a process holding GPU memory is.
- :mod:`.relaunch`: why a relaunch waits while a SLURM job of the run may still be running.
- :mod:`.run_files`: where a run's files are, and where they stay once its record is forgotten.

What the core also says (a report's duration, a disk's free bytes, a bandwidth in a verdict) is a word rule
of :mod:`launcher.words`, which both sides import. Import rules (``pyproject.toml``): this room sits between
the front ends and the door; it imports the standard library and ``launcher.words``, and the door's types
only for type checking; never a room behind the door, asyncio, subprocess, SSH, MLflow, Textual, rich or
torch."""
