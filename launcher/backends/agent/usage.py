"""What a node's job costs on its node: the CPU time and memory of its whole process tree, from /proc;
and the node's network traffic since the job's first sample (every interface but loopback).

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


def net_bytes(text: str) -> tuple[int, int] | None:
    """Bytes received and sent by every interface but loopback, from ``/proc/net/dev``'s text; ``None``
    when it cannot be read as such."""
    rx = tx = 0
    for line in text.splitlines()[2:]:
        name, sep, rest = line.partition(":")
        fields = rest.split()
        if not sep or len(fields) < 9:
            return None
        if name.strip() == "lo":
            continue
        try:
            rx, tx = rx + int(fields[0]), tx + int(fields[8])
        except ValueError:
            return None
    return rx, tx


def net_since(first: object, now: tuple[int, int] | None) -> tuple[float, float] | None:
    """Megabytes (10^6 bytes) received and sent since ``first`` (the counters at the job's first sample); a
    counter that went back (an interface made anew) counts from 0."""
    if now is None or not isinstance(first, list) or len(first) != 2:
        return None
    return tuple(max(n - f, 0) / 1e6 if isinstance(f, int) else 0.0 for n, f in zip(now, first, strict=True))  # type: ignore[return-value]


def usage(node_dir: str, pids: list, proc: str = "/proc", now: float | None = None) -> dict:
    """The job's cost now, its CPU use since the last ask (``cpu_pct`` ``None`` on the first), and the
    node's traffic since the first ask (``net_rx_mb``, ``net_tx_mb``; absent without ``/proc/net/dev``)."""
    at = time.time() if now is None else now
    sample = tree_sample(pids, proc)
    path = os.path.join(node_dir, USAGE_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            previous = json.load(f)
    except (OSError, ValueError):
        previous = None
    previous = previous if isinstance(previous, dict) else None
    pct = cpu_pct(previous, sample["cpu_s"], at)
    try:
        with open(f"{proc}/net/dev", encoding="ascii", errors="replace") as f:
            net = net_bytes(f.read())
    except OSError:
        net = None
    first = previous.get("net0") if previous else None
    if not (isinstance(first, list) and len(first) == 2) and net is not None:
        first = list(net)
    try:
        tmp = f"{path}.tmp-{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"cpu_s": sample["cpu_s"], "at": at, "net0": first}, f)
        os.replace(tmp, path)
    except OSError:
        pass  # a full disk: the next ask has no previous sample, and says no CPU figure
    out = {"cpu_pct": pct, "rss_mib": sample["rss_bytes"] / 2**20, "processes": sample["processes"], "at": at}
    traffic = net_since(first, net)
    if traffic is not None:
        out["net_rx_mb"], out["net_tx_mb"] = traffic
    return out
