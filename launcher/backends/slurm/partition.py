"""What ``sinfo`` says of the partition a run asks for: that it exists, has enough nodes (and GPUs per
node), and that the run's time limit fits its MaxTime. The parsing and judging are pure."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from launcher.backends.base import SchedulerCheck
from launcher.backends.slurm.script import slurm_of
from launcher.words import plural
from launcher.workload.slurm import time_minutes, time_option
from trainer.wire.ckpt_layout import ascii_int

if TYPE_CHECKING:
    from launcher.backends.slurm.login import LoginNode

SINFO_FORMAT = "%P|%a|%l|%D|%G"
UNLIMITED = {"unlimited", "infinite"}


@dataclass(frozen=True)
class Partition:
    name: str
    default: bool
    available: str
    """``up``, ``down``, ``drain``, ``inactive``."""
    max_time: str
    """As ``sinfo`` writes it (``infinite``, ``1-00:00:00``, ``30:00``)."""
    nodes: tuple[tuple[int, int | None], ...]
    """(node count, GPUs per node from the gres; ``None``: the gres does not say) per sinfo row."""

    @property
    def node_count(self) -> int:
        return sum(n for n, _ in self.nodes)

    def nodes_with_gpus(self, gpus: int) -> int | None:
        """Nodes with at least ``gpus`` GPUs; ``None`` when some row's gres does not say."""
        if any(g is None for _, g in self.nodes):
            return None
        return sum(n for n, g in self.nodes if g is not None and g >= gpus)


def gres_gpus(gres: str) -> int | None:
    """GPUs per node from a gres text (``gpu:4``, ``gpu:a100:4(S:0-1)``, ``gpu:a100:2,gpu:v100:2``);
    0 for ``(null)`` or no gpu entry; ``None`` when a gpu entry has no count."""
    text = re.sub(r"\([^)]*\)", "", gres.strip())
    if not text or text.lower() in ("(null)", "null", "n/a"):
        return 0
    total = 0
    for item in text.split(","):
        parts = item.strip().split(":")
        if parts[0] != "gpu":
            continue
        count = ascii_int(parts[-1]) if len(parts) >= 2 else None
        if count is None:
            return None
        total += count
    return total


def parse_sinfo(out: str) -> dict[str, Partition]:
    """``sinfo --noheader -o '%P|%a|%l|%D|%G'`` by partition (rows of one partition summed)."""
    found: dict[str, Partition] = {}
    for line in out.splitlines():
        fields = line.strip().split("|")
        if len(fields) != 5 or not fields[0]:
            continue
        raw, avail, limit, count, gres = fields
        name = raw.rstrip("*")
        try:
            n = int(count)
        except ValueError:
            continue
        row = ((n, gres_gpus(gres)),)
        if name in found:
            p = found[name]
            found[name] = Partition(name, p.default, p.available, p.max_time, p.nodes + row)
        else:
            found[name] = Partition(name, raw.endswith("*"), avail, limit, row)
    return found


def limit_minutes(text: str) -> float | None:
    """A partition's MaxTime in minutes; ``None`` when unlimited. ``ValueError`` when unreadable."""
    t = text.strip()
    if t.lower() in UNLIMITED:
        return None
    return time_minutes(t)


def time_check(asked: str | None, partition: Partition) -> SchedulerCheck:
    """Whether ``--time`` (``asked``; ``None``: not set) fits the partition's MaxTime."""
    where = f"partition {partition.name}"
    try:
        limit = limit_minutes(partition.max_time)
    except ValueError:
        return SchedulerCheck("time limit", "warning", f"cannot read {where}'s MaxTime {partition.max_time!r}",
                              f"compare compute.slurm.time with `sinfo -p {partition.name} -o %l` by hand")
    if asked is None:
        return SchedulerCheck("time limit", "ok", f"not set: the job gets {where}'s default (MaxTime "
                              f"{partition.max_time})")
    want = time_minutes(asked)
    if limit is None:
        return SchedulerCheck("time limit", "ok", f"{asked} ({want:g} min); {where} has no MaxTime")
    if want > limit:
        return SchedulerCheck("time limit", "error", f"{asked} ({want:g} min) is above {where}'s MaxTime "
                              f"{partition.max_time} ({limit:g} min)",
                              f"set compute.slurm.time (or timeout_minutes) to {partition.max_time} or less, or "
                              "pick a partition that allows longer jobs (`sinfo -o '%P %l'`)")
    return SchedulerCheck("time limit", "ok", f"{asked} ({want:g} min) fits {where}'s MaxTime {partition.max_time}")


