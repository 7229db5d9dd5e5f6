"""The gathers and the copies a resume brings, fast, on real folders (one per host, through the agent's own
functions): they touch only the acting run's own checkpoints, and they check the bytes against the digests
the trainer recorded. The real-part runs are in test_split_checkpoints.py and test_ckpt_invariant.py."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

from launcher.backends.ckpt_files import HereCheckpointFiles
from launcher.runs.owner.ckpt_copy import Endpoint
from launcher.runs.owner.gather import Gatherer, bring
from launcher.runs.owner.keeper import CheckpointKeeper
from launcher.workload.ckpt_place import judge_marks, with_holder
from tests.support.ckpt_disks import Disks, NodeFiles, save
from trainer.wire.ckpt_layout import BAD_MARK, list_checkpoints
from trainer.wire.ckpt_owner import Lineage

FIXED = "/srv/ckpt/two"
"""A fixed output_dir, as docs/trainer.md shows for gathered runs: every run of the workload shares it."""


def gatherer(roots: list[Path], lineage: Lineage, tmp_path: Path, *, keep_last: int | None = 3,
             files: list[NodeFiles] | None = None, holder: str = "node0", direct_addr: str | None = None):
    files = files or [NodeFiles(r, label=f"node {r} ({roots[r].parts[-5]})") for r in range(len(roots))]
    disks = Disks(roots, files)
    place = with_holder(judge_marks(FIXED, [str(r) for r in roots], [True] + [False] * (len(roots) - 1),
                                    [""] * len(roots)), holder)
    target = (Endpoint(files[0], str(roots[0])) if holder == "node0"
              else Endpoint(HereCheckpointFiles(), str(tmp_path / "here")))
    said: list[str] = []
    return Gatherer(disks, place, target, keep_last=keep_last, journal=tmp_path / "gathers.jsonl", lineage=lineage,
                    say=said.append, direct_addr=direct_addr), said


def host(tmp_path: Path, name: str) -> Path:
    """A host's ``/srv/ckpt/two/checkpoints`` on its own disk."""
    return tmp_path / name / "srv" / "ckpt" / "two" / "checkpoints"


def steps_by_run(root: Path) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for c in list_checkpoints(str(root)):
        if c.complete:
            out.setdefault(c.run_id or "?", []).append(c.step)
    return out


def journal(tmp_path: Path) -> list[dict]:
    return [json.loads(x) for x in (tmp_path / "gathers.jsonl").read_text().splitlines()]


def test_a_resume_never_prunes_the_checkpoints_of_the_run_it_resumed(tmp_path):
    """Run A gathered 50 and 100, then was cancelled; run B resumed from A's 100 into the same folder and
    saved 150 to 300 with keep_last 3: B's prune counts and removes only B's own."""
    nc1, nc2 = host(tmp_path, "nc1"), host(tmp_path, "nc2")
    a, _ = gatherer([nc1, nc2], Lineage.of("A", [], FIXED), tmp_path)
    for step in (50, 100):
        save([nc1, nc2], step, "A")
        asyncio.run(a.pass_once(final=False))
    b, _ = gatherer([nc1, nc2], Lineage.of("B", ["A"], FIXED), tmp_path)
    for step in (150, 200, 250, 300):
        save([nc1, nc2], step, "B")
        asyncio.run(b.pass_once(final=False))
    assert steps_by_run(nc1) == {"A": [50, 100], "B": [200, 250, 300]}
    assert os.listdir(nc2) == []  # B's leftovers gone, nothing of A's was there to touch


def test_a_resume_onto_swapped_hosts_copies_the_checkpoint_and_takes_nothing_from_its_run(tmp_path):
    """Run B's whole copies are on nc1 (its node 0). A resume of B from 250 on [nc2, nc1]: 250 is brought
    to nc2 for the new run C; C's gathers (nc1 now its node 1) never drop B's 250 there, and when C ends
    its copy goes while B's own stay, listed as B's."""
    nc1, nc2 = host(tmp_path, "nc1"), host(tmp_path, "nc2")
    b, _ = gatherer([nc1, nc2], Lineage.of("B", [], FIXED), tmp_path)
    for step in (200, 250, 300):
        save([nc1, nc2], step, "B")
        asyncio.run(b.pass_once(final=False))
    files = HereCheckpointFiles()
    copied = asyncio.run(bring(Endpoint(files, str(nc1)), Endpoint(files, str(nc2)), "step-00000250"))
    assert copied is not None and copied.files == 6
    keeper = CheckpointKeeper(tmp_path / "C", lambda plan: None, HereCheckpointFiles)
    keeper.dir.mkdir()
    asyncio.run(keeper._brought(Endpoint(files, str(nc2)), "step-00000250"))

    c, _ = gatherer([nc2, nc1], Lineage.of("C", ["B"], FIXED), tmp_path, keep_last=1)
    save([nc2, nc1], 300, "C", name="step-00000300-1")  # nc1 holds B's step-00000300: a free name
    asyncio.run(c.pass_once(final=True))
    assert steps_by_run(nc1) == {"B": [200, 250, 300]}
    assert steps_by_run(nc2) == {"B": [250], "C": [300]}

    class Node0:
        def checkpoint_files(self, rank: int):
            return files

    assert asyncio.run(keeper.finish(Node0())) == []
    assert steps_by_run(nc2) == {"C": [300]} and steps_by_run(nc1) == {"B": [200, 250, 300]}


