"""The operator's own disk full: the data dir on a real 6 MB tmpfs and a chatty local job through the real
CLI. The run stops with the cause, the follower says so and exits 1, reading commands still answer, a
launch onto the full disk is refused at once, and the run's end is written once there is room."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from launcher.runs.core.ownership import OwnerLock
from launcher.runs.read.follower import MAX_OWNER_STARTS, _owner_trouble
from tests.support.cli import FSDP_TUI, ROOT, cli, cli_env, owner_pid, tagged, wait_until, write_workload

CHATTY = """experiment_name: chatty
mlflow: {enabled: false}
command: |
  python3 -c "
  import sys, time
  line = 'x' * 199 + '\\n'
  for i in range(200000):
      sys.stdout.write(line)
      if i % 500 == 0:
          sys.stdout.flush(); time.sleep(0.02)
  "
"""


@pytest.fixture
def small_disk(tmp_path):
    mount = tmp_path / "disk"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", str(mount)], capture_output=True,
                          text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)



def _fill(mount: Path) -> Path:
    """Every byte left on ``mount`` taken (none may be left: then there is no filler to remove later)."""
    filler = mount / "filler"
    try:
        with open(filler, "ab") as f:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
    except OSError:
        pass
    return filler


def test_the_data_dir_filling_up_stops_the_run_with_its_cause(small_disk, tmp_path):
    home = small_disk / "home"
    env: dict[str, str] = {}
    wl = write_workload(tmp_path, CHATTY)
    out = cli(home, "run", wl, "--json", timeout=120, **env)
    said = out.stdout + out.stderr
    assert out.returncode == 1 and "Traceback" not in said, said[-3000:]
    assert "no space left on device" in said and str(home) in said, said[-3000:]
    run_id = json.loads(out.stdout.splitlines()[0])["run_id"]
    wait_until(lambda: not tagged(run_id), 30, "the job's processes gone")

    filler = _fill(small_disk)
    for args in (("runs",), ("show", run_id), ("logs", run_id, "--tail", "1")):
        answer = cli(home, *args, timeout=60, **env)
        assert answer.returncode == 0 and "Traceback" not in answer.stderr, (args, answer.stderr[-2000:])
        if args == ("runs",):  # ended with the cause, or stopped and saying what its end waits for
            assert "no space left on device" in answer.stdout, answer.stdout
    refused = cli(home, "run", wl, timeout=60, **env)
    assert refused.returncode == 1 and "not launched: no space left on device" in refused.stderr, refused.stderr

    filler.unlink(missing_ok=True)  # room again: whatever the owner kept is written now
    # The job writes into this same disk far faster than any owner can stop it, so it may have taken the
    # last byte before its stop: the disk is made larger too, as a user would move things off it.
    subprocess.run(["mount", "-o", "remount,size=16m", str(small_disk)], check=True)

    # The run reads as failed from the moment its owner knew it (the end it keeps says so); the end is
    # written when the owner, having written all it kept, lets the run go.
    wait_until(lambda: owner_pid(run_id) is None, 30, "the owner gone, the run's end written")
    [row] = json.loads(cli(home, "runs", "--json", timeout=60).stdout)
    assert row["state"] == "failed" and "no space left on device" in row["detail"], row
    triage = json.loads((home / "runs" / run_id / "triage.json").read_text())
    assert triage["signature"] == "no_space"


def test_refused_writes_are_kept_in_order_and_written_once_there_is_room(small_disk, monkeypatch):
    """The recorder on a real full disk (no floor): the mirror is never torn, the state changes and events
    the disk refused are written in order once a file is removed, and a launch is refused, leaving nothing."""
    from launcher.events import RunState
    from launcher.runs.core.space import RecordUnwritable
    from launcher.runs.core.store import RunStore
    from launcher.runs.launch import start_run
    from launcher.runs.owner.recorder import Recorder
    from launcher.workload.plan import build_plan
    from launcher.workload.validate import validate_text

    monkeypatch.setenv("FSDP_TUI_MIN_FREE_MB", "0")
    home = small_disk / "home"
    plan = build_plan(validate_text("experiment_name: full\ncommand: echo\n", "w.yaml").workload,
                      run_id="20260301-090000-full-aaaa")
    store = RunStore(home)
    store.create_run(plan, None, "experiment_name: full\n")
    rec = Recorder(store, plan.run_id, {0: "this machine"}, parse_logs=None)
    rec.set_state(RunState.RUNNING)
    filler = _fill(small_disk)
    with pytest.raises(RecordUnwritable, match="no space left on device for the run's record"):
        rec.append_log(0, b"a line\n" * 200_000)
    assert rec.log_offset(0) == 0  # nothing torn: the copy's size is still its offset
    rec.set_state(RunState.FAILED, "first")
    rec.set_state(RunState.FAILED, "second")
    assert rec.unwritten and not rec.flush_unwritten()
    with pytest.raises(RecordUnwritable, match="not launched: no space left on device"):
        start_run(build_plan(plan.workload, run_id="20260301-090001-full-bbbb"), home)
    assert not (home / "runs" / "20260301-090001-full-bbbb").exists()

    filler.unlink()
    assert rec.flush_unwritten() and not rec.unwritten
    record = RunStore(home).get_run(plan.run_id)
    assert [(t[1], t[3]) for t in record.transitions][-2:] == [(RunState.FAILED, "first"), (RunState.FAILED, "second")]
    events = (home / "runs" / plan.run_id / "events.jsonl").read_text().splitlines()
    assert [json.loads(e)["detail"] for e in events][-2:] == ["first", "second"]


def test_a_follower_names_what_stops_the_owners(tmp_path):
    """Pure parts of the follower's patience: a live owner waiting for room, and owners that keep dying."""
    home = tmp_path
    run_id = "20260301-090000-x-aaaa"
    lock = OwnerLock(home / "runs" / run_id)
    assert lock.acquire()
    try:
        assert _owner_trouble(home, run_id, 0) is None
        lock.note("waiting for room: no space left on device for the run's record: /d has 0 B free")
        said = _owner_trouble(home, run_id, 0)
        assert said and "cannot write the run's record: no space left on device" in said and "/d has 0 B" in said
        lock.note("cannot start: cannot read the run store: disk I/O error")
    finally:
        lock.release()
    assert _owner_trouble(home, run_id, MAX_OWNER_STARTS - 1) is None
    said = _owner_trouble(home, run_id, MAX_OWNER_STARTS)
    assert said and f"started {MAX_OWNER_STARTS} times" in said and "said: cannot read the run store" in said


