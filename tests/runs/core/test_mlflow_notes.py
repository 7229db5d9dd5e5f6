"""The tracker's notes (``mlflow.json``) read into their type: the file the owner has always written reads
back whole, and a file cut short or edited by hand reads as what it can say, never as a traceback."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from launcher.runs.core.layout import read_mlflow_run_id, read_mlflow_state, save_mlflow_state
from launcher.runs.core.mlflow_notes import MlflowNotes, OwedEnd, SystemSent

WRITTEN = {"run_id": "abc123", "source": "metrics", "synced": 42, "samples_synced": 3,
           "system": {"offset": 9000, "steps": {"0": 12, "1": 11}},
           "swap_tags": {"fsdp_tui.swaps": "1", "fsdp_tui.recovered": "yes"},
           "end": {"status": "FAILED", "totals": {"gpu_hours": 0.5, "cost": 1.25}, "sent": False}, "error": None}


def test_the_file_as_the_owner_writes_it_reads_back_whole(tmp_path):
    (tmp_path / "mlflow.json").write_text(json.dumps(WRITTEN))
    notes = read_mlflow_state(tmp_path)
    assert notes == MlflowNotes("abc123", "metrics", 42, 3, SystemSent(9000, {"0": 12, "1": 11}),
                                {"fsdp_tui.swaps": "1", "fsdp_tui.recovered": "yes"},
                                OwedEnd("FAILED", {"gpu_hours": 0.5, "cost": 1.25}, False), None)
    save_mlflow_state(tmp_path, notes)
    assert json.loads((tmp_path / "mlflow.json").read_text()) == WRITTEN  # the same keys, the same values
    assert read_mlflow_run_id(tmp_path) == "abc123"


@pytest.mark.parametrize(("text", "field", "value"), [
    ("", "run_id", None), ("[1, 2]", "synced", 0), ('{"synced": "12"}', "synced", 0),
    ('{"synced": -4}', "synced", 0), ('{"synced": true}', "synced", 0), ('{"run_id": 7}', "run_id", None),
    ('{"system": {"offset": "x", "steps": [1]}}', "system", SystemSent()),
    ('{"end": {"status": "DONE"}}', "end", None), ('{"end": {"status": "KILLED", "totals": {"a": "b"}}}',
                                                  "end", OwedEnd("KILLED", {}, False)),
    ('{"swap_tags": "all"}', "swap_tags", None), ('{"run_id": "ab', "run_id", None),
])
def test_a_damaged_file_reads_as_what_it_can_say(tmp_path, text, field, value):
    (tmp_path / "mlflow.json").write_text(text)
    assert getattr(read_mlflow_state(tmp_path), field) == value


def test_no_file_is_nothing_sent(tmp_path):
    assert read_mlflow_state(tmp_path) == MlflowNotes() and read_mlflow_run_id(tmp_path) is None


counts = st.integers(min_value=0, max_value=2**40)
words = st.text(min_size=1, max_size=12)


@given(st.builds(MlflowNotes, run_id=st.none() | words, source=st.none() | st.sampled_from(["metrics", "log-metrics"]),
                 synced=counts, samples_synced=counts,
                 system=st.builds(SystemSent, counts, st.dictionaries(words, counts, max_size=4)),
                 swap_tags=st.none() | st.dictionaries(words, words, max_size=3),
                 end=st.none() | st.builds(OwedEnd, st.sampled_from(["FINISHED", "FAILED", "KILLED"]),
                                           st.dictionaries(words, st.floats(allow_nan=False, allow_infinity=False),
                                                           max_size=3), st.booleans()),
                 error=st.none() | words))
def test_any_notes_written_read_back_equal(notes):
    assert MlflowNotes.of(json.loads(json.dumps(notes.to_json()))) == notes