def test_a_copy_brought_earlier_is_never_written_into_when_its_folder_is_not_whole(tmp_path):
    nc1, nc2 = host(tmp_path, "nc1"), host(tmp_path, "nc2")
    save([nc1, nc2], 4, "B")  # not gathered: nc1 holds node 0's part, nc2 node 1's
    (nc1 / "step-00000004" / "__2_0.distcp").write_bytes((nc2 / "step-00000004" / "__2_0.distcp").read_bytes())
    (nc1 / "step-00000004" / "__3_0.distcp").write_bytes((nc2 / "step-00000004" / "__3_0.distcp").read_bytes())
    files = HereCheckpointFiles()
    try:
        asyncio.run(bring(Endpoint(files, str(nc1)), Endpoint(files, str(nc2)), "step-00000004"))
    except Exception as err:  # noqa: BLE001 - what it says is the check
        said = str(err)
    else:
        said = ""
    assert "exists and is not whole" in said and "left as it is" in said
    assert sorted(os.listdir(nc2 / "step-00000004")) == ["__2_0.distcp", "__3_0.distcp"]


# -- the bytes ------------------------------------------------------------------------------------------


def _flip(path: Path, at: int = 10) -> None:
    """4 bytes of a file overwritten, its size kept (a disk that corrupts, a stray write)."""
    data = bytearray(path.read_bytes())
    data[at:at + 4] = bytes(255 - x for x in data[at:at + 4])
    path.write_bytes(bytes(data))


def test_a_shard_whose_bytes_differ_is_never_gathered_and_the_checkpoint_says_which_and_where(tmp_path):
    nc1, nc2 = host(tmp_path, "nc1"), host(tmp_path, "nc2")
    g, said = gatherer([nc1, nc2], Lineage.of("A", [], FIXED), tmp_path)
    save([nc1, nc2], 2, "A")
    asyncio.run(g.pass_once(final=False))
    save([nc1, nc2], 4, "A")
    _flip(nc2 / "step-00000004" / "__3_0.distcp")
    asyncio.run(g.pass_once(final=False))
    listed = {c.step: c for c in list_checkpoints(str(nc1))}
    assert listed[2].complete and not listed[4].complete
    assert "__3_0.distcp (written on node 1)" in listed[4].why and "differ from what the trainer wrote" in listed[4].why
    assert sorted(os.listdir(nc1 / "step-00000004")) == [BAD_MARK, ".metadata", "__0_0.distcp", "__1_0.distcp",
                                                        "meta.json"]  # nothing this gather copied stays
    entry = journal(tmp_path)[-1]
    assert not entry["ok"] and "__3_0.distcp" in entry["error"] and "node 1" in entry["error"]
    assert os.listdir(nc2) == ["step-00000004"]  # the node's own part stays where it is, for a look


def test_node_0s_own_shard_is_checked_where_it_lies(tmp_path):
    nc1, nc2 = host(tmp_path, "nc1"), host(tmp_path, "nc2")
    g, _ = gatherer([nc1, nc2], Lineage.of("A", [], FIXED), tmp_path)
    save([nc1, nc2], 2, "A")
    _flip(nc1 / "step-00000002" / "__0_0.distcp")
    asyncio.run(g.pass_once(final=True))
    (c,) = list_checkpoints(str(nc1))
    assert not c.complete and "__0_0.distcp (written on node 0)" in c.why


