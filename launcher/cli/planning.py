"""A workload file planned for a command, or said why not: how ``run``, ``doctor`` and ``nettest`` turn
FILE and its ``--set`` overrides into a plan, and what they print on the way (every override old -> new,
the errors at their file:line, and what to do)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

USAGE_ERROR = 2
"""The exit status for a workload that cannot be used as written: 1 means a run (or a check) failed."""


@dataclass(frozen=True)
class Verbs:
    """How a command says it did nothing with the file, as in ``FILE: not checked: ...``."""

    not_done: str
    """For an invalid or missing file (``not launched``)."""
    cannot: str
    """For a plan with blockers (``cannot run``)."""


def output_dir_warnings(planned) -> list:
    """The workload's ``output_dir`` used by another workload's runs of this data dir, as a warning at the
    key (``validate``, ``run --dry-run``; the launch itself refuses it)."""
    from launcher.api import Client
    from launcher.api.records import OUTPUT_DIR_HINT

    if planned.plan is None:
        return []
    users = Client().records.output_dir_users(planned.plan)
    return [] if users is None else [planned.result.problem(("parameters", "output_dir"), "warning", users.words(),
                                                            OUTPUT_DIR_HINT)]


def quarantine_warnings(planned) -> list:
    """The workload's hosts and spares this data dir has quarantined, as warnings at their lines."""
    from launcher.api import Client

    return Client().records.quarantine_problems(planned)


def plan_or_say(file: Path, overrides: list[str], verbs: Verbs, *, run_id: str | None = None,
                quiet: bool = True, blockers: bool = True, dry_run: bool = False):
    """The plan of ``file``, or ``None`` after printing to stderr why there is none. ``quiet``: print only
    the errors among the problems; ``blockers``: a plan that cannot run as it stands is none either
    (``run --dry-run`` still shows such a plan); ``dry_run``: also warn of what the launch would refuse."""
    from launcher.paths import data_home
    from launcher.workload.load import plan_file

    planned = plan_file(file, overrides, home=data_home(), run_id=run_id)
    for o in planned.result.overrides:
        print(f"--set {o.describe()}", file=sys.stderr)
    for problem in [*planned.problems, *(output_dir_warnings(planned) + quarantine_warnings(planned) if dry_run else [])]:
        if problem.is_error or not quiet:
            print(problem.format(), file=sys.stderr)
    if planned.plan is None and not file.is_file():
        print(f"{file}: {verbs.not_done}: there is no such file (check the path)", file=sys.stderr)
        return None
    if planned.plan is None:
        print(f"{file}: {verbs.not_done}: fix the errors above (fsdp-tui validate {file})", file=sys.stderr)
        return None
    if not blockers:
        return planned.plan
    for blocker in planned.plan.blockers:
        print(f"{file}: {verbs.cannot}: {blocker}", file=sys.stderr)
    return None if planned.plan.blockers else planned.plan
