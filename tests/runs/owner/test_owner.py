"""One owner per run, apart from whoever launched it: the app can die, the owner can die, and the run's
records still end exactly as the nodes wrote them (real app under tmux, real torchrun, MLflow on SQLite)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from launcher.events import RunState
from launcher.runs.core.store import RunStore
from tests.support.cli import FSDP_TUI, ROOT, cli, cli_env, tagged, wait_tracked, wait_until

pytestmark = pytest.mark.slow
STEPS = 30
SHORT = ("--set", "parameters.logging.eval_max_batches=1")
"""The demo's steps, fewer, each evaluation one batch: the run only has to outlast its kill, by a margin."""
KILL_AT = 8
MONITOR_METRICS = {"loss", "lr", "tokens_per_s", "eval_loss", "memory/rank0/rss_gib", "memory/rank1/rss_gib"}
FIT_METRICS = {"memory/predicted_gib", "memory/need_gib", "memory/rank0/peak_rss_gib", "memory/rank1/peak_rss_gib"}
"""The trainer's memory prediction beside each rank's measured peak (VmHWM on CPU)."""



def _only_run(home: Path):
    runs = RunStore(home).list_runs() if (home / "runs.db").exists() else []
    return runs[0] if runs else None


def _step(home: Path) -> int:
    run = _only_run(home)
    return (run.step or 0) if run else 0


def _check_records_equal_the_nodes(home: Path, run_id: str) -> None:
    """The local record is what the node wrote, byte for byte, and MLflow has it all, once."""
    from mlflow import MlflowClient

    record = RunStore(home).get_run(run_id)
    assert record.summary.state == RunState.SUCCEEDED, record.transitions[-3:]
    assert record.summary.step == STEPS and record.summary.max_steps == STEPS
    node_dir = Path(record.nodes[0].node_dir)
    for name, mirror in (("node.log", record.directory / "nodes" / "0.log"),
                         ("metrics.jsonl", record.directory / "metrics.jsonl")):
        assert mirror.read_bytes() == (node_dir / name).read_bytes(), name
    state = json.loads((node_dir / "state.json").read_text())
    duration = record.summary.ended_at - record.summary.started_at
    # An adopted run's end is recorded when its adopter catches up: the commands' start-up on a busy machine.
    assert abs(duration - (state["ended_at"] - state["started_at"])) < 45, (duration, state)
    # The store says the run ended as its owner records it; the record's last line follows within moments.
    def finished() -> int:
        lines = (record.directory / "events.jsonl").read_text().splitlines()
        return [json.loads(x)["type"] for x in lines].count("RunFinished")

    wait_until(finished, 30, "the run's end in its events")
    assert finished() == 1

    wait_tracked(home, run_id)
    client = MlflowClient(tracking_uri=f"sqlite:///{home / 'mlflow.db'}")
    [mlrun] = client.search_runs([client.get_experiment_by_name("tiny-cpu-demo").experiment_id])
    assert mlrun.info.status == "FINISHED"
    assert set(mlrun.data.metrics) >= MONITOR_METRICS | FIT_METRICS, sorted(mlrun.data.metrics)
    predicted = mlrun.data.metrics["memory/predicted_gib"]
    assert mlrun.data.tags["fsdp_tui.memory_predicted"].startswith(f"{predicted:.2f} GiB a rank predicted (process; ")
    peak_rank, peak = max(((r, mlrun.data.metrics[f"memory/rank{r}/peak_rss_gib"]) for r in (0, 1)), key=lambda x: x[1])
    said = cli(home, "show", run_id).stdout  # show: the same prediction beside the same highest peak
    assert f"memory    peak {peak:.2f} GiB (rank {peak_rank} of 2) against {predicted:.2f} GiB predicted" in said, said
    train_steps = [json.loads(x)["step"] for x in (node_dir / "metrics.jsonl").read_text().splitlines()
                   if json.loads(x).get("kind", "train") == "train"]
    history = client.get_metric_history(mlrun.info.run_id, "loss")
    assert sorted(m.step for m in history) == sorted(train_steps), "every loss point once"
    artifacts = {a.path for a in client.list_artifacts(mlrun.info.run_id)}
    assert {"0.log", "metrics.jsonl", "workload.yaml"} <= artifacts, artifacts


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_the_app_killed_mid_run_leaves_a_run_that_ends_and_records_itself(tmp_path):
    home = tmp_path / "home"
    session = f"fsdp-owner-{os.getpid()}"
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in cli_env(home, TERM="xterm-256color").items()
                   if k.startswith(("FSDP_TUI_", "TERM", "PATH", "HOME")))
    cmd = (f"cd {shlex.quote(str(ROOT))} && exec env {env} {FSDP_TUI} run sample_workloads/tiny_cpu.yaml "
           f"--set parameters.max_steps={STEPS} {' '.join(SHORT)} "
           f"--set parameters.output_dir={shlex.quote(str(tmp_path / 'out'))}")
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "150", "-y", "45", cmd], check=True)
    try:
        app_pid = int(subprocess.run(["tmux", "display", "-p", "-t", session, "#{pane_pid}"],
                                     capture_output=True, text=True, check=True).stdout)
        wait_until(lambda: _step(home) >= KILL_AT, 240, f"step {KILL_AT}")
        os.kill(app_pid, signal.SIGKILL)  # the app dies; nothing else is opened afterwards
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
    run_id = _only_run(home).run_id
    assert tagged(run_id), "the job goes on without the app"
    wait_until(lambda: _only_run(home).state.is_final, 300, "the run to end on its own")
    listed = json.loads(cli(home, "runs", "--json").stdout)
    assert listed[0]["state"] == "succeeded" and listed[0]["step"] == STEPS
    _check_records_equal_the_nodes(home, run_id)
    assert tagged(run_id) == []


