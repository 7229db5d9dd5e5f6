"""What a node's job costs on its node: the CPU time and memory of its whole process tree, from /proc.

The tree is every process carrying the run's tag (what ``stop`` sweeps: torchrun's workers sit in sessions
of their own, and a job may double-fork). CPU use is the change of the tree's CPU time between two asks
over the wall time between them; the previous sample lives in the run directory, so an agent started
again after a dropped connection goes on from it. Stdlib only: this runs on the node.
"""

from __future__ import annotations

import json
import os
import time

USAGE_FILE = "usage.json"
"""The previous sample (CPU seconds, when), for the next ask's difference."""


def _ticks_per_s() -> float:
    return float(os.sysconf("SC_CLK_TCK"))


def _page_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE")


def process_cost(stat: str, tick_s: float, page: int) -> tuple[float, int] | None:
    """One ``/proc/PID/stat`` line: its CPU seconds (its own and its reaped children's, so time moves
    to the parent as a child ends instead of vanishing) and its resident bytes; ``None`` if unreadable."""
    try:
        fields = stat.rsplit(") ", 1)[1].split()
        utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
        rss_pages = int(fields[21])
    except (IndexError, ValueError):
        return None
    return (utime + stime + cutime + cstime) * tick_s, max(rss_pages, 0) * page


def tree_sample(pids: list, proc: str = "/proc") -> dict:
    """The summed cost of ``pids`` now: CPU seconds, RSS bytes, how many could be read."""
    tick_s, page = 1.0 / _ticks_per_s(), _page_bytes()
    cpu_s, rss, count = 0.0, 0, 0
    for pid in pids:
        try:
            with open(f"{proc}/{pid}/stat", encoding="ascii", errors="replace") as f:
                cost = process_cost(f.read(), tick_s, page)
        except OSError:
            continue  # it ended meanwhile
        if cost is None:
            continue
        cpu_s += cost[0]
        rss += cost[1]
        count += 1
    return {"cpu_s": cpu_s, "rss_bytes": rss, "processes": count}


def cpu_pct(previous: dict | None, cpu_s: float, at: float) -> float | None:
    """Percent of one core over the time since ``previous``; ``None`` without one (the first ask). A tree
    that lost a process (reaped by nobody of the job) can show less time than before: that is 0, not less."""
    if not previous:
        return None
    try:
        dt = at - float(previous["at"])
        used = cpu_s - float(previous["cpu_s"])
    except (KeyError, TypeError, ValueError):
        return None
    if dt <= 0:
        return None
    return max(used, 0.0) / dt * 100.0


def usage(node_dir: str, pids: list, proc: str = "/proc", now: float | None = None) -> dict:
    """The job's cost now, and its CPU use since the last ask (``cpu_pct`` ``None`` on the first)."""
    at = time.time() if now is None else now
    sample = tree_sample(pids, proc)
    path = os.path.join(node_dir, USAGE_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            previous = json.load(f)
    except (OSError, ValueError):
        previous = None
    pct = cpu_pct(previous if isinstance(previous, dict) else None, sample["cpu_s"], at)
    try:
        tmp = f"{path}.tmp-{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"cpu_s": sample["cpu_s"], "at": at}, f)
        os.replace(tmp, path)
    except OSError:
        pass  # a full disk: the next ask has no previous sample, and says no CPU figure
    return {"cpu_pct": pct, "rss_mib": sample["rss_bytes"] / 2**20, "processes": sample["processes"], "at": at}
