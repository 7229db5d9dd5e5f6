"""What SLURM itself says about a job's end, read from its own words. Pure.

A run's logs show what the ranks saw, and a survivor's "connection closed by peer" is only the echo of a
node that died. SLURM knows which one went first: ``srun`` writes ``srun: error: n2: task 1: Killed`` into
the job's output (``slurm-<job>.out``), ``slurmstepd`` writes why it cancelled a step (``DUE TO TIME
LIMIT``, ``DUE TO NODE FAILURE``), ``sinfo`` lists the nodes that stopped responding, and ``sacct`` (where
accounting is on) each step's exit code. These parsers turn those lines into a :class:`Cause`: the node
that died first, named with SLURM's own line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from trainer.wire.ckpt_layout import ascii_int

_TASK = re.compile(r"^srun: error: (?P<node>[\w.-]+): tasks? (?P<tasks>[\d,-]+): (?P<what>.+?)\s*$")
_NODE_FAIL = re.compile(r"^srun: error: Node failure on (?P<node>[\w.-]+)")
_STEPD = re.compile(r"\*\*\* (?:JOB|STEP) [\d.+_]+ ON (?P<node>[\w.-]+) CANCELLED AT \S+(?: DUE TO (?P<why>[A-Z ]+?))?"
                    r"(?:,.*)? \*\*\*")
_OOM = re.compile(r"oom[-_ ]kill|Out Of Memory", re.IGNORECASE)
_SETUP = re.compile(r"couldn't chdir|execve\(\)|No such file or directory|Permission denied|cannot execute")
DUE_TO = {"TIME LIMIT": "time_limit", "NODE FAILURE": "node_fail", "PREEMPTION": "preempted",
          "JOB REQUEUE": "requeue"}
"""``slurmstepd``'s ``DUE TO ...`` words and what they mean for the run."""
REQUEUE_WORDS = {"requeue": "by an operator's scontrol requeue", "node_fail": "after NODE_FAIL",
                 "preempted": "preempted"}


@dataclass(frozen=True)
class Cause:
    """Why a job ended, as SLURM says it."""

    kind: str
    """``node_fail``, ``oom``, ``killed``, ``exited``, ``time_limit``, ``preempted``, ``requeue``."""
    line: str
    """SLURM's own line (the first that says it)."""
    node: str = ""
    """The host SLURM names (``n2``), when the line names one."""
    task: int | None = None
    """The task (one per node: the node's rank), when the line names one."""
    detail: str = ""
    """What the node said just before (a ``couldn't chdir`` line, say)."""

    def words(self) -> str:
        """SLURM's line with what it said before it."""
        return f"{self.line} ({self.detail})" if self.detail else self.line


def _first_task(tasks: str) -> int | None:
    match = re.match(r"\d+", tasks)
    return int(match.group(0)) if match else None


def _task_kind(what: str) -> str | None:
    if _OOM.search(what):
        return "oom"
    if what.startswith("Killed") or "Terminated" in what:
        return "killed"
    if what.startswith("Exited with exit code"):
        return "exited"
    return None


def batch_output_cause(text: str) -> Cause | None:
    """The first failure the batch job's output (``slurm-<job>.out``) names: a node failure first, then
    the first task ``srun`` saw die (the tasks it ended after that are consequences), then a step
    cancelled for a reason (time limit, preemption, requeue)."""
    lines = [line.strip() for line in text.splitlines()]
    task: Cause | None = None
    stepd: Cause | None = None
    oom_line = ""
    for i, line in enumerate(lines):
        if m := _NODE_FAIL.match(line):
            return Cause("node_fail", line, m.group("node"))
        if task is None and (m := _TASK.match(line)) and (kind := _task_kind(m.group("what"))):
            node = m.group("node")
            before = (next((p for p in lines[:i] if p.startswith(f"slurmstepd-{node}:") and "couldn't chdir" in p), "")
                      or next((p for p in reversed(lines[max(0, i - 5):i]) if _SETUP.search(p)), ""))
            task = Cause(kind, line, m.group("node"), _first_task(m.group("tasks")), before)
        if stepd is None and (m := _STEPD.search(line)) and m.group("why"):
            stepd = Cause(DUE_TO.get(m.group("why").strip(), "cancelled"), line, m.group("node"))
        if not oom_line and "slurmstepd" in line and _OOM.search(line):
            oom_line = line
    if stepd is not None and stepd.kind in ("node_fail", "time_limit", "preempted", "requeue"):
        return stepd
    if task is not None and oom_line and task.kind == "killed":
        return Cause("oom", task.line, task.node, task.task, oom_line)
    return task or stepd


