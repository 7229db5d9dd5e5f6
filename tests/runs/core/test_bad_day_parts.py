"""The pure and single-process parts of a bad day, table-driven: a log's tail found from its end, the
rendezvous port claim between two agents, whose ``output_dir`` a launch may not take, a dead tracking
store probed in bounded time, a node found without its job named first."""

from __future__ import annotations

import errno
import io
import json
import random
import socket
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from launcher.backends.agent import jobs, ports
from launcher.backends.base import NodeStatus
from launcher.runs.core import streams
from launcher.runs.core.output_dirs import fixed_output_dir, output_dir_users
from launcher.runs.core.store import RunStore
from launcher.runs.core.triage import TriageReport, gone_report, gone_words
from launcher.runs.owner.rendezvous import port_taken_in_log
from launcher.runs.owner.tracking import probe
from launcher.workload.plan import build_plan
from launcher.workload.validate import validate_text


def _shown(data: bytes, lines: int, complete_only: bool) -> list[bytes]:
    """The last ``lines`` lines as reading the whole of ``data`` would give them."""
    parts = data.split(b"\n")
    shown = parts[:-1] + ([parts[-1]] if parts[-1] and not complete_only else [])
    return shown[max(0, len(shown) - lines):] if lines else []


def test_a_logs_tail_is_found_from_its_end_exactly_as_reading_it_all_would(monkeypatch):
    monkeypatch.setattr(streams, "TAIL_BLOCK", 7)  # many blocks per case: every boundary is met
    rng = random.Random(45)
    for _ in range(3000):
        data = bytes(rng.choice(b"ab\n\n\r") for _ in range(rng.randint(0, 60)))
        lines = rng.randint(0, 9)
        for complete_only in (False, True):
            start = streams.tail_offset(io.BytesIO(data), lines, complete_only=complete_only)
            parts = data[start:].split(b"\n")
            got = parts[:-1] + ([parts[-1]] if parts[-1] and not complete_only else [])
            assert got == _shown(data, lines, complete_only), (data, lines, complete_only, start)


def _let_go() -> None:
    """Every claim this process's agent module holds, closed (as the agent's exit would)."""
    for claim in ports._HELD.values():
        claim.close()
    ports._HELD.clear()


HOLDER = """
import json, time
from launcher.backends.agent import ports
print(json.dumps(ports.claim(0)), flush=True)
time.sleep(60)
"""

IP_LOCAL_PORT_RANGE = 51
"""Linux's per-socket range of the ports the system picks (<linux/in.h>, 6.3 and later)."""


def _pinned(port: int) -> socket.socket:
    """A socket whose port, when the system picks one, can only be ``port``: a program on a busy machine
    that happens to be handed exactly this port, made certain."""
    s = socket.socket()
    try:
        s.setsockopt(socket.IPPROTO_IP, IP_LOCAL_PORT_RANGE, struct.pack("I", port | port << 16))
    except OSError:
        s.close()
        pytest.skip("this kernel cannot pin a socket's port range (IP_LOCAL_PORT_RANGE, Linux 6.3+)")
    return s


def _handed_out(port: int) -> list[str]:
    """How ``port`` was handed by the system to another program now: an ephemeral bind, an outgoing
    connection (each held until the caller's test ends, as a busy machine's would be); empty: neither."""
    got = []
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        for how, use in (("bind to port 0", lambda s: s.bind(("0.0.0.0", 0))),
                         ("an outgoing connection", lambda s: s.connect(server.getsockname()))):
            s = _pinned(port)
            try:
                use(s)
            except OSError as err:
                assert err.errno in (errno.EADDRINUSE, errno.EADDRNOTAVAIL), err
                s.close()
                continue
            got.append(how)
            _SQUATTERS.append(s)
    return got


_SQUATTERS: list[socket.socket] = []


@pytest.fixture
def squatters():
    yield _SQUATTERS
    for s in _SQUATTERS:
        s.close()
    _SQUATTERS.clear()


def test_a_port_another_agent_claimed_is_not_claimed_again_and_another_is_held_in_its_place(squatters):
    holder = subprocess.Popen([sys.executable, "-c", HOLDER], stdout=subprocess.PIPE, text=True,
                              cwd=Path(__file__).resolve().parents[3])
    try:
        held = json.loads(holder.stdout.readline())
        assert held["free"] is True, held
        port = held["port"]
        assert _handed_out(port) == []  # claimed: the system hands it to nobody else
        answer = ports.claim(port)  # another agent, as a second launch's would be
        assert answer["free"] is False and answer["suggest"] != port, answer
        assert "another fsdp-tui run" in answer["reason"] or "in use" in answer["reason"], answer
        other = answer["suggest"]
        with socket.socket() as probe_socket:  # the suggestion is bound and held, not just found free
            probe_socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            with pytest.raises(OSError):
                probe_socket.bind(("0.0.0.0", other))
        claim, why = ports.take(other)  # the job starts: the port opens for it, the claim stays
        assert claim is not None and why is None
        claim.release_listener()
        # The moment before the job binds, however long a loaded machine makes it: no other program is
        # handed the port by the system, and the job, naming it as torchrun's store does, binds it.
        assert _handed_out(other) == []
        with socket.socket() as job:
            job.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            job.bind(("0.0.0.0", other))
            job.listen(1)
        assert ports.claim(other)["free"] is False  # still this run's until its job ends
        claim.close()
        assert ports._lock(other)  # let go: another run may claim it
        _let_go()
    finally:
        holder.kill()
        holder.wait()
    assert ports._lock(port)  # the holder died: its claim went with it


