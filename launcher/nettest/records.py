"""The kept interconnect tests, ``<data dir>/nettests/<run id>.json`` (nodes, workload, figures, date):
written as each test ends (:func:`launcher.nettest.launch.save_record`), read here newest first to compare
a run's nodes with (``show``, the monitor), without the launch's modules."""

from __future__ import annotations

import json
from pathlib import Path

from launcher.nettest.figures import BadResult, decode
from launcher.runs.core.run_kind import NETTEST_RECORDS
from launcher.runs.read.report_parts import NettestSeen

RECORDS = NETTEST_RECORDS
"""Where the kept tests lie under the data dir (a run is known as a test by its record there too)."""


def list_records(home: Path) -> list[dict]:
    """Every kept test, newest first; a file that does not parse is skipped."""
    out = []
    for path in (home / RECORDS).glob("*.json"):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and isinstance(data.get("run_id"), str):
            out.append(data)
    return sorted(out, key=lambda d: d.get("started_at") or 0, reverse=True)


def newest_for(home: Path, hosts: list[str] | tuple[str, ...], *, besides: str = "") -> NettestSeen | None:
    """The newest kept test with a result on exactly these nodes (in rank order), other than ``besides``,
    summarised: id, date, the verdict's first line and the whole world's all-gather bus bandwidth."""
    from launcher.nettest.figures import judge_pairs
    from launcher.nettest.report import verdict_lines
    from launcher.words import fmt_bandwidth

    for record in list_records(home):
        if record["run_id"] == besides or list(record.get("nodes") or []) != list(hosts):
            continue
        try:
            measured = decode(record.get("result"))
        except BadResult:
            continue
        world = measured.scope("world")
        ag = world.largest("all_gather") if world else None
        started = record.get("started_at")
        return NettestSeen(str(record["run_id"]), started if isinstance(started, (int, float)) else None,
                           verdict_lines(judge_pairs(measured.pairs), tuple(record["nodes"]))[0],
                           ag.busbw if ag else None,
                           f"{fmt_bandwidth(ag.busbw) if ag else '-'} all-gather bus bandwidth over the whole world")
    return None
