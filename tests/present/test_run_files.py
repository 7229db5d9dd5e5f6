"""Where a run's files are (the app's question before deleting it) and where they stay once ``rm`` forgets
its record, with the command that removes each."""

from __future__ import annotations

import pytest

from launcher.api.run_files import Left, LeftBehind
from launcher.present.run_files import folder_line, left_behind_line

HERE = Left("here", "/h/nodes/r1", None, size="2.0 KiB")
NODE = Left("node 1 (gpu-b)", "~/.fsdp-tui/runs/r1/node-1", 1, "gpu-b")


@pytest.mark.parametrize("left, line", [
    (HERE, "here: /h/nodes/r1 (2.0 KiB: checkpoints, exports, outputs)"),
    (NODE, "node 1 (gpu-b): ~/.fsdp-tui/runs/r1/node-1"),
])
def test_each_folder_is_one_line(left, line):
    assert folder_line(left) == line


@pytest.mark.parametrize("stays, line", [
    (LeftBehind(HERE, "rm -r /h/nodes/r1"),
     "its files here stay: /h/nodes/r1 (2.0 KiB: checkpoints, exports, outputs); remove them: rm -r /h/nodes/r1"),
    (LeftBehind(NODE, "ssh gpu-b rm -r -- ~/.fsdp-tui/runs/r1"),
     "its files on node 1 (gpu-b) stay there: ~/.fsdp-tui/runs/r1/node-1; remove them: "
     "ssh gpu-b rm -r -- ~/.fsdp-tui/runs/r1"),
])
def test_each_folder_left_behind_says_how_to_remove_it(stays, line):
    assert left_behind_line(stays) == line