def this_runs_output(text: str, requeued_run: bool) -> str:
    """What of ``slurm-<job>.out`` this run of the job wrote. SLURM empties the file when a requeued job's
    batch script starts again, so a requeued run whose file still says why the job was requeued never
    started (slurmd refused to launch it): none of that text is this run's."""
    return "" if requeued_run and requeue_words(text) else text


def requeue_words(text: str) -> str:
    """Why SLURM requeued the job, from the output of the run it cut short (``JOB REQUEUE``: an operator;
    ``NODE FAILURE``; ``PREEMPTION``); empty when it does not say."""
    for line in reversed(text.splitlines()):
        if (m := _STEPD.search(line)) and m.group("why"):
            kind = DUE_TO.get(m.group("why").strip())
            if kind in REQUEUE_WORDS:
                return f"{REQUEUE_WORDS[kind]} on {m.group('node')}" if kind == "node_fail" else REQUEUE_WORDS[kind]
    return ""


def dead_nodes(sinfo_out: str) -> dict[str, str]:
    """``sinfo --noheader -N -o '%N|%T|%E'``: the nodes that are down or not responding (a ``*`` after
    the state), with SLURM's state and reason."""
    out: dict[str, str] = {}
    for line in sinfo_out.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 2 or not parts[0]:
            continue
        state = parts[1].strip().lower()
        if state.endswith("*") or state.startswith(("down", "fail")):
            reason = parts[2].strip() if len(parts) > 2 and parts[2].strip() not in ("", "none", "(null)") else ""
            words = f"{state.rstrip('*')}, not responding" if state.endswith("*") else state
            out[parts[0]] = f"{words}: {reason}" if reason else words
    return out


@dataclass(frozen=True)
class StepExit:
    """One step of a job as ``sacct`` accounts it."""

    step: str
    """``45.0``, ``45.batch``, ``45``."""
    state: str
    exit_code: int | None
    signal: int | None
    nodes: str


def parse_sacct_steps(text: str) -> list[StepExit]:
    """``sacct --noheader --parsable2 --format=JobID,State,ExitCode,NodeList`` rows."""
    rows = []
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 3 or not re.match(r"^\d", parts[0]):
            continue
        code, _, sig = parts[2].partition(":")
        rows.append(StepExit(parts[0], parts[1].split()[0] if parts[1] else "",
                             ascii_int(code), ascii_int(sig),
                             parts[3] if len(parts) > 3 else ""))
    return rows


def sacct_words(steps: list[StepExit]) -> str:
    """The steps that did not complete, as one line (``step 45.0 FAILED exit 2 on n[1-2]``)."""
    bad = [s for s in steps if s.state not in ("COMPLETED", "RUNNING", "PENDING")]
    return "; ".join(f"step {s.step} {s.state} exit {s.exit_code}" + (f" signal {s.signal}" if s.signal else "")
                     + (f" on {s.nodes}" if s.nodes else "") for s in bad)


NEVER_CLEARS = {
    "PartitionTimeLimit": "the time asked is above the partition's MaxTime",
    "PartitionNodeLimit": "more nodes than the partition allows (or than it has)",
    "InvalidAccount": "the account is not valid for this user",
    "InvalidQOS": "the qos is not valid for this user or account",
    "AssocMaxWallDurationPerJobLimit": "the time asked is above the association's MaxWall",
    "AssocMaxNodesPerJobLimit": "more nodes than the association allows",
    "AssocMaxCpuPerJobLimit": "more CPUs than the association allows",
    "AssocMaxGRESPerJob": "more GPUs than the association allows",
    "QOSMaxWallDurationPerJobLimit": "the time asked is above the qos's MaxWall",
    "QOSMaxNodePerJobLimit": "more nodes than the qos allows",
    "QOSMaxCpuPerJobLimit": "more CPUs than the qos allows",
    "QOSMaxGRESPerJob": "more GPUs than the qos allows",
    "QOSJobLimit": "the qos allows no job of this size",
    "BadConstraints": "no node has the features asked for (compute.slurm.constraint)",
    "DependencyNeverSatisfied": "the job it depends on will never end as asked",
    "AccountNotAllowed": "the partition does not allow this account",
    "QOSNotAllowed": "the partition does not allow this qos",
}
"""Pending reasons SLURM keeps until someone changes the job or the cluster: a run that waits on one
waits forever, so it ends at once with the limit named."""


def never_clears(reason: str) -> str | None:
    """What a pending reason that cannot clear means (``None``: it may clear)."""
    return NEVER_CLEARS.get(reason.strip())
