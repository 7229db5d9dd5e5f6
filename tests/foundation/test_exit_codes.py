"""docs/commands.md's exit codes, walked row by row against the real CLI.

Every row of its "Exit codes" table is a (command, code) pair; each has a scenario here that makes the real
CLI give that code, in one data dir shared by all of them: real runs on this machine (``command:`` jobs,
no torch), a real sshd for ``trust``, a stand-in ``nvidia-smi`` for ``gpus`` (no GPU here), an address
where nothing listens for a node that does not answer. Most calls go through ``launcher.cli.main.main``
in this process (the parser and handlers ``fsdp-tui`` runs); those that need a signal, stdin or a child
of their own run ``fsdp-tui`` itself. A code a scenario of this file cannot afford names the test that
checks it (``ELSEWHERE``). The table must name every command, and no scenario may check a row it lacks."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from launcher.cli.main import ALIASES, COMMANDS

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
FSDP_TUI = str(Path(sys.executable).with_name("fsdp-tui"))
NOWHERE = "127.0.0.9:1"
"""A node that does not answer (nothing listens there): refused at once."""


def table() -> list[tuple[str, int, str]]:
    text = (ROOT / "docs" / "commands.md").read_text()
    section = text.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([a-z]+)` \| (\d+) \| (.*) \|$", section, re.M)
    return [(command, int(code), when) for command, code, when in rows]


ELSEWHERE = {
    ("nettest", 0): ("tests/nettest/test_nettest_runs.py", "test_local_two_processes_give_a_report_and_a_kept_record",
                     "assert out.returncode == 0"),
}
"""Rows a real torchrun interconnect test checks (tens of seconds): the test, and the line that checks it."""


@dataclass
class World:
    home: Path
    tmp: Path
    ids: dict[str, str]
    env: dict[str, str]

    def cli(self, *args: str, stdin: str | None = None, **env: str) -> tuple[int, str, str]:
        """``fsdp-tui ARGS`` in this process (the real parser and handlers)."""
        from launcher.cli.main import main

        out, err = io.StringIO(), io.StringIO()
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        old_stdin = sys.stdin
        if stdin is not None:
            sys.stdin = io.StringIO(stdin)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    code = main([str(a) for a in args])
                except SystemExit as exit_:
                    code = exit_.code if isinstance(exit_.code, int) else 2
        finally:
            sys.stdin = old_stdin
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        return code, out.getvalue(), err.getvalue()

    def proc(self, *args: str, **kwargs) -> subprocess.Popen:
        return subprocess.Popen([FSDP_TUI, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env={**os.environ, **self.env}, cwd=ROOT, **kwargs)

    def file(self, name: str, text: str) -> Path:
        path = self.tmp / name
        path.write_text(text)
        return path

    def newest(self) -> str:
        return json.loads(self.cli("runs", "--json")[1])[0]["run_id"]


def interrupted(world: World, *args: str) -> int:
    """``fsdp-tui ARGS`` followed, then Ctrl-C once it says how to leave."""
    proc = world.proc(*args)
    said = ""
    deadline = time.monotonic() + 120
    while "Ctrl-C" not in said and time.monotonic() < deadline:
        said += proc.stderr.readline()
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=120)
    return proc.returncode


OK = """experiment_name: exit-ok
mlflow: {enabled: false}
parameters: {output_dir: outputs}
command: |
  mkdir -p outputs/checkpoints/step-00000005 outputs/hf/step-00000005
  touch outputs/checkpoints/step-00000005/.metadata outputs/hf/step-00000005/model.safetensors
  echo '{"step": 5}' > outputs/checkpoints/step-00000005/meta.json
  echo '{}' > outputs/hf/step-00000005/config.json
  echo done