def test_an_end_that_cannot_be_written_is_kept_for_a_bound_then_left_to_the_first_look_with_room(small_disk, tmp_path):
    """The disk fills while the job runs, so its end cannot be written: the owner keeps it (its usage stops
    with the job), gives up after its bound (3 s here) and says so where a full disk cannot refuse it; the
    commands that look at the runs say it and start no owner while there is no room; the first look with room
    gives the run an owner, which records its end."""
    home = small_disk / "home"
    env = {"FSDP_TUI_MIN_FREE_MB": "0", "FSDP_TUI_END_WAIT_S": "3"}
    wl = write_workload(tmp_path, f"experiment_name: late-end\nmlflow: {{enabled: false}}\n"
                                  f"command: while [ ! -e {tmp_path}/go ]; do sleep 0.1; done; exit 3\n")
    proc = subprocess.Popen([FSDP_TUI, "run", str(wl), "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=cli_env(home, **env), cwd=ROOT)
    run_id = json.loads(proc.stdout.readline())["run_id"]
    wait_until(lambda: [r for r in json.loads(cli(home, "runs", "--json", **env).stdout) if r["state"] == "running"],
               60, "the job running")
    filler = _fill(small_disk)
    (tmp_path / "go").touch()  # the job ends now; its end finds no room
    wait_until(lambda: owner_pid(run_id) is None, 120, "the owner to give up")
    proc.wait(timeout=60)

    def listed() -> dict:
        [row] = json.loads(cli(home, "runs", "--json", timeout=60, **env).stdout)
        return row

    first = listed()
    assert first["state"] == "running" and owner_pid(run_id) is None  # no owner while there is no room
    time.sleep(1.5)  # a running run's usage would grow meanwhile; one whose job ended does not
    assert listed()["usage"] == first["usage"] and first["usage"]["hours"] < 0.01, first
    why = cli(home, "runs", timeout=60, **env).stdout.splitlines()[1]
    assert " no space left on device for the run" in why, why  # the middle cut to the column: show has it whole
    assert why.endswith(" for room after 3 s: the next look with room records its end"), why
    assert owner_pid(run_id) is None
    shown = cli(home, "show", run_id, timeout=60, **env).stdout
    assert "  end       its job ended failed at " in shown and "not recorded yet: gave up waiting for room after " \
        "3 s: no space left on device" in shown, shown

    filler.unlink()
    subprocess.run(["mount", "-o", "remount,size=16m", str(small_disk)], check=True)
    row = wait_until(lambda: (r := listed())["state"] == "failed" and r, 60, "the run's end recorded by a new owner")
    assert row["ended_at"] is not None


def test_a_follower_says_an_owner_waiting_to_write_the_end_it_already_recorded_as_failed(tmp_path):
    """The disk filled after the owner recorded the run as failed but before it wrote the run's end: the
    run reads as ended, its owner lives on to write the end once there is room. A follower says so and
    stops, as it does for an owner stuck before the end (it used to follow such a run forever)."""
    import asyncio

    from launcher.events import RunState
    from launcher.runs.core.store import RunStore
    from launcher.runs.read.follower import FollowGaveUp, follow_run
    from launcher.workload.plan import build_plan
    from launcher.workload.validate import validate_text

    plan = build_plan(validate_text("experiment_name: full\ncommand: echo\n", "w.yaml").workload,
                      run_id="20260301-090000-full-cccc")
    store = RunStore(tmp_path)
    store.create_run(plan, None, "experiment_name: full\n")
    store.set_state(plan.run_id, RunState.FAILED, 1, "no space left on device for the run's record")
    lock = OwnerLock(tmp_path / "runs" / plan.run_id)
    assert lock.acquire()
    lock.note("waiting for room: no space left on device for the run's record: /d has 0 B free")

    async def follow() -> None:
        async for _ in follow_run(tmp_path, plan.run_id, poll_s=0.05):
            pass

    try:
        with pytest.raises(FollowGaveUp, match="its owner stopped the job and cannot write the run's record"):
            asyncio.run(asyncio.wait_for(follow(), 30))
    finally:
        lock.release()
