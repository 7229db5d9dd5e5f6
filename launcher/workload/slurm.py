"""``compute.slurm`` as SLURM reads it: time limits, node and GPU counts, raw ``#SBATCH`` lines. Pure."""

from __future__ import annotations

import math
import re

from launcher.words import plural
from launcher.workload.machines import Slurm
from launcher.workload.model import Workload

_TIME = re.compile(r"^(?:(?P<d>\d+)-(?P<dh>\d+)(?::(?P<dm>\d+)(?::(?P<ds>\d+))?)?"
                   r"|(?P<h>\d+):(?P<hm>\d+):(?P<hs>\d+)|(?P<m>\d+)(?::(?P<ms>\d+))?)$")
_OPTION = re.compile(r"^--?[A-Za-z][A-Za-z0-9-]*(?:=\S+| [^\s-]\S*)?$")
_SHELL = set("$`;|&<>\\\"'(){}\n\r")
TIME_FORMS = "minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS"
OWNED_OPTIONS = {"--nodes", "-N", "--ntasks", "-n", "--ntasks-per-node", "--output", "-o", "--error", "-e",
                 "--signal", "--job-name", "-J", "--chdir", "-D", "--parsable", "--wrap"}
"""Options the backend sets itself (the node contract depends on them): not accepted in ``extra_sbatch``."""
JOB_SHAPE_OPTIONS = {
    "--array": "an array job runs several jobs under one id that fsdp-tui would not follow: use a sweep "
               "(sweep:) for variants, one run each",
    "-a": "an array job runs several jobs under one id that fsdp-tui would not follow: use a sweep (sweep:) "
          "for variants, one run each",
    "--het-job": "a heterogeneous job breaks the one-task-per-node contract: one run is one homogeneous job",
    "--dependency": "fsdp-tui submits each attempt itself and waits for it: a dependency could hold it "
                    "forever; start the run when what it depends on has ended",
    "-d": "fsdp-tui submits each attempt itself and waits for it: a dependency could hold it forever; start "
          "the run when what it depends on has ended",
    "--requeue": "set compute.slurm.requeue: true instead (a requeue is then a new attempt of the run)",
    "--no-requeue": "jobs are submitted --no-requeue already (compute.slurm.requeue: false, the default)",
    "--export": "the job's environment comes from sbatch's (the node contract, and secrets, which are never "
                "written to the script): use env_variables for more variables",
}
"""Options that change what a job is (several jobs, a wait on another job, a restart under the same
attempt): refused with the way to say it."""


def time_minutes(value: str | int) -> float:
    """A SLURM ``--time`` in minutes; ``ValueError`` names the accepted forms."""
    text = str(value).strip()
    m = _TIME.match(text)
    if not m:
        raise ValueError(f"'{value}' is not a SLURM time limit (use {TIME_FORMS})")
    g = {k: int(v) for k, v in m.groupdict().items() if v is not None}
    if "d" in g:
        minutes = g["d"] * 1440 + g["dh"] * 60 + g.get("dm", 0) + g.get("ds", 0) / 60
    elif "h" in g:
        minutes = g["h"] * 60 + g["hm"] + g["hs"] / 60
    else:
        minutes = g["m"] + g.get("ms", 0) / 60
    if minutes <= 0:
        raise ValueError(f"'{value}' is no time at all")
    return minutes


def time_option(s: Slurm, timeout_minutes: float | None) -> str | None:
    """What ``--time`` gets: ``slurm.time`` as written, else ``timeout_minutes`` rounded up."""
    if s.time is not None:
        return str(s.time).strip()
    if timeout_minutes is not None:
        return str(max(1, math.ceil(timeout_minutes)))
    return None


def sbatch_line_problem(line: str) -> str | None:
    """Why a raw ``extra_sbatch`` entry cannot go into the batch script as it is (``None``: it can)."""
    text = line.strip()
    if text.startswith("#SBATCH"):
        text = text[len("#SBATCH"):].strip()
    if any(c in _SHELL for c in text):
        return "shell characters ($ ` ; | & < > quotes, brackets) have no place in an #SBATCH line"
    if not _OPTION.match(text):
        return "expected one option such as --mail-type=END"
    name = re.split(r"[= ]", text, maxsplit=1)[0]
    if name in JOB_SHAPE_OPTIONS:
        return f"{name} is not accepted: {JOB_SHAPE_OPTIONS[name]}"
    if name in OWNED_OPTIONS:
        return f"{name} is set by fsdp-tui itself (one task per node, its own log files and signal)"
    return None


def sbatch_option(line: str) -> str:
    """An ``extra_sbatch`` entry as the option text after ``#SBATCH``."""
    text = line.strip()
    return text[len("#SBATCH"):].strip() if text.startswith("#SBATCH") else text


def findings(w: Workload, s: Slurm, num_nodes: int, per_node: int, kind: str):
    """``(path, severity, message, hint)`` for ``compute.slurm`` (``s``); the caller makes them findings."""
    p = ("compute", "slurm")
    out = []
    if w.compute.hosts:
        out.append((("compute", "hosts"), "error", "compute.hosts and compute.slurm exclude each other: a SLURM "
                    "job gets its nodes from the scheduler", "remove hosts, or remove slurm to use SSH hosts"))
    if s.login != "local":
        from launcher.workload.hosts import parse_host

        try:
            parse_host(s.login)
        except ValueError as err:
            out.append(((*p, "login"), "error", str(err), "an ~/.ssh/config alias, user@host, or local"))
    if s.time is not None:
        try:
            time_minutes(s.time)
        except ValueError as err:
            out.append(((*p, "time"), "error", str(err), None))
    if s.nodes is not None and w.compute.num_accelerators is not None and s.nodes != num_nodes:
        out.append(((*p, "nodes"), "error", f"{plural(s.nodes, 'node')}, but {plural(w.compute.num_accelerators, 'accelerator')} "
                    f"at {per_node} per node make {num_nodes}", "keep one of the two"))
    if s.gpus_per_node is not None and kind == "gpu" and s.gpus_per_node != per_node:
        out.append(((*p, "gpus_per_node"), "error", f"{plural(s.gpus_per_node, 'GPU')} per node, but the run starts "
                    f"{plural(per_node, 'process')} per node", "leave it out: it follows accelerator_type"))
    if s.gpus_per_node is not None and kind == "cpu":
        out.append(((*p, "gpus_per_node"), "warning", "GPUs asked of SLURM for a CPU run", "leave it out"))
    for i, line in enumerate(s.extra_sbatch):
        why = sbatch_line_problem(line)
        if why is not None:
            out.append(((*p, "extra_sbatch", i), "error", why, "one option per entry, e.g. '--mail-type=END'"))
    if s.time is not None and w.timeout_minutes is not None:
        try:
            if time_minutes(s.time) < w.timeout_minutes:
                out.append(((*p, "time"), "warning", f"each job ends at {s.time}, before timeout_minutes "
                            f"({w.timeout_minutes:g}): the built-in trainer checkpoints and a new job resumes",
                            None))
        except ValueError:
            pass
    return out
