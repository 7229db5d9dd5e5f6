"""A sweep's MLflow parent run, against a real SQLite store: a driver that starts again without the parent's
id in the sweep's record finds the parent it made, never one of the variants' runs (they carry the sweep's
id too), and makes none twice."""

from __future__ import annotations

import pytest

from launcher.runs.owner.mlflow_sink import MlflowSink
from launcher.runs.sweeps.driver import Driver
from launcher.runs.sweeps.record import PARENT_TAG, SWEEP_TAG
from tests.support.recorded_sweep import SWEEP_ID, record_sweep

pytestmark = pytest.mark.slow


def test_a_restarted_driver_finds_its_parent_run_and_not_a_variants(home, monkeypatch):
    from mlflow import MlflowClient

    record_sweep(home)
    monkeypatch.setattr(Driver, "_mlflow", lambda self: MlflowSink(None, "sweep-exp", self.sweep_id, self.home))
    variant = MlflowSink(None, "sweep-exp", "variant-1", home)  # a variant's run, started by its own owner
    variant_id = variant.start({}, {SWEEP_TAG: SWEEP_ID, "fsdp_tui.variant": "sharding=full_shard"})

    first = Driver(home, SWEEP_ID)._open_parent()
    assert first is not None and first != variant_id, Driver(home, SWEEP_ID).record.detail
    assert Driver(home, SWEEP_ID)._open_parent() == first  # the record never got the id: found by its tag

    client = MlflowClient(tracking_uri=f"sqlite:///{home / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("sweep-exp").experiment_id])
    assert sorted(r.info.run_id for r in runs) == sorted([first, variant_id])
    assert PARENT_TAG not in client.get_run(first).data.tags
