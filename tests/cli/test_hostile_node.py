"""A job that turns hostile on its own node (this machine, the real CLI): it names checkpoint folders with
terminal controls, ``#`` and ``: ``, plants links among them (one to ``/``), and writes an error with OSC
title and clipboard sequences into its node's ``state.json``. No command prints a control sequence of
it, the links are listed as links (never walked, never "newest"), and ``resume`` resumes exactly the
folder named with ``#`` and ``: ``."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import time

import pytest

from tests.support.cli import FSDP_TUI, ROOT, cli, cli_env, write_workload
from tests.support.hostile import reached_terminal_safely

pytestmark = pytest.mark.slow


JOB = r'''
import json, os, sys, time
import yaml

params = yaml.safe_load(open(os.environ["HYPERPARAMETERS_PATH"]))
resume = (params.get("checkpoint") or {}).get("resume")
if resume:
    print("RESUME=" + resume)
    print("EXISTS=%s" % os.path.isfile(os.path.join(resume, "meta.json")))
    sys.exit(0)
root = os.path.join(params["output_dir"], "checkpoints")


def ckpt(name, step, where=root):
    d = os.path.join(where, name)
    os.makedirs(d)
    for f in (".metadata", "meta.json"):
        with open(os.path.join(d, f), "w") as out:
            json.dump({"step": step}, out)
    return d


ckpt("step-00000009-\x1b]2;PWNED\x07x", 9)
ckpt("step-00000011-a #b: c", 11)
os.symlink("/", os.path.join(root, "step-00000006"))
os.symlink(ckpt("planted", 30, where="elsewhere"), os.path.join(root, "step-00000030"))
with open("state.json") as f:
    state = json.load(f)
state.update(state="exited", exit_code=3,
             error="the disk says \x1b]2;PWNED\x07\x1b]52;c;UFdORUQ=\x07\x1b]0;PWNED\x1b\\ no")
with open("state.json.tmp", "w") as f:
    json.dump(state, f)
os.replace("state.json.tmp", "state.json")
time.sleep(60)
'''


def _safe(out: str) -> bool:
    return reached_terminal_safely(out, keep_colour=True) and "PWNED" not in out and "\x1b]" not in out


def _here(capsys, *args: str) -> tuple[int, str]:
    """A short command in this process (the launches run as the real console script)."""
    from launcher.cli.main import main

    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out + out.err


def test_a_hostile_job_reaches_no_terminal_and_resume_takes_the_exact_folder(tmp_path, home, monkeypatch, capsys):
    monkeypatch.setenv("FSDP_TUI_HOME", str(home))
    (tmp_path / "job.py").write_text(JOB)
    wl = write_workload(tmp_path, f"experiment_name: hostile-node\ncommand: python3 {tmp_path / 'job.py'}\n"
                                  "mlflow: {enabled: false}\nparameters:\n  output_dir: out\n")
    watch = cli(home, "run", wl, "--watch", timeout=180)
    assert watch.returncode != 0 and _safe(watch.stdout + watch.stderr)
    assert "the disk says" in watch.stdout + watch.stderr and "Traceback" not in watch.stderr

    [row] = json.loads(_here(capsys, "runs", "--json")[1])
    run_id = row["run_id"]
    shown = {}
    for args in (("runs",), ("show", run_id), ("ckpt", run_id)):
        code, shown[args[0]] = _here(capsys, *args)
        assert code == 0 and _safe(shown[args[0]]), (args, shown[args[0]])
    assert "the disk says" in shown["show"]
    listing = shown["ckpt"]
    rows = {line.split()[-1]: line.split()[1] for line in listing.splitlines()[2:]}
    assert rows["step-00000006"] == rows["step-00000030"] == "link" and rows["c"] == "yes"
    assert "step-00000009-x" in listing and "step-00000011-a #b: c" in listing

    if shutil.which("tmux"):
        _titles_stay(home, run_id, tmp_path)

    resumed = cli(home, "resume", run_id, "--json", timeout=180)
    assert resumed.returncode == 0, resumed.stderr
    path = resumed.stderr.split("resuming from ", 1)[1].splitlines()[0]
    assert path.endswith("/out/checkpoints/step-00000011-a #b: c")
    new_id = next(r["run_id"] for r in json.loads(_here(capsys, "runs", "--json")[1]) if r["run_id"] != run_id)
    log = _here(capsys, "logs", new_id)[1]
    assert f"RESUME={path}\n" in log and "EXISTS=True" in log


def _titles_stay(home, run_id: str, tmp_path) -> None:
    """``show`` and ``ckpt`` in a real terminal (tmux): its title stays and its clipboard stays empty."""
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in cli_env(home).items() if k.startswith("FSDP_TUI_"))
    server = f"fsdp-tui-node-{tmp_path.name[-12:]}"
    cmd = (f"cd {shlex.quote(str(ROOT))} && {env} {FSDP_TUI} show {run_id}; {env} {FSDP_TUI} ckpt {run_id}; "
           "echo DONE; sleep 60")
    subprocess.run(["tmux", "-L", server, "-f", "/dev/null", "new-session", "-d", "-s", "t", "-x", "160", "-y", "45",
                    cmd], check=True)
    try:
        for option in (("set-option", "-g", "set-clipboard", "on"), ("set-option", "-g", "allow-rename", "on"),
                       ("select-pane", "-t", "t", "-T", "clean-title")):
            subprocess.run(["tmux", "-L", server, *option], capture_output=True)
        end = time.monotonic() + 120
        while "DONE" not in subprocess.run(["tmux", "-L", server, "capture-pane", "-t", "t", "-p"],
                                           capture_output=True, text=True).stdout:
            assert time.monotonic() < end, "show and ckpt never finished in tmux"
            time.sleep(0.3)
        titles = subprocess.run(["tmux", "-L", server, "list-panes", "-a", "-F", "#{pane_title}|#{window_name}"],
                                capture_output=True, text=True).stdout.split()
        assert titles and all(t.startswith("clean-title|") and "PWNED" not in t for t in titles), titles
        assert subprocess.run(["tmux", "-L", server, "list-buffers"], capture_output=True, text=True).stdout == ""
    finally:
        subprocess.run(["tmux", "-L", server, "kill-server"], capture_output=True)
