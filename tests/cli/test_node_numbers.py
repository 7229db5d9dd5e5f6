"""Numbers read from text are ASCII digits only, everywhere: a node's, a rank's, a step's, a count. Python's
``str.isdigit()`` is true for ``²`` (which ``int()`` refuses: it was a traceback) and ``int()`` reads ``١``
(Arabic-Indic one) as 1 (it reached node 1). Table-driven, then the commands, in this process."""

from __future__ import annotations

import pytest

from launcher.runs.core.layout import save_plan
from launcher.runs.core.store import RunStore
from launcher.runs.gpu_holders import parse_holders
from launcher.workload.plan import build_plan
from launcher.workload.validate import validate_text
from trainer.wire.ckpt_layout import ascii_int, step_of_name


@pytest.mark.parametrize(("text", "number"), [
    ("0", 0), ("1", 1), ("12", 12), ("007", 7),
    ("²", None), ("١", None), ("٢٢", None), ("１", None), ("1²", None), ("", None), ("-1", None), ("+1", None),
    (" 1", None), ("1.0", None), ("1_000", None), pytest.param("9" * 5000, None, id="5000 digits"),  # past int()'s digits: no crash
])
def test_a_number_is_ascii_digits(text, number):
    assert ascii_int(text) == number


@pytest.mark.parametrize(("name", "step"), [
    ("step-00000006", 6), ("step-00000006-2", 6), ("step-²", None), ("step-١", None), ("step-", None),
])
def test_a_checkpoint_folder_named_with_other_digits_is_no_checkpoint(name, step):
    assert step_of_name(name) == step


def test_a_nodes_gpu_table_with_other_digits_is_read_without_them():
    gpus = "0, GPU-aaa, H100\n²,GPU-bbb, H100\n"
    apps = "GPU-aaa, 4242, python, 100 MiB\nGPU-aaa, ١٢, python, 5 MiB\n"
    holders, count = parse_holders("gpu-a", gpus, apps, {})
    assert [(h.gpu, h.pid) for h in holders] == [(0, 4242)] and count == 1  # the row it cannot read is not counted


@pytest.fixture
def run_on_two_nodes(home, monkeypatch):
    monkeypatch.setenv("FSDP_TUI_HOME", str(home))
    text = ("experiment_name: numbers\ncompute: {accelerator_type: CPU, procs_per_node: 1, num_accelerators: 2, "
            "hosts: [gpu-a, gpu-b]}\ncommand: echo\n")
    plan = build_plan(validate_text(text, "w.yaml").workload, run_id="20260301-090000-numbers-ab12")
    save_plan(RunStore(home).create_run(plan, None, text), plan)
    return plan.run_id


@pytest.mark.parametrize("args", [("ssh", "{run}", "²"), ("ssh", "{run}", "١"), ("ssh", "{run}", "٢")])
def test_ssh_to_a_node_named_with_other_digits_is_one_line(run_on_two_nodes, capsys, args):
    from launcher.cli.main import main

    code = main([a.format(run=run_on_two_nodes) for a in args])
    err = capsys.readouterr().err
    assert code == 2 and err == (f"fsdp-tui ssh: '{args[-1]}' is not a node number: run {run_on_two_nodes} has "
                                 "nodes 0-1 (digits 0-9)\n")


HUGE = "9" * 5000


@pytest.mark.parametrize(("node", "said"), [
    ("٣", "'٣' is not a node number: run {run} has nodes 0-1 (digits 0-9)"),
    (" 1", "' 1' is not a node number: run {run} has nodes 0-1 (digits 0-9)"),
    ("1 ", "'1 ' is not a node number: run {run} has nodes 0-1 (digits 0-9)"),
    ("+1", "'+1' is not a node number: run {run} has nodes 0-1 (digits 0-9)"),
    ("1e3", "'1e3' is not a node number: run {run} has nodes 0-1 (digits 0-9)"),
    ("-1", "'-1' is not a node number: run {run} has nodes 0-1 (digits 0-9)"),
    ("1.0", "'1.0' is not a node number: run {run} has nodes 0-1 (digits 0-9)"),
    ("1_000", "'1_000' is not a node number: run {run} has nodes 0-1 (digits 0-9)"),
    ("²", "'²' is not a node number: run {run} has nodes 0-1 (digits 0-9)"),
    pytest.param("9" * 30, "run {run} has nodes 0-1", id="30 digits"),
    pytest.param(HUGE, f"'{HUGE[:40]}...' (5000 characters) is not a node number: run {{run}} has nodes 0-1 "
                 "(digits 0-9)", id="5000 digits"),
    ("2", "run {run} has nodes 0-1"),
])
def test_ssh_reads_node_by_the_one_number_rule(run_on_two_nodes, capsys, monkeypatch, node, said):
    """``ssh RUN NODE``'s NODE is an ASCII number or no node: a number written another way is refused in one
    line, never taken for a command run on node 0 (no ssh is reached: which("ssh") finds none here)."""
    from launcher.cli.main import main

    monkeypatch.setattr("shutil.which", lambda name: None)
    code = main(["ssh", run_on_two_nodes, node])
    err = capsys.readouterr().err
    assert code == 2 and err == f"fsdp-tui ssh: {said.format(run=run_on_two_nodes)}\n", err


def test_ssh_after_two_dashes_runs_a_word_as_the_command(run_on_two_nodes, capsys, monkeypatch):
    """A word that is no number at all is still the command's first word (``ssh RUN -- pwd``): the shell line
    for node 0 is built (here no ssh binary is found, which is said instead)."""
    from launcher.cli.main import main

    monkeypatch.setattr("shutil.which", lambda name: None)
    assert main(["ssh", run_on_two_nodes, "--", "pwd"]) == 2
    assert "needs OpenSSH's client" in capsys.readouterr().err


@pytest.mark.parametrize("args", [
    ("logs", "{run}", "--node", "١"), ("logs", "{run}", "--rank", "²"), ("export", "{run}", "--step", "٣"),
    ("resume", "{run}", "--from", "²"), ("runs", "--limit", "١٠"),
])
def test_every_number_a_command_reads_is_ascii_digits(run_on_two_nodes, capsys, args):
    from launcher.cli.main import main

    with pytest.raises(SystemExit) as ended:
        main([a.format(run=run_on_two_nodes) for a in args])
    err = capsys.readouterr().err
    assert ended.value.code == 2 and f"'{args[-1]}' is not a" in err and "Traceback" not in err, err


@pytest.mark.parametrize("tail", ["٣", " 1", "+1", "1e3", "-1", "1.0", HUGE])
def test_logs_tail_reads_its_count_in_ascii_digits_only(run_on_two_nodes, capsys, tail):
    from launcher.cli.main import main

    with pytest.raises(SystemExit) as end:
        main(["logs", run_on_two_nodes, "--tail", tail])
    err = capsys.readouterr().err
    assert end.value.code == 2 and "--tail takes a count of lines in digits 0-9, 0 or more" in err, err
    assert "Traceback" not in err and len(err) < 400  # a huge word is one short line, not the word again