"""
FAILS = "experiment_name: exit-fails\nmlflow: {enabled: false}\ncommand: exit 3\n"
SLOW = "experiment_name: exit-slow\nmlflow: {enabled: false}\ntimeout_minutes: 0.02\ncommand: sleep 60\n"
LIVE = ("experiment_name: exit-live\nmlflow: {enabled: false}\n"
        "command: python3 -c 'import time; [time.sleep(1) for _ in range(600)]'\n")
SWEEP = ("experiment_name: exit-sweep\nmlflow: {enabled: false}\ncommand: exit 3\n"
         "sweep: {grid: {env_variables.X: ['1']}}\n")
LIVE_SWEEP = LIVE.replace("exit-live", "exit-live-sweep") + "sweep: {grid: {env_variables.X: ['1', '2']}}\n"
INVALID = "experiment_name: x\nmax_retries: many\ncommand: x\n"
NOWHERE_RUN = f"""experiment_name: exit-nowhere
mlflow: {{enabled: false}}
compute: {{hosts: ['{NOWHERE}', '{NOWHERE.replace("9:", "10:")}']}}
ssh: {{connect_timeout_s: 3}}
parameters: {{output_dir: /tmp/nowhere-out}}
command: echo never
"""


UNTRACKED = f"experiment_name: exit-untracked\nmlflow: {{tracking_uri: 'http://{NOWHERE}'}}\ncommand: echo never\n"


def _recorded_untracked(world: World) -> str:
    """A finished run whose tracking server does not answer: what its owner could not send waits."""
    from launcher.events import RunState
    from launcher.runs.core.store import RunStore
    from launcher.runs.launch import create_run
    from launcher.workload.load import plan_file

    plan = plan_file(world.file("untracked.yaml", UNTRACKED), [], home=world.home).plan
    create_run(plan, world.home)
    RunStore(world.home).set_state(plan.run_id, RunState.SUCCEEDED, 1)
    return plan.run_id


def _recorded_nowhere(world: World) -> str:
    """A finished run whose nodes do not answer (its record, as the launcher writes one)."""
    from launcher.events import RunState
    from launcher.runs.core.store import RunStore
    from launcher.runs.launch import create_run
    from launcher.workload.load import plan_file

    plan = plan_file(world.file("nowhere.yaml", NOWHERE_RUN), [], home=world.home).plan
    create_run(plan, world.home)
    store = RunStore(world.home)
    store.set_state(plan.run_id, RunState.RUNNING, 1)
    store.set_state(plan.run_id, RunState.FAILED, 1, "lost")
    return plan.run_id


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("exit-codes")
    home = tmp / "home"
    home.mkdir()
    env = {"FSDP_TUI_HOME": str(home), "FSDP_TUI_ASSETS": os.environ.get("FSDP_TUI_TEST_ASSETS",
                                                                          "/tmp/fsdp-tui-test-assets")}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    w = World(home, tmp, {}, env)
    hosts = None
    try:
        from tests.support.sshd import start_hosts

        try:
            hosts = start_hosts(tmp / "ssh", 1)
        except RuntimeError:
            hosts = None
        w.ids["hosts"] = hosts
        yield w
    finally:
        for kind in ("live", "live2"):
            if kind in w.ids:
                w.cli("cancel", w.ids[kind])
        if "live_sweep" in w.ids:
            w.cli("sweep", "cancel", w.ids["live_sweep"])
        if hosts is not None:
            from tests.support.sshd import stop_hosts

            stop_hosts(hosts[1])
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def scenarios() -> list[tuple[str, int, Callable[[World], int]]]:
    """(command, code, what gives that code), in the order they run: each may use what earlier ones made."""
    def c(*args, **kw):
        return lambda w: w.cli(*args, **kw)[0]

    def run_ok(w):
        code, _, said = w.cli("run", w.file("ok.yaml", OK), "--watch")
        w.ids["ok"] = w.newest()
        w.ids["said"] = said
        return code

    def run_fails(w):
        code = w.cli("run", w.file("fails.yaml", FAILS), "--watch")[0]
        w.ids["fails"] = w.newest()
        return code

    def run_live(w):
        code = interrupted(w, "run", w.file("live.yaml", LIVE), "--watch")
        w.ids["live"] = w.newest()
        return code

    def sweep_live(w):
        code = interrupted(w, "sweep", w.file("live-sweep.yaml", LIVE_SWEEP))
        w.ids["live_sweep"] = json.loads(w.cli("sweeps", "--json")[1])[0]["sweep_id"]
        return code

    def cleaned(w):
        """The failed run's folder removed: it has served every scenario that reads it by now."""
        w.ids["cleaned"] = w.ids["fails"]
        return w.cli("clean", w.ids["cleaned"])[0]

    def nowhere(w):
        w.ids["nowhere"] = _recorded_nowhere(w)
        return w.cli("logs", w.ids["nowhere"], "--rank", "0")[0]

    def smi(w):
        bin_dir = w.tmp / "bin"
        bin_dir.mkdir(exist_ok=True)
        (bin_dir / "nvidia-smi").write_text("#!/bin/sh\ncase \"$1\" in\n  --query-gpu=*) "
                                            "echo '0, GPU-1, NVIDIA H100 80GB HBM3, 4, 81559' ;;\nesac\n")
        (bin_dir / "nvidia-smi").chmod(0o755)
        return w.cli("gpus", "localhost", PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")[0]

    def trust_known(w):
        if w.ids["hosts"] is None:
            pytest.skip("no sshd here for trust's 0")
        client, _ = w.ids["hosts"]
        return w.cli("trust", "node0", "--yes", HOME=str(client))[0]

    def nettest_fails(w):
        nopy = ("experiment_name: exit-nopy\nmlflow: {enabled: false}\ncompute: {accelerator_type: CPU, "
                "procs_per_node: 1}\nenvironment: {python: /nonexistent/python3}\ncommand: echo never\n")
        code = w.cli("nettest", w.file("nopy.yaml", nopy), "--quick", "--phase-deadline", "20")[0]
        w.ids["nettest"] = json.loads(w.cli("nettests", "--json")[1])[0]["run_id"]
        return code

    def notify_settings(w):
        (w.home / "settings.json").write_text(json.dumps({"notify": {"command": "true"}}))
        return w.cli("notify", "test")[0]

    def empty_secret(w):
        proc = w.proc("secrets", "set", "team/empty", stdin=subprocess.PIPE)
        proc.communicate("", timeout=60)
        return proc.returncode

    def export_to_existing(w):
        (w.tmp / "there").mkdir(exist_ok=True)
        return w.cli("export", w.ids["ok"], "--to", w.tmp / "there")[0]

    def resumed(w):
        code, out, _ = w.cli("resume", w.ids["ok"])
        w.ids["resumed"] = out.split()[0]
        return code

    def exported(w):
        code, out, err = w.cli("export", w.ids["ok"])
        w.ids["export_said"] = out + err
        return code

    def not_launched(w):
        """A missing file, a secret with no value, no torch for the built-in trainer: 2 each, nothing left."""
        notorch = w.file("notorch.yaml", "experiment_name: notorch\nmlflow: {enabled: false}\n"
                                        "environment: {python: /usr/bin/python3}\ncompute: {accelerator_type: CPU}\n"
                                        "parameters: {model_name: builtin:tiny-llama, dataset_name: "
                                        "builtin:tiny-alpaca, output_dir: outputs}\n")
        nosecret = w.file("nosecret.yaml", "experiment_name: nosecret\nsecrets: {T: team/none}\ncommand: 'true'\n")
        before = w.cli("runs", "--json")[1]
        codes = {w.cli("run", "no-such-file.yaml")[0], w.cli("run", nosecret, "--watch")[0]}
        if subprocess.run(["/usr/bin/python3", "-c", "import torch"], capture_output=True).returncode != 0:
            codes.add(w.cli("run", notorch, "--watch")[0])
        return codes.pop() if len(codes) == 1 and w.cli("runs", "--json")[1] == before else -1

    def missing(name):
        return lambda w: w.cli(name, "nosuch-run")[0]

    def quarantined(w):
        """A host a run's owner counted twice (as a swap would), listed, then lifted: 0 both times."""
        from launcher.runs.core.quarantine import count_failure

        for _ in range(2):
            count_failure(w.home, "gpu-07", "some-run", "node 3 (gpu-07): lost", 2)
        listed, out, _ = w.cli("quarantine")
        lifted = w.cli("quarantine", "lift", "gpu-07")[0]
        return listed if "gpu-07: quarantined" in out and lifted == listed else -1

    return [
        ("validate", 0, lambda w: w.cli("validate", w.file("ok.yaml", OK))[0]),
        ("validate", 1, lambda w: w.cli("validate", w.file("invalid.yaml", INVALID))[0]),
        ("validate", 2, c("validate", "no-such-file.yaml")),
        ("schema", 0, c("schema")),
        ("run", 0, run_ok),
        ("run", 1, run_fails),
        ("run", 124, lambda w: w.cli("run", w.file("slow.yaml", SLOW), "--watch")[0]),
        ("run", 2, not_launched),
        ("run", 130, run_live),
        ("runs", 0, c("runs")),
        ("show", 0, lambda w: w.cli("show", w.ids["ok"])[0]),
        ("show", 2, missing("show")),
        ("logs", 0, lambda w: w.cli("logs", w.ids["ok"])[0]),
        ("logs", 1, nowhere),
        ("logs", 2, lambda w: w.cli("logs", w.ids["ok"], "--rank", "9")[0]),
        ("ckpt", 0, lambda w: w.cli("ckpt", w.ids["ok"])[0]),
        ("ckpt", 1, lambda w: w.cli("ckpt", w.ids["nowhere"])[0]),
        ("ckpt", 2, missing("ckpt")),
        ("export", 0, exported),
        ("export", 1, lambda w: w.cli("export", w.ids["fails"])[0]),
        ("export", 2, export_to_existing),
        ("relaunch", 0, lambda w: w.cli("relaunch", w.ids["ok"])[0]),
        ("relaunch", 1, lambda w: w.cli("relaunch", w.ids["fails"], "--watch")[0]),
        ("relaunch", 2, missing("relaunch")),
        ("resume", 0, resumed),
        ("resume", 2, lambda w: w.cli("resume", w.ids["fails"])[0]),
        ("ssh", 0, lambda w: w.cli("ssh", w.ids["ok"], "--", "true")[0]),
        ("compare", 0, lambda w: w.cli("compare", w.ids["ok"], w.ids["fails"])[0]),
        ("compare", 2, lambda w: w.cli("compare", w.ids["ok"], "nosuch-run")[0]),
        ("clean", 0, cleaned),
        ("ssh", 1, lambda w: w.cli("ssh", w.ids["cleaned"], "--", "true")[0]),
        ("ssh", 2, lambda w: w.cli("ssh", w.ids["ok"], "7")[0]),
        ("clean", 1, lambda w: w.cli("clean", w.ids["nowhere"])[0]),
        ("clean", 2, missing("clean")),
        ("stacks", 0, lambda w: w.cli("stacks", w.ids["live"], "--timeout", "90")[0]),
        ("stacks", 1, lambda w: w.cli("stacks", w.ids["ok"])[0]),
        ("stacks", 2, missing("stacks")),
        ("rm", 0, lambda w: w.cli("rm", w.ids["cleaned"])[0]),
        ("rm", 1, lambda w: w.cli("rm", w.ids["live"])[0]),
        ("rm", 2, missing("rm")),
        ("repair", 1, c("repair", "--force")),
        ("repair", 0, c("repair")),
        ("cancel", 1, lambda w: w.cli("cancel", w.ids["ok"])[0]),
        ("cancel", 2, missing("cancel")),
        ("cancel", 0, lambda w: w.cli("cancel", w.ids.pop("live"))[0]),
        ("secrets", 0, c("secrets", "list")),
        ("secrets", 1, c("secrets", "rm", "team/never-stored")),
        ("secrets", 2, empty_secret),
        ("trust", 0, trust_known),
        ("trust", 1, c("trust", NOWHERE, "--yes")),
        ("trust", 2, c("trust", "bad host!")),
        ("doctor", 0, lambda w: w.cli("doctor", w.file("ok.yaml", OK))[0]),
        ("doctor", 1, lambda w: w.cli("doctor", w.file(
            "nopython.yaml", OK + "environment: {python: /nonexistent/python3}\n"))[0]),
        ("doctor", 2, lambda w: w.cli("doctor", w.file("invalid.yaml", INVALID))[0]),
        ("sweep", 0, lambda w: w.cli("sweep", w.file("sweep.yaml", SWEEP), "--dry-run")[0]),
        ("sweep", 1, lambda w: w.cli("sweep", w.file("sweep.yaml", SWEEP))[0]),
        ("sweep", 2, c("sweep", "show", "nosuch-sweep")),
        ("sweep", 130, sweep_live),
        ("sweeps", 0, c("sweeps")),
        ("mlflow", 0, lambda w: w.cli("mlflow", "sync", w.ids["ok"])[0]),
        ("mlflow", 1, lambda w: w.cli("mlflow", "sync", _recorded_untracked(w))[0]),
        ("mlflow", 2, c("mlflow", "sync", "nosuch-run")),
        ("nettest", 1, nettest_fails),
        ("nettest", 2, c("nettest", "no-such-file.yaml")),
        ("nettests", 0, c("nettests")),
        ("nettests", 1, lambda w: w.cli("nettests", w.ids["nettest"])[0]),
        ("nettests", 2, c("nettests", "nosuch-test")),
        ("notify", 0, notify_settings),
        ("notify", 1, lambda w: w.cli("notify", "test", w.file(
            "loud.yaml", "experiment_name: t\ncommand: 'true'\nnotify: {command: 'exit 4', retries: 0}\n"))[0]),
        ("notify", 2, lambda w: w.cli("notify", "test", w.file("invalid.yaml", INVALID))[0]),
        ("eject", 0, lambda w: w.cli("eject", w.file("ok.yaml", OK), "--to", "skypilot")[0]),
        ("eject", 1, lambda w: w.cli("eject", w.file("ok.yaml", OK), "--to", "skypilot", "-o",
                                     w.tmp / "no" / "such" / "dir" / "task.yaml")[0]),
        ("eject", 2, lambda w: w.cli("eject", w.file("invalid.yaml", INVALID), "--to", "skypilot")[0]),
        ("gpus", 0, smi),
        ("gpus", 1, c("gpus", NOWHERE)),
        ("gpus", 2, lambda w: w.cli("gpus", w.file("invalid.yaml", INVALID))[0]),
        ("quarantine", 0, quarantined),
        ("quarantine", 1, c("quarantine", "lift", "never-failed")),
        ("quarantine", 2, c("quarantine", "lift")),
    ]


def test_the_table_names_every_command_and_every_scenario_checks_a_row():
    rows = {(command, code) for command, code, _ in table()}
    assert {command for command, _ in rows} == set(COMMANDS) | set(ALIASES)
    checked = {(command, code) for command, code, _ in scenarios()} | set(ELSEWHERE)
    assert checked == rows, {"not documented": checked - rows, "not checked": rows - checked}
    for (command, code), (path, name, line) in ELSEWHERE.items():
        source = (ROOT / path).read_text()
        body = source.split(f"def {name}(", 1)[1].split("\ndef ", 1)[0]
        assert line in body, (command, code, path, name)


def test_every_documented_exit_code_is_what_the_cli_gives(world):
    documented = {(command, code): when for command, code, when in table()}
    wrong = []
    for command, code, scenario in scenarios():
        got = scenario(world)
        if got != code:
            wrong.append(f"fsdp-tui {command}: documented {code} ({documented[(command, code)]}), got {got}")
    assert not wrong, "\n".join(wrong)


def test_what_the_walk_was_told(world):
    """Words the walk's commands printed: a followed run's end said once; an export of a step the trainer
    exported itself reuses that folder; show names the run and step a resumed run started from."""
    if "said" not in world.ids:
        pytest.skip("the walk did not run in this session")
    ends = [line for line in world.ids["said"].splitlines() if line.startswith("-- run ") and "succeeded" in line]
    assert len(ends) == 1, world.ids["said"]
    assert "the trainer exported step-00000005 itself" in world.ids["export_said"]
    assert "node-0/outputs/hf/step-00000005\n" in world.ids["export_said"]
    shown = world.cli("show", world.ids["resumed"])[1]
    assert f"resumed   from step 5 of run {world.ids['ok']}: " in shown, shown
