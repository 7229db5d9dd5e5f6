"""A checkpoint listing's "complete" column, as ``ckpt list`` and the checkpoints screen show it."""

from __future__ import annotations

import pytest

from launcher.present.checkpoints import completeness
from trainer.wire.ckpt_layout import CheckpointInfo


@pytest.mark.parametrize("info, column", [
    (CheckpointInfo(6, "/c/step-6", True, 1, 0.0), "yes"),
    (CheckpointInfo(6, "/c/step-6", False, 1, 0.0, missing=(("__2_0.distcp", 1), ("__5_0.distcp", 2))),
     "NO (node 1, 2)"),
    (CheckpointInfo(6, "/c/step-6", False, 1, 0.0), "NO"),
    (CheckpointInfo(6, "/c/step-6", False, 0, 0.0, link=True), "link"),
])
def test_the_complete_column_names_the_nodes_a_split_checkpoint_waits_for(info, column):
    assert completeness(info) == column