@pytest.mark.parametrize(("log", "taken"), [
    ("torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. "
     "port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use", True),
    ("OSError: [Errno 98] Address already in use (port 29500)", True),
    ("OSError: [Errno 98] Address already in use: port 8080", False),  # the job's own port, not the rendezvous
    ("ValueError: 129500 rows", False),
])
def test_what_says_the_rendezvous_port_was_taken(log, taken):
    assert port_taken_in_log("line\n" + log + "\n", 29500) is taken


def _plan(text: str, run_id: str, source: Path | None):
    result = validate_text(text, "w.yaml")
    assert result.ok, [p.format() for p in result.problems]
    return build_plan(result.workload, run_id=run_id, source_file=source, node_root="/nodes")


BASE = "experiment_name: {exp}\ncompute: {{hosts: [{host}]}}\ncommand: run\nparameters: {{output_dir: {out}{shared}}}\n"


@pytest.mark.parametrize(("exp", "host", "out", "shared", "file", "refused"), [
    ("other", "h0", "/data/ckpt", "", "b.yaml", True),  # another workload, same node and folder
    ("other", "h0", "/data/ckpt/", "", "b.yaml", True),  # the same folder written with a slash
    ("first", "h0", "/data/ckpt", "", "a.yaml", False),  # the same workload (a relaunch, a resume)
    ("other", "h1", "/data/ckpt", "", "b.yaml", False),  # another node
    ("other", "h0", "/data/other", "", "b.yaml", False),  # another folder
    ("other", "h0", "ckpt", "", "b.yaml", False),  # relative: inside each run's own folder
    ("other", "h0", "/data/ckpt", ", output_dir_shared: true", "b.yaml", False),  # shared on purpose
], ids=["other-workload", "trailing-slash", "same-workload", "other-node", "other-folder", "relative", "opted-in"])
def test_an_output_dir_another_workload_uses_on_that_node(tmp_path, exp, host, out, shared, file, refused):
    home = tmp_path / "home"
    first = _plan(BASE.format(exp="first", host="h0", out="/data/ckpt", shared=""), "run-first", tmp_path / "a.yaml")
    RunStore(home).create_run(first, first.source_file, "x")
    plan = _plan(BASE.format(exp=exp, host=host, out=out, shared=shared), "run-new", tmp_path / file)
    said = output_dir_users(home, plan)
    assert bool(said) is refused, said
    if refused:
        assert "run-first" in said and f"on {host}" in said and "experiment first" in said
    assert fixed_output_dir(plan) == (None if out == "ckpt" or shared else out.rstrip("/"))


def test_a_dead_tracking_server_is_known_in_seconds_whether_it_refuses_or_never_answers():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        refused = s.getsockname()[1]
    with pytest.raises(ConnectionError, match="refused"):
        probe(f"http://127.0.0.1:{refused}")
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    try:
        began = time.monotonic()
        with pytest.raises(ConnectionError, match="no answer from 127.0.0.1"):
            probe(f"http://127.0.0.1:{silent.getsockname()[1]}", timeout_s=0.5)
        assert time.monotonic() - began < 30  # bounded by its timeout, not MLflow's minutes of retries
    finally:
        silent.close()
    probe("sqlite:////nowhere/mlflow.db")  # a local store is not probed over the network


@pytest.mark.parametrize(("status", "reconnected", "words"), [
    (NodeStatus(1, "running", 1, supervisor_alive=False), True, "its job is gone since its connection came back"),
    (NodeStatus(1, "running", 1, supervisor_alive=False, error="the machine restarted since its job started"), True,
     "the machine restarted"),
    (NodeStatus(1, "running", 1, supervisor_alive=False), False, "the process recording its job on the node died"),
    (NodeStatus(1, "absent"), False, "no job is recorded there any more"),
])
def test_a_node_without_its_job_is_lost_and_named_before_what_the_survivors_logs_blamed(status, reconnected, words):
    said = gone_words(status, reconnected)
    assert said.startswith("lost: ") and words in said
    from_logs = TriageReport(node_rank=0, said="node 0 rank 0: python_error: RuntimeError: Connection reset by peer")
    report = gone_report(from_logs, 1, "rp2", said)
    assert report.node_rank == 1 and report.signature == "lost"
    assert report.summary == f"node 1 (rp2): {said}" and report.consequence == from_logs.summary


