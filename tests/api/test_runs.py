"""The one door: a run found by a prefix of its id (one line when none or several match, the same in every
command that takes a RUN), and a launch's typed outcome, as the app and ``fsdp-tui run`` both get it."""

from __future__ import annotations

import os

import pytest

from launcher.api import Client
from launcher.api.runs import AlreadyLaunched, Launched, Refused, RunNotFound
from launcher.events import RunState
from tests.support.cli import owner_pid, wait_until, write_workload
from tests.support.tui import RecordedRun, record

RUNS = ("20260301-0900-llama-sft-a1f3", "20260301-1000-bloom-squad-b2c4", "20260301-1100-llama-sft-c3d5")


@pytest.fixture
def client(tmp_path, monkeypatch) -> Client:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("FSDP_TUI_HOME", str(home))
    monkeypatch.setenv("FSDP_TUI_ASSETS", os.environ.get("FSDP_TUI_TEST_ASSETS", "/tmp/fsdp-tui-test-assets"))
    for order, run_id in enumerate(RUNS):
        record(home, RecordedRun(run_id, run_id.split("-", 2)[2].rsplit("-", 1)[0], RunState.SUCCEEDED, 1, 0, 60),
               created_order=order)
    return Client(home)


@pytest.mark.parametrize("prefix, found", [
    ("20260301-0900-llama-sft-a1f3", "20260301-0900-llama-sft-a1f3"),  # the whole id
    ("20260301-10", "20260301-1000-bloom-squad-b2c4"),                 # a unique start
    ("c3d5", "20260301-1100-llama-sft-c3d5"),                           # the short id the app shows
    ("zz", "no run 'zz' (see fsdp-tui runs)"),
    ("20260301", "'20260301' matches 3 runs: 20260301-0900-llama-sft-a1f3, 20260301-1000-bloom-squad-b2c4, "
                 "20260301-1100-llama-sft-c3d5"),
    ("%", "no run '%' (see fsdp-tui runs)"),                            # SQL's wildcards are plain text
])
def test_a_run_is_found_by_a_prefix_or_one_line_says_why_not(client, prefix, found):
    if found.startswith(("no run", "'")):
        with pytest.raises(RunNotFound) as err:
            client.runs.find(prefix)
        assert str(err.value) == found and "\n" not in str(err.value)
    else:
        assert client.runs.find(prefix) == found


COMMANDS = [["cancel"], ["ckpt"], ["export"], ["logs"], ["show"], ["ssh"], ["stacks"], ["mlflow", "sync"],
            ["relaunch"], ["resume"], ["clean"], ["rm"], ["compare"]]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_command_on_a_run_says_the_same_line_when_the_prefix_names_none_or_several(client, capsys, command):
    from launcher.cli.main import main

    for prefix, said in (("zz", "no run 'zz' (see fsdp-tui runs)"), ("20260301", "'20260301' matches 3 runs")):
        assert main([*command, prefix]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"fsdp-tui {' '.join(command)}: {said}") and err.count("\n") == 1, err


def test_the_listing_reads_each_run_with_what_the_list_shows_beside_it(client):
    listed = client.runs.listing(limit=2)
    assert [x.summary.run_id for x in listed] == [RUNS[2], RUNS[1]]
    assert all(x.resume_check is None and x.owner_note == "" for x in listed)
    assert client.runs.record(RUNS[0]).summary.state == RunState.SUCCEEDED
    with pytest.raises(RunNotFound):
        client.runs.record("20990101-0000-none-0000")


def test_a_run_report_is_typed_and_its_json_keeps_the_shown_keys(client):
    report = client.runs.report(RUNS[0])
    assert report.run_id == RUNS[0] and report.state == "succeeded" and report.triage is None
    assert report.nodes[0].host == "gpu-a" and report.last_safe_step is None  # no output_dir: nothing to ask
    data = report.to_dict()
    assert data["nodes"][0]["state"] == "exited" and isinstance(data["next"], list)
    assert {"mlflow", "usage", "ranks", "nettest", "last_safe_step", "resume_check"} <= set(data)


INVALID = "experiment_name: x\ncommand: echo hi\nmax_retries: many\n"
BLOCKED = "experiment_name: x\ncompute: {num_accelerators: 2, gpus_per_node: 1}\ncommand: echo hi\n"
NO_SECRET = ("experiment_name: x\ncompute: {accelerator_type: CPU, procs_per_node: 1, num_accelerators: 1}\n"
             "secrets: {API_TOKEN: api/none}\ncommand: echo hi\nmlflow: {enabled: false}\n")


@pytest.mark.parametrize("text, stage, says", [
    (INVALID, "invalid", "max_retries"),
    (BLOCKED, "blocked", "compute.hosts is missing"),
    (NO_SECRET, "checks", "api/none"),
])
def test_a_refused_launch_says_why_and_records_nothing(client, tmp_path, text, stage, says):
    outcome = client.runs.launch(write_workload(tmp_path, text))
    assert isinstance(outcome, Refused) and outcome.stage == stage, outcome
    assert any(says in reason for reason in outcome.reasons), outcome.reasons
    assert [r.run_id for r in client.runs.list()] == list(reversed(RUNS))  # nothing new recorded


@pytest.mark.slow
def test_a_launch_starts_one_run_and_its_token_answers_with_it_after(client, tmp_path):
    path = write_workload(tmp_path, "experiment_name: api-once\nidempotency_token: api-once-1\n"
                          "compute: {accelerator_type: CPU, procs_per_node: 1, num_accelerators: 1}\n"
                          "command: echo launched\nmlflow: {enabled: false}\n")
    first = client.runs.launch(path)
    assert isinstance(first, Launched) and first.run_id == first.plan.run_id
    from launcher.paths import run_dir
    from launcher.runs.core.layout import read_options

    # The launch probed the node before recording the run: its owner does not probe it a second time.
    assert read_options(run_dir(client.home, first.run_id)).checked is True
    again = client.runs.launch(path)
    assert isinstance(again, AlreadyLaunched) and again.run_id == first.run_id and again.token == "api-once-1"
    wait_until(lambda: client.runs.record(first.run_id).summary.state.is_final and owner_pid(first.run_id) is None,
               120, "the run to end and its owner to leave")
    assert client.runs.record(first.run_id).summary.state == RunState.SUCCEEDED
    assert [r.run_id for r in client.runs.list(experiment="api-once")] == [first.run_id]
