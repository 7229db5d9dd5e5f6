"""Where the cores sit idle during the test suite: a pytest plugin that logs each test's start and end on
each worker, and the machine's CPU (``/proc/stat``) every 2 s, then a report of the windows in which the
cores were less than 85% busy and which tests ran then, and when each worker ended.

    TIMELINE_LOG=/tmp/tl.jsonl PYTHONPATH=benchmarks bash .ci/run -p suite_timeline
    python3 benchmarks/suite_timeline.py /tmp/tl.jsonl
"""

from __future__ import annotations

import collections
import json
import os
import sys
import threading
import time

WINDOW_S = 20


def _note(record: dict) -> None:
    path = os.environ.get("TIMELINE_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(record) + "\n")


def _worker() -> str:
    return os.environ.get("PYTEST_XDIST_WORKER", "main")


def pytest_configure(config) -> None:
    if os.environ.get("TIMELINE_LOG") and _worker() == "main":  # one sampler, in pytest's own process
        def sample() -> None:
            while True:
                with open("/proc/stat") as f:
                    fields = [int(v) for v in f.readline().split()[1:9]]
                _note({"t": time.time(), "idle": fields[3] + fields[4], "total": sum(fields)})
                time.sleep(2)

        threading.Thread(target=sample, daemon=True).start()


def pytest_runtest_logstart(nodeid, location) -> None:
    if _worker() != "main":
        _note({"t": time.time(), "w": _worker(), "what": "start", "id": nodeid})


def pytest_runtest_logfinish(nodeid, location) -> None:
    if _worker() != "main":
        _note({"t": time.time(), "w": _worker(), "what": "end", "id": nodeid})


def report(path: str) -> None:
    with open(path) as f:
        records = [json.loads(line) for line in f]
    stat = [(r["t"], r["idle"], r["total"]) for r in records if "idle" in r]
    spans, started = [], {}
    for r in sorted((r for r in records if "what" in r), key=lambda r: r["t"]):
        if r["what"] == "start":
            started[r["w"], r["id"]] = r["t"]
        elif (r["w"], r["id"]) in started:
            spans.append((started.pop((r["w"], r["id"])), r["t"], r["w"], r["id"]))
    first, last = min(s[0] for s in spans), max(s[1] for s in spans)
    idle = 0.0
    for at in range(int(first), int(last), WINDOW_S):
        inside = [s for s in stat if at <= s[0] <= at + WINDOW_S]
        if len(inside) < 2 or inside[-1][2] == inside[0][2]:
            continue
        busy = 1 - (inside[-1][1] - inside[0][1]) / (inside[-1][2] - inside[0][2])
        idle += (1 - busy) * WINDOW_S * (os.cpu_count() or 1)
        if busy < 0.85:
            running = collections.Counter()
            for start, end, worker, test in spans:
                overlap = min(end, at + WINDOW_S) - max(start, at)
                if overlap > 0:
                    running[worker, test.split("/")[-1][:90]] += overlap
            print(f"{at - first:6.0f} s  busy {busy:4.0%}  " +
                  "; ".join(f"{w} {t} ({s:.0f} s)" for (w, t), s in running.most_common(3)))
    print(f"pytest ran {last - first:.0f} s; idle core-seconds: {idle:.0f} of "
          f"{(last - first) * (os.cpu_count() or 1):.0f}")
    for worker in sorted({s[2] for s in spans}):
        print(f"{worker} ended at {max(s[1] for s in spans if s[2] == worker) - first:.0f} s")


if __name__ == "__main__":
    report(sys.argv[1])