def test_a_job_recorded_before_the_machine_restarted_is_not_taken_for_running(tmp_path):
    node_dir = tmp_path / "node-0"
    node_dir.mkdir()
    (node_dir / jobs.STATE).write_text(json.dumps({"state": "running", "attempt": 1, "supervisor_pid": 1,
                                                  "boot_id": "another-boot"}))
    status = jobs.status(str(node_dir))  # pid 1 is alive here, but it is not the job's supervisor any more
    assert status["supervisor_alive"] is False and "restarted" in status["error"]
    (node_dir / jobs.STATE).write_text(json.dumps({"state": "running", "attempt": 1, "supervisor_pid": 1,
                                                  "boot_id": jobs.boot_id()}))
    assert jobs.status(str(node_dir))["supervisor_alive"] is True


def _log(node_dir) -> bytes:
    try:
        return (node_dir / jobs.LOG).read_bytes()[-2000:]
    except OSError as err:
        return str(err).encode()


def test_the_job_supervisor_holds_node_0s_claim_and_opens_the_port_to_the_job(tmp_path, squatters):
    """A real start on this machine: the port is the job's to bind, and no other launch's while it runs.
    The port is one the system picks (a run on this machine alone), so on a busy machine any outgoing
    connection may be handed it: one that asks for it the moment the job starts, before the job's own
    bind, gets nothing."""
    port = ports.claim(0)["port"]
    script = textwrap.dedent(f"""
        import socket, sys, time
        s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("0.0.0.0", {port})); s.listen(1); print("bound", flush=True); time.sleep(30)
    """)
    tag = f"port-claim-{time.monotonic_ns()}"
    spec = {"argv": [sys.executable, "-c", script], "env": {"FSDP_TUI_RUN_ID": tag, "NODE_RANK": "0"},
            "attempt": 1, "rendezvous_port": port}
    node_dir = tmp_path / "node-0"
    answer = jobs.start(str(node_dir), spec, jobs.agent_argv("unused.zip"))
    try:
        assert answer["state"] == "running", (answer, _log(node_dir))
        assert _handed_out(port) == []  # the job is starting and has not bound it yet
        deadline = time.monotonic() + 30
        while b"bound" not in (node_dir / jobs.LOG).read_bytes() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert b"bound" in (node_dir / jobs.LOG).read_bytes(), (node_dir / jobs.LOG).read_bytes()
        assert ports.claim(port)["free"] is False  # another launch on this machine: taken
        again = jobs.start(str(tmp_path / "other"), {**spec, "attempt": 1}, jobs.agent_argv("unused.zip"))
        assert again.get("port_taken") is True and str(port) in again["error"], again
    finally:
        jobs.stop(str(node_dir), 1.0)
        _let_go()


def test_each_look_starts_a_few_senders_the_longest_waiting_first_and_none_twice(tmp_path):
    import os

    from launcher.runs.core import pending

    home = tmp_path / "home"
    for i in range(6):
        directory = home / "runs" / f"run-{i}"
        directory.mkdir(parents=True)
        pending.mark(directory, "ConnectionError: cannot reach the server")
        os.utime(directory / pending.MARK, (time.time() - 100 - i, time.time() - 100 - i))
    (home / "runs" / "run-5" / pending.MARK).touch()  # tried just now: not again yet
    started = pending.start_senders(home)
    assert started == ["run-4", "run-3", "run-2", "run-1"]
    assert pending.start_senders(home) == ["run-0"]  # the next look: the one left, not those started
    assert pending.start_senders(home) == []
    for proc in pending._SENDERS:
        assert proc.wait(timeout=120) == 1  # no plan recorded: nothing sent, said why, the mark kept
    assert all(pending.why_pending(home / "runs" / f"run-{i}") for i in range(6))
    assert "its plan cannot be read" in (home / "runs" / "run-4" / "mlflow-sender.log").read_text()


def test_a_look_for_unsent_runs_reads_the_index_not_every_run_folder(tmp_path):
    import os

    from launcher.runs.core import pending

    home = tmp_path / "home"
    for i in range(3):  # marked before the index existed (an older data dir): walked once, indexed
        (home / "runs" / f"old-{i}").mkdir(parents=True)
        (home / "runs" / f"old-{i}" / pending.MARK).write_text("down\n")
        os.utime(home / "runs" / f"old-{i}" / pending.MARK, (time.time() - 100, time.time() - 100))
    for i in range(200):
        (home / "runs" / f"done-{i}").mkdir()
    assert sorted(path.parent.name for path in pending._marked(home)) == ["old-0", "old-1", "old-2"]
    assert sorted(os.listdir(home / pending.INDEX)) == ["old-0", "old-1", "old-2"]
    # From now on only the index is read: a mark no index entry names is not looked for.
    (home / "runs" / "done-7" / pending.MARK).write_text("down\n")
    pending.mark(home / "runs" / "done-8", "down")
    pending.clear(home / "runs" / "old-1")
    assert sorted(path.parent.name for path in pending._marked(home)) == ["done-8", "old-0", "old-2"]
    (home / "runs" / "old-2" / pending.MARK).unlink()  # its run forgotten: its entry goes at the next look
    assert sorted(path.parent.name for path in pending._marked(home)) == ["done-8", "old-0"]
    assert sorted(os.listdir(home / pending.INDEX)) == ["done-8", "old-0"]
