"""Hosts that keep failing, kept in the data dir; and a swap as the run's record keeps it. Pure, fast."""

from __future__ import annotations

import json
import threading

from launcher.runs.core import quarantine
from launcher.runs.core.layout import SWAPS, read_swaps, save_swaps
from launcher.runs.core.swaps import Swap, settled


def test_a_host_is_quarantined_at_its_nth_failure_and_lifted_by_name(tmp_path):
    one = quarantine.count_failure(tmp_path, "gpu-07", "run-a", "node 3 (gpu-07): lost", 2, at=100.0)
    assert (one.failures, one.quarantined) == (1, False)
    assert quarantine.quarantined(tmp_path) == {}
    two = quarantine.count_failure(tmp_path, "gpu-07", "run-b", "node 1 (gpu-07): killed", 2, at=200.0)
    assert (two.failures, two.quarantined_at) == (2, 200.0)
    assert two.words() == "gpu-07: quarantined (2 failures; last: run run-b, node 1 (gpu-07): killed)"
    three = quarantine.count_failure(tmp_path, "gpu-07", "run-c", "lost", 2, at=300.0)
    assert three.quarantined_at == 200.0 and three.failures == 3  # quarantined since its second failure
    quarantine.count_failure(tmp_path, "gpu-08", "run-c", "spare failed the doctor", 2)
    assert [h.host for h in quarantine.hosts(tmp_path)] == ["gpu-07", "gpu-08"]  # quarantined first
    assert list(quarantine.quarantined(tmp_path)) == ["gpu-07"]
    lifted = quarantine.lift(tmp_path, "gpu-07")
    assert lifted is not None and lifted.failures == 3
    assert quarantine.lift(tmp_path, "gpu-07") is None
    assert quarantine.quarantined(tmp_path) == {}
    again = quarantine.count_failure(tmp_path, "gpu-07", "run-d", "lost", 2)
    assert (again.failures, again.quarantined) == (1, False)  # its count starts again


def test_owners_counting_at_once_lose_no_failure(tmp_path):
    def count(i: int) -> None:
        for _ in range(10):
            quarantine.count_failure(tmp_path, "h", f"run-{i}", "lost", 100)

    threads = [threading.Thread(target=count, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert quarantine.hosts(tmp_path)[0].failures == 40


def test_a_damaged_quarantine_file_reads_as_hosts_it_can_tell_and_never_raises(tmp_path):
    (tmp_path / quarantine.FILE).write_text("{not json")
    assert quarantine.hosts(tmp_path) == []
    (tmp_path / quarantine.FILE).write_text(json.dumps({"hosts": {"a\x1b[31m": {"failures": "x", "last": [{"at": 1}]},
                                                                  "b": 7}}))
    (h,) = quarantine.hosts(tmp_path)
    assert "\x1b" not in h.host and h.failures == 1 and not h.quarantined


def _swap(**kw) -> Swap:
    base = dict(number=1, kind="spare", node_rank=3, failed_host="gpu-07", why="node 3 (gpu-07): lost",
                signature="lost", failed_at=1000.0, attempt=2, failed_step=1840, replacement="gpu-11",
                checkpoint_step=1800, hosts_after=("gpu-01", "gpu-02", "gpu-03", "gpu-11"))
    return Swap(**{**base, **kw})  # type: ignore[arg-type]


def test_a_swap_reads_as_the_notification_says_it_and_survives_its_file(tmp_path):
    swap = _swap()
    assert not swap.settled and swap.seconds is None
    assert swap.words() == "node 3 (gpu-07) lost at step 1,840; replaced by gpu-11; resuming from step 1,800"
    done = settled(swap, 1094.0, 1801, "verified")
    assert done.words() == ("node 3 (gpu-07) lost at step 1,840; replaced by gpu-11; resumed verified at step "
                            "1,800 after 94 s")
    assert (done.seconds, done.steps_lost, done.recovered) == (94.0, 40, True)
    assert done.replaced_words() == "replaced gpu-07 (lost at step 1,840)"
    shrunk = settled(_swap(kind="shrink", replacement="", batch="per_device_batch_size 4 -> 3", number=2), 1100.0,
                     1801, "resharded")
    assert "the run went on without it (per_device_batch_size 4 -> 3); resumed resharded" in shrunk.words()
    differs = settled(_swap(), 1050.0, 1801, "differs", ("seed: 1 in the checkpoint, 2 now",))
    assert not differs.recovered and differs.words().endswith("differs: seed: 1 in the checkpoint, 2 now")
    fresh = settled(_swap(checkpoint_step=None), 1060.0, 1, "none")
    assert fresh.recovered and fresh.steps_lost == 1840 and "started again from step 0" in fresh.words()
    save_swaps(tmp_path, [done, shrunk])
    assert read_swaps(tmp_path) == [done, shrunk]
    data = json.loads((tmp_path / SWAPS).read_text())
    assert data["swaps"][0]["text"] == done.words() and data["swaps"][0]["seconds"] == 94.0


def test_what_a_swaps_file_holds_is_decoded_once():
    assert Swap.from_wire({"kind": "teleport", "number": 1, "node_rank": 0, "failed_at": 1.0, "attempt": 2}) is None
    assert Swap.from_wire("nonsense") is None
    odd = Swap.from_wire({"kind": "spare", "number": 1, "node_rank": 0, "failed_at": 1, "attempt": 2,
                          "failed_host": "a\nb", "skipped": ["x", 3], "log_shift": {"1": 5, "x": 2, "2": "y"}})
    assert odd is not None and odd.failed_host == "ab" and odd.skipped == ("x",) and odd.log_shift == {1: 5}
