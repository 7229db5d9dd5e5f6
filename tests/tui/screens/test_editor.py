"""The editor under Pilot: templates for a new file, completion from the schema and ~/.ssh/config,
one-key fixes, and a template written from the home screen that launches."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.events import RunState
from tests.support.tui import wait_for
from tui.app import FsdpTuiApp
from tui.screens.editor import EditorScreen
from tui.screens.home import HomeScreen
from tui.screens.monitor import RunMonitorScreen
from tui.screens.templates import FileNameModal, TemplateModal
from tui.widgets.completion import CompletionMenu, WorkloadArea
from tui.widgets.problems import ProblemsList


@pytest.fixture
def ssh_home(tmp_path, monkeypatch):
    """A user home whose ~/.ssh/config names two hosts (and a pattern that is not one)."""
    user = tmp_path / "user"
    (user / ".ssh").mkdir(parents=True)
    (user / ".ssh" / "config").write_text(
        "Host *\n  ServerAliveInterval 30\n\nHost gpu-a\n  HostName 127.0.0.251\n  Port 1\n\n"
        "Host gpu-b\n  HostName 127.0.0.252\n  Port 1\n")  # loopback, nothing listening
    monkeypatch.setenv("HOME", str(user))
    return user


def _errors(screen: EditorScreen) -> list[str]:
    return [p.format() for p in screen.problems if p.is_error]


async def _editor(pilot, app) -> EditorScreen:
    await wait_for(pilot, lambda: isinstance(app.screen, EditorScreen) and app.screen.problems is not None)
    return app.screen


async def test_new_file_from_ssh_template_filled_by_completion_validates(home, ssh_home, tmp_path):
    app = FsdpTuiApp(home, workload=tmp_path / "new.yaml")
    async with app.run_test(size=(140, 40)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, TemplateModal))
        titles = [t.title for t in app.screen.templates]
        await pilot.press(*["down"] * titles.index("N SSH hosts, built-in trainer"), "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, EditorScreen))
        editor = app.screen
        await wait_for(pilot, lambda: list(editor.sources.hosts) == ["gpu-a", "gpu-b"])
        area = editor.query_one(WorkloadArea)
        await wait_for(pilot, lambda: any("<host-0>" in p.message for p in editor.problems))
        row = area.cursor_location[0]
        assert area.document.get_line(row).strip() == "- <host-0>"  # the cursor starts on the first blank
        await pilot.press("ctrl+space")
        assert editor.query_one(CompletionMenu).is_open
        await pilot.press("enter")
        area.cursor_location = (row + 1, len(area.document.get_line(row + 1)))
        await pilot.press("ctrl+space", "down", "tab")
        assert [area.document.get_line(r).strip() for r in (row, row + 1)] == ["- gpu-a", "- gpu-b"]
        await wait_for(pilot, lambda: editor.version and not _errors(editor) and "valid" in str(
            editor.query_one("#status").render()))
        # The Plan tab glances at the hosts named, off the UI thread: neither answers here.
        reach = editor.query_one("#reach")
        await wait_for(pilot, lambda: "✗ node 1 (gpu-b)" in str(reach.render()), timeout=30)
        assert "✗ node 0 (gpu-a)" in str(reach.render())


async def test_typing_hos_under_compute_completes_hosts(home, tmp_path):
    wl = tmp_path / "w.yaml"
    wl.write_text("experiment_name: demo\ncompute:\n\ncommand: x")
    app = FsdpTuiApp(home, workload=wl)
    async with app.run_test(size=(140, 40)) as pilot:
        editor = await _editor(pilot, app)
        area = editor.query_one(WorkloadArea)
        area.cursor_location = (2, 0)
        await pilot.press("space", "space", *"hos")
        menu = editor.query_one(CompletionMenu)
        assert menu.is_open and menu.completions.items[0].label == "hosts"
        await pilot.press("tab")
        assert area.document.get_line(2) == "  hosts:"
        assert not menu.is_open
        await pilot.press("ctrl+s")
        assert wl.read_text() == "experiment_name: demo\ncompute:\n  hosts:\ncommand: x\n"  # a final newline
        await pilot.press("enter", *"  mas")  # a new line: the menu opens again, escape closes it
        assert menu.is_open and [i.label for i in menu.completions.items] == ["master_addr", "master_port"]
        await pilot.press("escape")
        assert not menu.is_open and isinstance(app.screen, EditorScreen)


async def test_fix_of_a_did_you_mean_problem_renames_the_key(home, tmp_path):
    wl = tmp_path / "w.yaml"
    wl.write_text("experiment_name: demo\ncompute:\n  hots: [gpu-a]\ncommand: x\n")
    app = FsdpTuiApp(home, workload=wl)
    async with app.run_test(size=(140, 40)) as pilot:
        editor = await _editor(pilot, app)
        await wait_for(pilot, lambda: any("did you mean 'hosts'" in p.hint for p in editor.problems))
        problems = editor.query_one(ProblemsList)
        problems.focus()
        problems.highlighted = next(i for i, p in enumerate(problems.problems) if "hots" in p.message)
        await pilot.press("f")
        area = editor.query_one(WorkloadArea)
        assert area.document.get_line(2) == "  hosts: [gpu-a]"
        await wait_for(pilot, lambda: not _errors(editor) and editor.problems == [])


async def test_missing_command_and_parameters_is_one_teaching_problem(home, tmp_path):
    wl = tmp_path / "w.yaml"
    wl.write_text("experiment_name: demo\n")
    app = FsdpTuiApp(home, workload=wl)
    async with app.run_test(size=(100, 30)) as pilot:
        editor = await _editor(pilot, app)
        await wait_for(pilot, lambda: len(editor.problems) == 1)
        (p,) = editor.problems
        assert "`command:`" in p.message and "parameters:" in p.hint and "model_name" not in p.message


async def test_template_written_by_n_on_home_validates_and_launches(home, tmp_path, monkeypatch):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    app = FsdpTuiApp(home)
    async with app.run_test(size=(140, 45)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, HomeScreen))
        await pilot.press("n")
        await wait_for(pilot, lambda: isinstance(app.screen, TemplateModal))
        assert app.screen.templates[0].title == "This machine, CPU demo"
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, FileNameModal))
        await pilot.press("enter")  # the suggested name
        await wait_for(pilot, lambda: isinstance(app.screen, EditorScreen))
        editor = app.screen
        written = cwd / "local-cpu.yaml"
        assert editor.path == written and written.read_text().startswith("# Runs on this machine")
        assert any(str(written) in str(n.message) for n in app._notifications)
        await wait_for(pilot, lambda: "valid," in str(editor.query_one("#status").render()))
        editor.query_one("#overrides").value = "parameters.max_steps=3"
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: isinstance(app.screen, RunMonitorScreen), timeout=60)
        monitor = app.screen
        await wait_for(pilot, lambda: monitor.view.state.is_final, timeout=240)
        assert monitor.view.state == RunState.SUCCEEDED


async def test_the_plan_preview_says_whether_it_fits_and_follows_the_edit(home, tmp_path):
    """The Plan tab's memory line from the model's config.json alone: an 8B model unsharded on H100s does
    not fit and names full_shard; edited to full_shard with activation checkpointing, it fits."""
    (tmp_path / "llama8b").mkdir()
    (tmp_path / "llama8b" / "config.json").write_text(
        '{"model_type": "llama", "vocab_size": 128256, "hidden_size": 4096, "intermediate_size": 14336, '
        '"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8}')
    wl = tmp_path / "w.yaml"
    text = ("experiment_name: fit\ncompute:\n  num_accelerators: 16\n  accelerator_type: GPU_8xH100\n"
            "  hosts: [127.0.0.251, 127.0.0.252]\nparameters:\n  model_name: ./llama8b\n"
            "  dataset_name: builtin:tiny-alpaca\n  output_dir: /tmp/out\n  max_seq_len: 8192\n"
            "  per_device_batch_size: 1\n  max_steps: 10\n  fsdp: {sharding: no_shard}\n")
    wl.write_text(text)
    app = FsdpTuiApp(home, workload=wl)
    async with app.run_test(size=(140, 40)) as pilot:
        editor = await _editor(pilot, app)
        plan = editor.query_one("#plan")
        await wait_for(pilot, lambda: "does not fit: " in str(plan.render()))
        shown = str(plan.render())
        assert "memory: each rank needs ~" in shown and "(no_shard, 16 ranks)" in shown, shown
        assert "of 79.6 GiB (H100, from compute.accelerator_type)" in shown and "try fsdp.sharding: full_shard" in shown
        editor.query_one(WorkloadArea).text = text.replace(
            "{sharding: no_shard}", "{sharding: full_shard}\n  model: {activation_checkpointing: full}")
        await wait_for(pilot, lambda: "  fits: " in str(plan.render()))
        assert "(full_shard, 16 ranks)" in str(plan.render()) and "does not fit" not in str(plan.render())


def test_a_fix_replaces_its_span():
    from launcher.workload.fixes import Fix

    assert Fix("x", (0, 1), (0, 2), "Z").apply("abc\ndef") == "aZc\ndef"


def test_template_names_are_not_taken(tmp_path):
    from launcher.workload.templates import BUILTIN
    from tui.screens.templates import suggest_name

    (tmp_path / "local-cpu.yaml").write_text("")
    assert suggest_name(BUILTIN[0], tmp_path) == "local-cpu-2.yaml"
    assert Path(suggest_name(BUILTIN[1], tmp_path)).suffix == ".yaml"
