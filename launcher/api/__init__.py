"""The one door from the front ends to the core: what the app (``tui/``) and the headless commands
(``launcher/cli/``) may ask of runs, checkpoints, sweeps, nodes, interconnect tests and the doctor.

A front end holds a :class:`Client` for its data dir and asks its rooms::

    client = Client(home)
    outcome = client.runs.launch(Path("train.yaml"), ["parameters.lr=1e-4"])
    run_id = client.runs.find("0a3f")          # one clear line when no run, or many, match

The rooms (one module each, every public method documented, every reply typed: no bare dicts):

- :mod:`.runs`: find a run by a prefix of its id, list and read runs (record, view, report, comparison,
  samples, stacks, last safe step), follow one, and launch, relaunch, resume, cancel, adopt.
- :mod:`.launching`: the launch itself and its typed outcome, written once (``runs.launch`` calls it).
- :mod:`.run_files`: a run's files: its node logs, its folders on the nodes (clean), forgetting it (rm).
- :mod:`.checkpoints`: a run's checkpoints where their whole copies are: list, delete, export.
- :mod:`.sweeps`: parameter sweeps: plan, start, list, show, cancel, resume, adopt.
- :mod:`.nodes`: what is left on the nodes: leftovers of lost runs reaped, GPU memory holders, host keys,
  a shell on a run's node.
- :mod:`.nettests`: interconnect tests: run one, the kept ones as typed records.
- :mod:`.doctor`: preflight a workload's nodes, time its first steps.
- :mod:`.records`: the data dir itself: the run store's repair, secrets, settings and notifications.

Import rules (``pyproject.toml``, checked by ``lint-imports``): ``launcher.api`` sits between the front ends
and the rest of the launcher: it may import every room of ``launcher`` (``runs``, ``backends`` through their
registry, ``doctor``, ``nettest``, ``notify``, ``eject``, ``workload``, ``events``, ``paths``...) and
``trainer``'s torch-free vocabulary; never ``launcher.cli``, ``launcher.present`` or ``tui``. The front ends
import only ``launcher.api``, ``launcher.present`` (the door's values as text), ``launcher.workload``,
``launcher.events``, ``launcher.paths`` and ``launcher.words``.

The rooms hand out types, errors and constants, and the few functions the core computes with; never
presentation (``tests/api/test_door_presentation.py``).

Nothing heavy at import time: ``import launcher.api`` loads no room; each room is imported on first use.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from launcher.api.checkpoints import Checkpoints
    from launcher.api.doctor import Doctor
    from launcher.api.nettests import Nettests
    from launcher.api.nodes import Nodes
    from launcher.api.records import Records
    from launcher.api.run_files import RunFiles
    from launcher.api.runs import Runs
    from launcher.api.sweeps import Sweeps

__all__ = ["Client"]


class Client:
    """The core as one data dir's front end sees it. Owns nothing but ``home``: every room it hands out
    reads and writes that data dir's records, so two clients of one data dir see the same runs."""

    def __init__(self, home: Path | None = None) -> None:
        from launcher.paths import data_home

        self.home = Path(home) if home is not None else data_home()
        """The data dir (``$FSDP_TUI_HOME`` or the platform's data folder unless given)."""

    @cached_property
    def runs(self) -> Runs:
        """Find, list, read, follow, launch, relaunch, resume, cancel and adopt runs."""
        from launcher.api.runs import Runs

        return Runs(self.home)

    @cached_property
    def run_files(self) -> RunFiles:
        """A run's node logs, one rank's output, its folders on the nodes."""
        from launcher.api.run_files import RunFiles

        return RunFiles(self.home)

    @cached_property
    def checkpoints(self) -> Checkpoints:
        """A run's checkpoints where their whole copies are: list, delete, export."""
        from launcher.api.checkpoints import Checkpoints

        return Checkpoints(self.home)

    @cached_property
    def sweeps(self) -> Sweeps:
        """Parameter sweeps: plan, start, list, cancel, resume, adopt."""
        from launcher.api.sweeps import Sweeps

        return Sweeps(self.home)

    @cached_property
    def nodes(self) -> Nodes:
        """Leftovers of lost runs, GPU memory holders, host keys, a shell on a run's node."""
        from launcher.api.nodes import Nodes

        return Nodes(self.home)

    @cached_property
    def nettests(self) -> Nettests:
        """Interconnect tests: run one, the kept ones as typed records, figures judged."""
        from launcher.api.nettests import Nettests

        return Nettests(self.home)

    @cached_property
    def doctor(self) -> Doctor:
        """A workload's nodes checked before a launch; a probe run's estimate."""
        from launcher.api.doctor import Doctor

        return Doctor(self.home)

    @cached_property
    def records(self) -> Records:
        """The data dir: the run store's repair, secrets, a sample notification, eject."""
        from launcher.api.records import Records

        return Records(self.home)
