"""A run's ``output_dir`` is its own: the runs of this data dir that use the same folder on the same node
(its checkpoints, its export) for another workload. Two workloads in one folder mix their checkpoints:
each lists the other's, resumes from them, and says the other's step is its safe step.

A relative ``output_dir`` lies inside the run's own folder on the node and is never shared; an absolute
one (``/``, ``~``, ``$VAR``, a bucket URL) is shared by every run that names it. Runs of the same workload
(the same file; the same experiment where a run has no file) share it on purpose: a relaunch, a resume,
a sweep's variants. ``parameters.output_dir_shared: true`` says a workload shares it on purpose too.
"""

from __future__ import annotations

import contextlib
import fcntl
from pathlib import Path

from launcher.runs.core.store import RunStore, RunSummary
from launcher.workload.plan import RunPlan

HINT = ("give this workload an output_dir of its own, remove that run's record (fsdp-tui rm RUN), or set "
        "parameters.output_dir_shared: true to share the folder on purpose")


def fixed_output_dir(plan: RunPlan) -> str | None:
    """The plan's ``output_dir`` when other runs can name the same folder (not relative), else ``None``;
    also ``None`` when the workload shares it on purpose."""
    params = plan.workload.parameters
    out = params.get("output_dir")
    if not isinstance(out, str) or not out or params.get("output_dir_shared") is True:
        return None
    return (out.rstrip("/") or "/") if out.startswith(("/", "~", "$")) or "://" in out else None


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


def output_dir_users(home: Path, plan: RunPlan) -> str:
    """Words naming the runs of other workloads (live or recorded) that use this plan's ``output_dir`` on
    its node 0; empty when there are none."""
    out = fixed_output_dir(plan)
    if out is None or not (Path(home) / "runs.db").exists():
        return ""
    host = plan.nodes[0].host_display
    others = [r for r in RunStore(home).using_output_dir(out)
              if r.run_id != plan.run_id and r.hosts[:1] == (host,) and not _same_workload(r, plan, home)]
    if not others:
        return ""
    named = ", ".join(f"{r.run_id} ({r.state.value}, experiment {r.experiment}"
                      + (f", {r.workload_path}" if r.workload_path else "") + ")" for r in others[:3])
    more = f" and {len(others) - 3} more" if len(others) > 3 else ""
    return (f"{out} on {host} is used by another workload's run: {named}{more}; two workloads in one folder "
            "mix their checkpoints")
