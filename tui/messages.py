"""The app's messages: what a screen asks of the app, and what a screen's worker hands back to its screen.

Screens never call the app's own methods: they post one of the first kind (they bubble up from the
screen to the app, whose ``@on`` handlers in :mod:`tui.app` do the work), so what a screen may ask is
written here, typed, once. Workers never touch widgets and never call back into the loop by hand: a
worker posts its result (the second kind, which does not bubble) to its own screen, which draws it
on the app's loop. A result that arrives after its screen closed is dropped with the screen.

Names are past-tense events (``RunChosen``) or the data a worker read (``RunsRead``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from textual.message import Message

if TYPE_CHECKING:
    from launcher.api.nettests import Measured
    from launcher.api.runs import RankReport, RunKind, RunStats, RunSummary
    from launcher.api.sweeps import SweepRecord
    from launcher.workload.complete import Sources
    from launcher.workload.fixes import Fix
    from launcher.workload.overrides import Override
    from launcher.workload.plan import RunPlan
    from launcher.workload.problems import Problem


# -- asked of the app (they bubble from the screen that posts them to the app) -------------------------


@dataclass
class RunChosen(Message):
    """Open the run monitor of ``run_id`` (replaying its record, then following it)."""

    run_id: str


@dataclass
class SweepChosen(Message):
    """Open the view of sweep ``sweep_id``."""

    sweep_id: str


@dataclass
class WorkloadChosen(Message):
    """Open the workload file at ``path`` in the editor."""

    path: Path


@dataclass
class LaunchAsked(Message):
    """Launch the workload at ``path`` as written, with ``overrides`` (``--set`` words) on top."""

    path: Path
    overrides: list[str] = field(default_factory=list)


@dataclass
class RelaunchAsked(Message):
    """A new run doing what ``run_id`` did (its recorded workload), with ``overrides`` on top."""

    run_id: str
    overrides: list[Override] = field(default_factory=list)


@dataclass
class ResumeAsked(Message):
    """A new run of ``run_id``'s workload from its whole checkpoint ``checkpoint`` (as ``fsdp-tui resume``)."""

    run_id: str
    checkpoint: str


@dataclass
class SweepLaunchAsked(Message):
    """Every variant of the ``sweep:`` section of the workload at ``path``, then the sweep's view."""

    path: Path


@dataclass
class NettestAsked(Message):
    """A quick interconnect test of the nodes of the workload at ``path`` (with ``overrides``)."""

    path: Path
    overrides: list[str] = field(default_factory=list)


@dataclass
class StoreFoundDamaged(Message):
    """The run store cannot be read: the app says so (once) and offers the repair. ``text`` names the file
    and the way out."""

    text: str


# -- workers' results (posted by a screen's worker to its own screen; they do not bubble) -------------


@dataclass
class RunsRead(Message, bubble=False):
    """The home screen's lists, read off the loop: the newest runs (at most ``HOME_RUNS``, newest first;
    those matching ``matching`` when the store held more) and every sweep. The first look posts the runs
    alone first (``sweeps`` and ``kinds`` ``None``: not read yet), then everything."""

    runs: list[RunSummary]
    sweeps: list[SweepRecord] | None
    kinds: dict[str, RunKind] | None = field(default_factory=dict)
    """Each run's kind by its id (a probe, a nettest, a resume that trained nothing)."""
    total: int = 0
    """Runs the store keeps, all of them."""
    matching: str = ""
    """The words the store matched the runs against (the filter, asked of the store when it keeps more
    runs than the window); empty: ``runs`` is the newest of all."""


@dataclass
class LostNodesReaped(Message, bubble=False):
    """Nodes lost in earlier runs answered again and their leftover processes were stopped: one line each."""

    lines: list[str]


@dataclass
class NetworkKnown(Message, bubble=False):
    """The newest interconnect test of a run's nodes, in words for the monitor's header."""

    text: str


@dataclass
class ContinuedKnown(Message, bubble=False):
    """The run another run's checkpoint continues (``continues run X from step N``), for the monitor."""

    text: str


@dataclass
class SamplesRead(Message, bubble=False):
    """A run's samples as lines to draw, with the line that says what they are."""

    said: str
    lines: list[str]


@dataclass
class RankTimesRead(Message, bubble=False):
    """Every rank's step times over the recent steps, as the ranks screen draws them."""

    report: RankReport


@dataclass
class ComparisonRead(Message, bubble=False):
    """The compared runs' numbers; a sweep's ``state`` and ``detail``; for marked runs, their workloads'
    ``diff`` (``None`` for a sweep)."""

    rows: list[RunStats]
    state: str
    detail: str
    diff: str | None


@dataclass
class StoreRepairAnswered(Message, bubble=False):
    """What the repair did (or why it did not run), in words; ``repaired`` once the store was rebuilt."""

    text: str
    repaired: bool


@dataclass
class SourcesLoaded(Message, bubble=False):
    """Host aliases, secret names and folders for the editor's completion."""

    sources: Sources


@dataclass
class Validated(Message, bubble=False):
    """The result of one validation pass of the editor's buffer version ``version``."""

    version: int
    problems: list[Problem]
    fixes: list[Fix | None]
    plan_text: str
    plan: RunPlan | None = None
    """The plan when the buffer is valid (the hosts' glance is checked from it)."""


@dataclass
class Reached(Message, bubble=False):
    """Each node's answer to a cheap connect, for the hosts ``key`` names."""

    key: tuple
    lines: str


@dataclass
class NettestProgress(Message, bubble=False):
    """A state the interconnect test's run went through, in words."""

    text: str


@dataclass
class NettestDone(Message, bubble=False):
    """An interconnect test's figures (``None`` when it measured nothing) and its problems."""

    run_id: str
    measured: Measured | None
    nodes: tuple[str, ...]
    problems: tuple[str, ...]