def partition_checks(plan, sinfo_out: str) -> list[SchedulerCheck]:
    """The partition, node/GPU counts and time limit against ``sinfo``'s rows. Pure."""
    s = slurm_of(plan)
    parts = parse_sinfo(sinfo_out)
    if not parts:
        return [SchedulerCheck("partition", "error", "sinfo lists no partition", "ask the cluster's admins")]
    if s.partition is None:
        defaults = [p for p in parts.values() if p.default]
        if not defaults:
            return [SchedulerCheck("partition", "error", "none named and the cluster has no default partition",
                                   f"set compute.slurm.partition to one of: {', '.join(sorted(parts))}")]
        part = defaults[0]
        named = f"{part.name} (the default)"
    elif s.partition not in parts:
        close = difflib.get_close_matches(s.partition, list(parts), n=1, cutoff=0.5)
        hint = f"did you mean {close[0]}? " if close else ""
        return [SchedulerCheck("partition", "error", f"sinfo knows no partition {s.partition!r}",
                               f"{hint}set compute.slurm.partition to one of: {', '.join(sorted(parts))}")]
    else:
        part, named = parts[s.partition], s.partition
    checks = []
    if part.available.lower() != "up":
        checks.append(SchedulerCheck("partition", "warning", f"{named} is {part.available}",
                                     "jobs there wait until it is up again: ask the admins, or pick another"))
    else:
        checks.append(SchedulerCheck("partition", "ok", f"{named} is up"))
    topo = plan.topology
    need = topo.num_nodes
    gpus = s.gpus_per_node or (topo.procs_per_node if topo.kind == "gpu" else None)
    if part.node_count < need:
        checks.append(SchedulerCheck("nodes", "error", f"{named} has {plural(part.node_count, 'node')}; the run needs {need}",
                                     "lower num_accelerators / compute.slurm.nodes, or pick a bigger partition"))
    else:
        checks.append(SchedulerCheck("nodes", "ok", f"{named} has {plural(part.node_count, 'node')}; the run needs {need}"))
    if gpus:
        with_gpus = part.nodes_with_gpus(gpus)
        if with_gpus is None:
            checks.append(SchedulerCheck("gpus per node", "warning", f"cannot tell from {named}'s gres how many "
                                         f"GPUs its nodes have; the run needs {gpus} per node",
                                         f"check `sinfo -p {part.name} -N -o '%N %G'`"))
        elif with_gpus < need:
            checks.append(SchedulerCheck("gpus per node", "error", f"{named} has {plural(with_gpus, 'node')} with {gpus}+ "
                                         f"GPUs; the run needs {need}",
                                         "lower accelerator_type/gpus_per_node, or pick a GPU partition "
                                         "(`sinfo -o '%P %G'`)"))
        else:
            checks.append(SchedulerCheck("gpus per node", "ok", f"{plural(with_gpus, 'node')} of {named} {'has' if with_gpus == 1 else 'have'} {gpus}+ GPUs"))
    checks.append(time_check(time_option(s, plan.workload.timeout_minutes), part))
    return checks


async def sinfo_checks(login: LoginNode) -> list[SchedulerCheck]:
    status, out, err = await login.ask(["sinfo", "--noheader", "-o", SINFO_FORMAT])
    if status != 0:
        return [SchedulerCheck("partition", "error", f"sinfo on {login.label} failed: "
                               f"{(err or out).strip()[:300]}", "check that SLURM's commands work on the login node")]
    return partition_checks(login.plan, out)
