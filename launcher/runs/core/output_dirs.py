"""A run's ``output_dir`` is its own: the runs of this data dir that use the same folder on the same node
(its checkpoints, its export) for another workload. Two workloads in one folder mix their checkpoints:
each lists the other's, resumes from them, and says the other's step is its safe step.

A relative ``output_dir`` lies inside the run's own folder on the node, and one naming ``$FSDP_TUI_RUN_ID``
is a folder per run: neither is ever shared (:func:`trainer.wire.ckpt_owner.private_folder`). Another one
(``/``, ``~``, ``$VAR``, a bucket URL) is compared as the node will see it: the workload's own variables
expanded, ``$HOME`` as ``~`` (the node's home: the same user on the same host), slashes tidied; every
message shows the folder so expanded. Runs of the same workload (the same file; the same experiment where a
run has no file) share it on purpose: a relaunch, a resume, a sweep's variants.
``parameters.output_dir_shared: true`` says a workload shares it on purpose too.
"""

from __future__ import annotations

import contextlib
import fcntl
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from launcher.runs.core.store import RunStore, RunSummary
from launcher.workload.plan import RunPlan
from trainer.wire.ckpt_owner import RUN_ID_VAR, private_folder
from trainer.wire.ckpt_paths import expand_vars, url_scheme

HINT = ("give this workload an output_dir of its own, remove that run's record (fsdp-tui rm RUN), or set "
        "parameters.output_dir_shared: true to share the folder on purpose")


def node_view(output_dir: str, env_variables: Mapping[str, object], run_id: str) -> str:
    """``output_dir`` as the node will see it, for comparing and showing: the workload's variables and
    ``$FSDP_TUI_RUN_ID`` expanded (a variable of the node's own environment stays as written: the same on
    the same node), ``$HOME`` as ``~`` (the node's home), repeated and trailing slashes dropped."""
    text = expand_vars(output_dir.strip(), {**{k: str(v) for k, v in env_variables.items()}, RUN_ID_VAR: run_id})
    for home in ("${HOME}", "$HOME"):
        if text == home or text.startswith(home + "/"):
            text = "~" + text[len(home):]
    if url_scheme(text) is None:
        text = re.sub("/{2,}", "/", text)
    return text.rstrip("/") or "/"


def fixed_output_dir(plan: RunPlan) -> str | None:
    """The plan's ``output_dir`` as its node 0 will see it when other runs can name the same folder (not
    relative, no ``$FSDP_TUI_RUN_ID``), else ``None``; also ``None`` when the workload shares it on purpose."""
    params = plan.workload.parameters
    out = params.get("output_dir")
    if not isinstance(out, str) or not out or params.get("output_dir_shared") is True or private_folder(out):
        return None
    return node_view(out, plan.workload.env_variables, plan.run_id)


def _their_view(home: Path, run: RunSummary) -> str | None:
    """Another run's ``output_dir`` as its node saw it (``None``: a folder of its own); its recorded plan
    is read only when its text names a variable."""
    out = run.output_dir or ""
    if not out or private_folder(out):
        return None
    env: Mapping[str, object] = {}
    if "$" in out:
        from launcher.paths import run_dir
        from launcher.runs.core.layout import read_plan

        plan = read_plan(run_dir(home, run.run_id))  # as recorded: another run's plan is not validated again
        env = plan.env_variables if plan is not None else {}
    return node_view(out, env, run.run_id)


LOCK = "launch.lock"


@contextlib.contextmanager
def deciding(home: Path, plan: RunPlan):
    """Held while a launch into a fixed ``output_dir`` checks it and records its run: of two launches at
    the same moment, the second sees the first. Other launches take no lock."""
    if fixed_output_dir(plan) is None:
        yield
        return
    with open(Path(home) / LOCK, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _same_workload(run: RunSummary, plan: RunPlan, home: Path) -> bool:
    """The same workload file; where either run has none (or only its record's copy), the same experiment."""
    theirs = Path(run.workload_path) if run.workload_path else None
    records = Path(home).resolve() / "runs"
    if theirs is None or plan.source_file is None or records in theirs.resolve().parents:
        return run.experiment == plan.workload.experiment_name
    return theirs.resolve() == Path(plan.source_file).resolve()


@dataclass(frozen=True)
class OutputDirUsers:
    """The runs of other workloads (live or recorded) that use a plan's ``output_dir`` on its node 0."""

    folder: str
    """The ``output_dir`` as the node sees it."""
    host: str
    runs: tuple[RunSummary, ...]

    def words(self) -> str:
        """The folder, the node and the first three runs, in the words a launch refuses with."""
        named = ", ".join(f"{r.run_id} ({r.state.value}, experiment {r.experiment}"
                          + (f", {r.workload_path}" if r.workload_path else "") + ")" for r in self.runs[:3])
        more = f" and {len(self.runs) - 3} more" if len(self.runs) > 3 else ""
        return (f"{self.folder} on {self.host} is used by another workload's run: {named}{more}; two workloads "
                "in one folder mix their checkpoints")


def output_dir_users(home: Path, plan: RunPlan) -> str:
    """Words naming the runs of other workloads (live or recorded) that use this plan's ``output_dir`` on
    its node 0; empty when there are none."""
    users = users_of_output_dir(home, plan)
    return users.words() if users is not None else ""


def users_of_output_dir(home: Path, plan: RunPlan) -> OutputDirUsers | None:
    """The runs of other workloads that use this plan's ``output_dir`` on its node 0; ``None``: none."""
    out = fixed_output_dir(plan)
    if out is None or not (Path(home) / "runs.db").exists():
        return None
    host = plan.nodes[0].host_display
    store = RunStore(home)
    candidates = {r.run_id: r for r in store.using_output_dir(out) + store.output_dirs_spelled_otherwise()}
    others = [r for r in candidates.values()
              if r.run_id != plan.run_id and r.hosts[:1] == (host,)
              and _their_view(home, r) == out and not _same_workload(r, plan, home)]
    return OutputDirUsers(out, host, tuple(others)) if others else None