def test_a_killed_owner_is_adopted_by_exactly_one_of_two_commands_and_catches_up_exactly(tmp_path):
    home = tmp_path / "home"
    proc = subprocess.Popen([FSDP_TUI, "run", "sample_workloads/tiny_cpu.yaml", "--json",
                             "--set", f"parameters.max_steps={STEPS}", *SHORT,
                             "--set", f"parameters.output_dir={tmp_path / 'out'}"],
                            stdout=subprocess.DEVNULL, env=cli_env(home), cwd=ROOT)
    try:
        wait_until(lambda: _step(home) >= KILL_AT, 240, f"step {KILL_AT}")
        run_id = _only_run(home).run_id
        owner = int((home / "runs" / run_id / "owner.lock").read_text())
        os.kill(owner, signal.SIGKILL)  # the run's supervisor dies mid-run
        proc.kill()  # and the follower with it: nothing watches the run any more
        node_dir = Path(RunStore(home).get_run(run_id).nodes[0].node_dir)
        wait_until(lambda: json.loads((node_dir / "state.json").read_text()).get("state") == "exited", 300,
              "the job to end on the node")
        assert not RunStore(home).get_run(run_id).summary.state.is_final, "nobody recorded the end yet"
        # Two commands look at the same moment: both find the orphan, exactly one adopts it.
        lookers = [subprocess.Popen([FSDP_TUI, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                    env=cli_env(home), cwd=ROOT) for args in (("runs", "--json"), ("logs", run_id))]
        for looker in lookers:
            assert looker.wait(timeout=120) == 0, looker.stderr.read()
        wait_until(lambda: _only_run(home).state.is_final, 120, "the adopted run to be caught up")
        _check_records_equal_the_nodes(home, run_id)
        transitions = [t[3] for t in RunStore(home).get_run(run_id).transitions]
        assert sum("re-attached" in t for t in transitions) == 1, transitions
    finally:
        proc.kill()


def test_a_spawned_owner_imports_this_tree_and_nothing_inside_it_shadows_the_standard_library():
    """The owner's PYTHONPATH is the folder above the ``launcher`` package (``launcher/secrets.py`` on the
    path would hide the standard library's ``secrets`` from MLflow and from every job)."""
    import launcher
    from launcher.runs.core.ownership import ROOT

    assert Path(launcher.__file__).resolve().parent.parent == ROOT
