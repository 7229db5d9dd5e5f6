"""Real local runs through the real CLI: agent, torchrun, SQLite store, MLflow on SQLite."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FSDP_TUI = str(Path(sys.executable).with_name("fsdp-tui"))


@pytest.fixture
def hosts(tmp_path):
    """Two real sshd hosts on loopback addresses (127.0.0.2, .3) and a client HOME whose ~/.ssh/config names them node0, node1."""
    from tests.support.sshd import start_hosts, stop_hosts

    try:
        client, started = start_hosts(tmp_path, 2)
    except RuntimeError as err:
        pytest.skip(str(err))
    yield client, started
    stop_hosts(started)


@pytest.fixture
def ns_hosts(tmp_path):
    """Two real sshd hosts, each in a network namespace of its own (10.251.N.2, .3 on a bridge), named
    node0, node1 in the client's ~/.ssh/config; loopback hosts where namespaces are not allowed."""
    from tests.support.sshd import start_hosts, stop_hosts

    try:
        client, started = start_hosts(tmp_path, 2, netns=True)
    except RuntimeError as err:
        if "network namespaces" not in str(err):
            pytest.skip(str(err))
        try:
            client, started = start_hosts(tmp_path, 2)
        except RuntimeError as err2:
            pytest.skip(str(err2))
    yield client, started
    stop_hosts(started)


@pytest.fixture
def slurm(tmp_path):
    """A real SLURM cluster: two compute nodes (fsl-n0, fsl-n1, each a network namespace of its own),
    partition ``debug``, and a login node reached as ``login`` over SSH with the client HOME
    (tests/support/slurm_cluster.py); skipped, with the reason, where it cannot be built."""
    from tests.support.slurm_cluster import start_cluster, stop_cluster

    try:
        cluster = start_cluster(tmp_path)
    except RuntimeError as err:
        pytest.skip(str(err))
    yield cluster
    stop_cluster(cluster)


@pytest.fixture(scope="module")
def slurm_module(tmp_path_factory):
    """The ``slurm`` cluster, one per test module: call ``wait_idle()`` to start from an empty queue."""
    from tests.support.slurm_cluster import start_cluster, stop_cluster

    try:
        cluster = start_cluster(tmp_path_factory.mktemp("slurm"))
    except RuntimeError as err:
        pytest.skip(str(err))
    yield cluster
    stop_cluster(cluster)


@pytest.fixture
def home(tmp_path) -> Path:
    h = tmp_path / "home"
    h.mkdir()
    return h


def cli_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FSDP_TUI_")}
    env.update(FSDP_TUI_HOME=str(home), FSDP_TUI_ASSETS=os.environ.get("FSDP_TUI_TEST_ASSETS",
                                                                      "/tmp/fsdp-tui-test-assets"), **extra)
    return env


def cli(home: Path, *args: str, timeout: int = 300, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([FSDP_TUI, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          env=cli_env(home, **env), cwd=ROOT)


def run_sampling_cmdlines(home: Path, workload: Path, timeout: float, **env: str) -> tuple[int, str, list[bytes]]:
    """``fsdp-tui run WORKLOAD --json`` while every process command line on this machine is sampled
    (10 Hz), so a test can show a secret never appears in one; returns (exit code, stdout, command lines)."""
    proc = subprocess.Popen([FSDP_TUI, "run", str(workload), "--json"], stdout=subprocess.PIPE, text=True,
                            env=cli_env(home, **env), cwd=ROOT)
    cmdlines = []
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    cmdlines.append((entry / "cmdline").read_bytes())
                except OSError:
                    pass
        time.sleep(0.1)
    out = proc.stdout.read()
    return proc.wait(timeout=60), out, cmdlines


def wait_tracked(home: Path, *run_ids: str, timeout: float = 120) -> None:
    """MLflow has the runs (all of the data dir's, without ``run_ids``): an owner records the run's end
    first and sends it to MLflow after, then leaves; with a store that works nothing is left unsent."""
    from launcher.runs.core.ownership import owned
    from launcher.runs.core.pending import why_pending

    ids = run_ids or tuple(p.name for p in (home / "runs").iterdir())
    wait_until(lambda: not any(owned(home, r) for r in ids), timeout, "the owners to send the runs to MLflow")
    unsent = {r: why for r in ids if (why := why_pending(home / "runs" / r)) is not None}
    assert not unsent, f"not in MLflow: {unsent}"


def wait_until(predicate, timeout: float, what: str, every_s: float = 0.2):
    """``predicate()``'s first true value, polled; fails naming ``what`` when none comes within ``timeout``
    (generous: real parts share two cores)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = predicate()
        if got:
            return got
        time.sleep(every_s)
    raise AssertionError(f"not within {timeout} s: {what}")


def events(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def write_workload(tmp: Path, text: str) -> Path:
    path = tmp / "workload.yaml"
    path.write_text(text)
    return path


def owner_pid(run_id: str) -> int | None:
    """The run's owner process, if one lives: ``python -m launcher.runs.owner.supervisor ... RUN``, or the
    owner a launch started ahead of its run (``launcher.runs.owner.warm``), which holds the run's lock open."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"launcher.runs.owner.supervisor" in argv and run_id.encode() in argv:
                return int(entry.name)
            if b"launcher.runs.owner.warm" in argv and _holds_a_file_of(entry, run_id):
                return int(entry.name)
    return None


def _holds_a_file_of(proc: Path, run_id: str) -> bool:
    try:
        return any(f"/{run_id}/" in os.readlink(fd) for fd in (proc / "fd").iterdir())
    except OSError:
        return False


def tagged(run_id: str) -> list[int]:
    """Live processes carrying the run's tag in their environment."""
    needle = f"FSDP_TUI_RUN_ID={run_id}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if needle in (entry / "environ").read_bytes().split(b"\0"):
                    stat = (entry / "stat").read_text()
                    if stat.rsplit(") ", 1)[1][0] != "Z":
                        found.append(int(entry.name))
            except OSError:
                continue
    return found