def test_a_copy_for_a_resume_checks_the_bytes_and_marks_the_source(tmp_path):
    nc1, nc2 = host(tmp_path, "nc1"), host(tmp_path, "nc2")
    save([nc1, nc1], 6, "B")
    _flip(nc1 / "step-00000006" / "__2_0.distcp")
    files = HereCheckpointFiles()
    try:
        asyncio.run(bring(Endpoint(files, str(nc1)), Endpoint(files, str(nc2)), "step-00000006"))
    except Exception as err:  # noqa: BLE001 - what it says is the check
        said = str(err)
    else:
        said = ""
    assert "__2_0.distcp" in said and "differ from what the trainer wrote" in said
    assert not (nc2 / "step-00000006").exists() or not any(
        not f.startswith(".part-") for f in os.listdir(nc2 / "step-00000006"))
    assert not list_checkpoints(str(nc1))[0].complete


def test_a_gather_that_does_not_fit_copies_nothing_and_says_how_much_it_needs(tmp_path):
    nc1, nc2 = host(tmp_path, "nc1"), host(tmp_path, "nc2")

    class Full(NodeFiles):
        async def room(self, root: str) -> int:
            return 100

    g, said = gatherer([nc1, nc2], Lineage.of("A", [], FIXED), tmp_path,
                       files=[Full(0, label="node 0 (nc1)"), NodeFiles(1, label="node 1 (nc2)")])
    save([nc1, nc2], 2, "A")
    asyncio.run(g.pass_once(final=True))
    assert "node 0 (nc1): 0.0 MiB free in" in g.failed["step-00000002"] and "needs 0.0 MiB" in g.failed["step-00000002"]
    assert sorted(os.listdir(nc1 / "step-00000002")) == [".metadata", "__0_0.distcp", "__1_0.distcp", "meta.json"]


def test_a_failed_gather_leaves_no_copied_shard_behind(tmp_path):
    """Three nodes: node 1's shards arrive, node 2 is lost on the way: node 1's copies leave node 0 again."""
    roots = [host(tmp_path, f"nc{i}") for i in (1, 2, 3)]
    files = [NodeFiles(0), NodeFiles(1), NodeFiles(2, lose_after=0)]
    g, _ = gatherer(roots, Lineage.of("A", [], FIXED), tmp_path, files=files)
    shards = {"__0_0.distcp": (100, 0), "__1_0.distcp": (120, 1), "__2_0.distcp": (90, 2)}
    save(roots, 2, "A", shards=shards)
    asyncio.run(g.pass_once(final=True))
    assert "lost" in g.failed["step-00000002"]
    assert sorted(os.listdir(roots[0] / "step-00000002")) == [".metadata", "__0_0.distcp", "meta.json"]
    assert os.listdir(roots[1] / "step-00000002") == ["__1_0.distcp"]  # still on node 1, for the next try


def test_a_gather_through_this_machine_says_so(tmp_path):
    """The nodes could dial each other (a rendezvous address), but the holder is this machine: every byte
    crossed it, and ``gathers.jsonl`` says ``via: launcher``."""
    nc1, nc2 = host(tmp_path, "nc1"), host(tmp_path, "nc2")
    g, _ = gatherer([nc1, nc2], Lineage.of("A", [], FIXED), tmp_path, holder="here", direct_addr="127.0.0.1")
    save([nc1, nc2], 2, "A")
    asyncio.run(g.pass_once(final=False))
    assert journal(tmp_path)[-1]["via"] == "launcher"


def test_each_gathered_save_is_the_safe_step_at_once_and_its_age_counts_when_shown(tmp_path):
    """The run's owner records the safe step as each gather makes one whole: the monitor reads it every
    second (no node asked), and what it shows counts the age from when the checkpoint was written."""
    from launcher.runs.core.safe_step import recorded_safe_step

    nc1, nc2 = host(tmp_path, "nc1"), host(tmp_path, "nc2")
    g, _ = gatherer([nc1, nc2], Lineage.of("A", [], FIXED), tmp_path, keep_last=1)
    record = tmp_path / "record"
    record.mkdir()
    keeper = CheckpointKeeper(record, lambda plan: None, HereCheckpointFiles)
    g.on_safe = keeper._safe
    save([nc1, nc2], 2, "A")
    asyncio.run(g.pass_once(final=False))
    first = recorded_safe_step(record, 0.0)
    assert first is not None and first.found.step == 2
    save([nc1, nc2], 4, "A")
    asyncio.run(g.pass_once(final=False))
    safe = recorded_safe_step(record, 0.0)
    assert safe.found.step == 4 and safe.written_at is not None
    assert safe.text(safe.written_at + 75) == "step 4 (step-00000004, written 1m15s ago)"
    assert safe.text(safe.written_at + 135) == "step 4 (step-00000004, written 2m15s ago)"
