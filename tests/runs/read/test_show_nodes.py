"""``fsdp-tui show RUN --nodes [--json]`` through the real console script, on runs recorded as the owner
records them (events with their times, node log mirrors): a live run with one quiet node and a finished
run whose one node failed first; the odd node also in ``show``'s triage."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from launcher.events import NodeState, NodeStateChanged, NodeUsage, RunFinished, RunState, RunStateChanged
from launcher.events.triage import TriageReport
from launcher.runs.core.layout import EVENTS, event_line, mirror_path
from launcher.runs.core.ownership import OwnerLock
from launcher.runs.core.store import RunStore
from launcher.workload.plan import build_plan
from launcher.workload.validate import validate_text

ROOT = Path(__file__).resolve().parents[3]
FSDP_TUI = str(Path(sys.executable).with_name("fsdp-tui"))
NODES = 5


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([FSDP_TUI, *args], env={**os.environ, "FSDP_TUI_HOME": str(home)}, cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def _record(home: Path, run_id: str, *, now: float, quiet_s: dict[int, float], failed_at: dict[int, float] | None = None,
            cpu: dict[int, float] | None = None) -> Path:
    """A run of NODES nodes as its owner writes it; node N's mirror last changed ``quiet_s[N]`` before ``now``."""
    hosts = ", ".join(f"host-{i}" for i in range(NODES))
    text = f"experiment_name: many\ncompute: {{hosts: [{hosts}]}}\ncommand: x\n"
    plan = build_plan(validate_text(text, "w.yaml").workload, run_id=run_id)
    store = RunStore(home)
    directory = store.create_run(plan, None, text)
    start = now - 300
    store.set_state(run_id, RunState.RUNNING, 1)
    events = [event_line(RunStateChanged(run_id, RunState.RUNNING, 1), at=start)]
    for rank in range(NODES):
        events.append(event_line(NodeStateChanged(run_id, rank, f"host-{rank}", NodeState.RUNNING), at=start))
        events.append(event_line(NodeUsage(run_id, rank, (cpu or {}).get(rank, 100.0), 500.0, 3, now - 2), at=now - 2))
        log = mirror_path(directory, rank)
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text("".join(f"step {i} of node {rank}\n" for i in range(3000)))
        os.utime(log, (now - quiet_s.get(rank, 1.0), now - quiet_s.get(rank, 1.0)))
    for rank, at in sorted((failed_at or {}).items(), key=lambda kv: kv[1]):
        events.append(event_line(NodeStateChanged(run_id, rank, f"host-{rank}", NodeState.EXITED, 1), at=at))
    if failed_at:
        triage = {"summary": "node 2 rank 4: python_error, exit code 1: ValueError: boom", "node_rank": 2}
        (directory / "triage.json").write_text(json.dumps(triage))
        events.append(event_line(RunFinished(run_id, RunState.FAILED, 1, TriageReport.from_wire(triage)), at=now))
        store.set_state(run_id, RunState.FAILED, 1, triage["summary"])
    (directory / EVENTS).write_text("\n".join(events) + "\n")
    return directory


def test_show_nodes_marks_the_quiet_node_and_the_first_to_fail(tmp_path):
    now = time.time()
    live = _record(tmp_path, "20260301-0900-live-1111", now=now, quiet_s={3: 200.0}, cpu={1: 95.0})
    OwnerLock(live).acquire()  # its owner is alive (this process): nothing adopts it
    _record(tmp_path, "20260301-1000-done-2222", now=now - 60, quiet_s={},
            failed_at={2: now - 160, 0: now - 100, 1: now - 100, 3: now - 99, 4: now - 99})

    shown = _cli(tmp_path, "show", "1111", "--nodes", "--json")
    assert shown.returncode == 0, shown.stderr
    table = json.loads(shown.stdout)
    assert table["run"] == "20260301-0900-live-1111" and table["thresholds"]["quiet_min_s"] == 30.0
    assert [n["node"] for n in table["nodes"]] == list(range(NODES))
    quiet = table["nodes"][3]
    assert [m["what"] for m in quiet["odd"]] == ["quiet"]
    # the others were quiet 1 s at ``now``; the time the command took to start (seconds on a loaded machine)
    # adds to every node's quiet time alike: node 3's 200 s stays ten times theirs up to ~17 s of it.
    # Ages are given to a tenth of a second (1.28 s is 1.3).
    since = time.time() - now
    assert quiet["odd"][0]["figure"] >= 200 and quiet["odd"][0]["median"] <= 1 + since + 0.05
    assert all(not n["odd"] for i, n in enumerate(table["nodes"]) if i != 3)
    first = table["nodes"][0]
    assert (first["host"], first["state"], first["lines"], first["cpu_pct"], first["rss_mib"]) == (
        "host-0", "running", 3000, 100.0, 500.0)
    assert 5 <= first["lines_per_s"] <= 15  # 3,000 lines over ~300 s

    text = _cli(tmp_path, "show", "1111", "--nodes")
    assert text.returncode == 0, text.stderr
    assert "odd node  node 3 (host-3): no output for " in text.stdout
    marked = [line.split()[0] for line in text.stdout.splitlines() if line.rstrip().endswith("quiet")]
    assert marked == ["3"] and "Traceback" not in text.stderr

    done = _cli(tmp_path, "show", "2222", "--nodes", "--json")
    odd = {n["node"]: [m["what"] for m in n["odd"]] for n in json.loads(done.stdout)["nodes"] if n["odd"]}
    assert odd == {2: ["first_failed"]}  # a finished run: nobody is "quiet", the first failure is
    report = _cli(tmp_path, "show", "2222")
    assert report.returncode == 0, report.stderr
    # The first failure's lead over the next, not the others' end (which a teardown makes the same moment).
    assert "odd node  node 2 (host-2): failed first, 200 s into the run; the next node ended 60 s later" in report.stdout
    as_json = json.loads(_cli(tmp_path, "show", "2222", "--json").stdout)
    assert as_json["triage"]["odd_nodes"] == as_json["odd_nodes"] != []
