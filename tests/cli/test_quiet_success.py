"""Commands that succeed say nothing alarming: a tiny local run, then export, doctor and resume on it, each a
real process whose stderr must hold no traceback (the agent's process is reaped before the event loop ends)."""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.support.cli import FSDP_TUI, ROOT, cli_env, write_workload

pytestmark = pytest.mark.slow


ALARMS = ("Traceback", "Exception ignored", "Event loop is closed")


def _start(home, *args) -> subprocess.Popen:
    return subprocess.Popen([FSDP_TUI, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=cli_env(home), cwd=ROOT)


def _finish(proc: subprocess.Popen) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=300)
    assert not any(alarm in err for alarm in ALARMS), f"{proc.args[1]}:\n{err}"
    return proc.returncode, out, err


def test_export_doctor_and_resume_end_without_a_traceback(home, tmp_path):
    text = (ROOT / "sample_workloads" / "tiny_cpu.yaml").read_text()
    text = text.replace("procs_per_node: 2", "procs_per_node: 1").replace("num_accelerators: 2", "num_accelerators: 1")
    text = text.replace("max_steps: 200", "max_steps: 2").replace("every_steps: 100", "every_steps: 2")
    text = text.replace("eval_every_steps: 25", "eval_every_steps: 1000")
    text = text.replace("keep_last: 2", "keep_last: 2\n    export_hf: false")  # export is the command's job here
    workload = write_workload(tmp_path, text)
    # Two at a time, to keep the test short: doctor beside the run, export beside the resume.
    ran, doctor = _start(home, "run", workload, "--watch"), _start(home, "doctor", workload, "--json")
    code, out, err = _finish(ran)
    assert code == 0, out[-2000:] + err[-2000:]
    run_id = re.search(r"^-- run ([\w-]+)[: ]", out + err, re.M).group(1)
    assert _finish(doctor)[0] == 0

    exported = _start(home, "export", run_id, "--to", tmp_path / "hf")
    resumed = _start(home, "resume", run_id, "--from", "2", "--set", "parameters.max_steps=3",
                     "--watch")  # from its last step, trained a step further
    code, out, err = _finish(resumed)
    assert code == 0 and "resuming from" in err, out[-2000:] + err[-2000:]
    code, _, err = _finish(exported)
    assert code == 0 and (tmp_path / "hf" / "config.json").exists(), err
    supervisors = list(home.glob("runs/*/supervisor.log"))
    assert len(supervisors) == 2 and not any(alarm in p.read_text() for p in supervisors for alarm in ALARMS)
