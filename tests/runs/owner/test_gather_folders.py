"""Whole checkpoints, fast: the completeness rule, where checkpoints land, the agent's copy operations and
the launcher's gathers on real folders (one per "node", through the agent's own functions), a node lost
half way through a copy included. The real-part runs are in test_split_checkpoints.py."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from pathlib import Path

import pytest

from launcher.backends.agent import ckpt_files
from launcher.backends.base import NodeError
from launcher.backends.ckpt_files import HereCheckpointFiles
from launcher.runs.owner.ckpt_copy import Endpoint, copy_checkpoint
from launcher.runs.owner.gather import Gatherer, bring
from launcher.workload.ckpt_place import (
    CheckpointPlace,
    Holder,
    judge_marks,
    parse_gather_to,
    place_from_json,
    place_to_json,
    with_holder,
)
from tests.support.ckpt_disks import Disks, NodeFiles, meta_text, save, shard_bytes
from trainer.wire.ckpt_layout import judge, list_checkpoints
from trainer.wire.ckpt_owner import Lineage

MINE = Lineage.of("r", [], "out")
"""The run the gathers below work for: a relative output_dir, its folder its own."""

@pytest.mark.parametrize("files, meta, complete, saved, missing", [
    ({".metadata": 5, "__0_0.distcp": 100, "__1_0.distcp": 120, "__2_0.distcp": 90, "__3_0.distcp": 80},
     meta_text(6, None), True, True, ()),
    ({".metadata": 5, "__0_0.distcp": 100, "__1_0.distcp": 120}, meta_text(6, None), False, True,
     (("__2_0.distcp", 1), ("__3_0.distcp", 1))),
    ({".metadata": 5, "__0_0.distcp": 100, "__1_0.distcp": 120, "__2_0.distcp": 89, "__3_0.distcp": 80}, meta_text(6, None),
     False, True, (("__2_0.distcp", 1),)),  # a shard of another size: a torn copy is not the shard
    ({".metadata": 5, "__0_0.distcp": 100}, json.dumps({"step": 3}), True, True, ()),  # saved before shard lists
    ({"__0_0.distcp": 100}, meta_text(6, None), False, False, ()),  # DCP never finished: no .metadata
    ({".metadata": 5}, None, False, False, ()),  # meta.json not written yet
    ({".metadata": 5}, "{not json", False, False, ()),
    ({".metadata": 5}, meta_text(6, None, {"../x": (1, 0)}), False, False, ()),  # a name out of the folder
    ({".metadata": 5}, json.dumps({"step": 1, "shards": {"a": {"bytes": "9", "node": 0}}}), False, False, ()),
    ({".metadata": 5}, json.dumps({"step": 1, "shards": ["a"]}), False, False, ()),
])
def test_a_checkpoint_is_whole_only_with_every_listed_shard_at_its_size(files, meta, complete, saved, missing):
    verdict = judge(files, meta)
    assert (verdict.complete, verdict.saved, verdict.missing) == (complete, saved, missing)
    if missing:
        assert "written on node 1 and not gathered here" in verdict.why_not()


def test_the_why_of_a_split_checkpoint_names_the_shards_and_their_node():
    verdict = judge({".metadata": 5, "__0_0.distcp": 100, "__1_0.distcp": 120}, meta_text(6, None))
    assert verdict.why_not() == ("missing __2_0.distcp, __3_0.distcp (2 shards) written on node 1 and not "
                                 "gathered here")


@pytest.mark.parametrize("seen, errors, kind, apart", [
    ([True, True, True], ["", "", ""], "shared", ()),
    ([True, False, False], ["", "", ""], "per_node", (1, 2)),
    ([True, True, False], ["", "", ""], "per_node", (2,)),  # nodes 0 and 1 share a disk, node 2 does not
    ([True, None], ["", "cannot connect"], "unchecked", ()),
])
def test_where_checkpoints_land_is_what_the_nodes_said(seen, errors, kind, apart):
    place = judge_marks("out", [f"/n{i}/out/checkpoints" for i in range(len(seen))], seen, errors)
    assert place.kind == kind and place.separate_nodes() == apart
    if kind == "unchecked":
        assert place.words() == "not checked (node 1 did not answer (cannot connect))"


@pytest.mark.parametrize("value, holder", [
    ("node0", Holder(0, "/n0/c")), ("here", Holder(None, "")), ("here:~/ckpts", Holder(None, "~/ckpts")),
    ("node1:/big/ckpts", Holder(1, "/big/ckpts")),
])
def test_gather_to_names_a_holder(value, holder):
    assert parse_gather_to(value, "/n0/c") == holder


def test_a_place_is_recorded_and_read_back_and_says_where_whole_copies_go():
    place = with_holder(judge_marks("checkpoints", ["/n0/c", "/n1/c"], [True, False], ["", ""]), "node0")
    assert place.gathers and place_from_json(json.loads(json.dumps(place_to_json(place)))) == place
    assert place.words() == ("one folder per node (node 1 apart from node 0's): each save's shards are gathered "
                             "into node 0's folder (/n0/c) after the save, verified, off the training path")
    shared = with_holder(judge_marks("/nfs/x", ["/nfs/x/c", "/nfs/x/c"], [True, True], ["", ""]), "here")
    assert not shared.gathers and shared.words() == "one place every node sees: /nfs/x/c"
    bucket = with_holder(CheckpointPlace("bucket", "s3://b/x", ("s3://b/x",)), None)
    assert not bucket.gathers and bucket.words().startswith("a bucket (s3://b/x)")


# -- the agent's side ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name, file", [("../x", "a"), ("step-1", "../../etc/passwd"), ("notes", "a"),
                                        ("step-1", ".part-a"), ("step-1/..", "a")])
def test_the_agent_refuses_paths_out_of_a_checkpoints_folder(tmp_path, name, file):
    with pytest.raises(ValueError):
        ckpt_files.put(str(tmp_path), name, file, 0, b"x")
    with pytest.raises(ValueError):
        ckpt_files.files("relative/root", "step-1")


def test_a_copy_takes_its_name_only_with_the_senders_size_and_hash(tmp_path):
    root = str(tmp_path)
    ckpt_files.put(root, "step-00000001", "__1_0.distcp", 0, b"abc")
    ckpt_files.put(root, "step-00000001", "__1_0.distcp", 3, b"def")
    with pytest.raises(ValueError, match="SHA-256 differs"):
        ckpt_files.seal(root, "step-00000001", {"__1_0.distcp": (6, hashlib.sha256(b"abcdeX").hexdigest())})
    assert os.listdir(tmp_path / "step-00000001") == []  # the part is gone, nothing was named
    ckpt_files.put(root, "step-00000001", "__1_0.distcp", 0, b"abcdef")
    ckpt_files.seal(root, "step-00000001", {"__1_0.distcp": (6, hashlib.sha256(b"abcdef").hexdigest())})
    assert (tmp_path / "step-00000001" / "__1_0.distcp").read_bytes() == b"abcdef"


def test_the_place_marker_leaves_nothing_behind(tmp_path):
    root = tmp_path / "runs" / "r" / "node-0" / "out" / "checkpoints"
    made = ckpt_files.place_mark(str(root), "abcdef0123")
    assert ckpt_files.place_look(str(root), "abcdef0123")["seen"]
    assert not ckpt_files.place_look(str(tmp_path / "elsewhere"), "abcdef0123")["seen"]
    ckpt_files.place_clear(str(root), "abcdef0123", made["created"])
    assert os.listdir(tmp_path) == []


# -- the gathers ----------------------------------------------------------------------------------------


def gatherer(tmp_path: Path, holder: str = "node0", lose_after: int | None = None, keep_last: int | None = 3):
    roots = [tmp_path / "n0", tmp_path / "n1"]
    disks = Disks(roots, [NodeFiles(0), NodeFiles(1, lose_after)])
    place = with_holder(judge_marks("out", [str(r) for r in roots], [True, False], ["", ""]), holder)
    target = Endpoint(disks.files[0], str(roots[0])) if holder == "node0" else Endpoint(HereCheckpointFiles(),
                                                                                         str(tmp_path / "here"))
    said = []
    g = Gatherer(disks, place, target, keep_last=keep_last, journal=tmp_path / "gathers.jsonl", lineage=MINE,
                 say=said.append)
    return g, roots, said


def journal(tmp_path: Path) -> list[dict]:
    return [json.loads(x) for x in (tmp_path / "gathers.jsonl").read_text().splitlines()]


def test_a_save_split_over_two_disks_is_gathered_whole_and_the_leftovers_go(tmp_path):
    g, (n0, n1), said = gatherer(tmp_path, keep_last=1)
    save([n0, n1], 2)
    assert [(c.step, c.complete, c.missing_nodes) for c in list_checkpoints(str(n0))] == [(2, False, (1,))]
    asyncio.run(g.pass_once(final=True))
    assert [(c.step, c.complete) for c in list_checkpoints(str(n0))] == [(2, True)]
    assert (n0 / "step-00000002" / "__2_0.distcp").read_bytes() == shard_bytes(2, "__2_0.distcp", 90, None)
    assert os.listdir(n1) == []
    save([n0, n1], 4)
    asyncio.run(g.pass_once(final=False))
    assert [(c.step, c.complete) for c in list_checkpoints(str(n0))] == [(4, True)]  # keep_last 1
    assert [(j["name"], j["ok"], j["from_nodes"], j["files"], j["bytes"]) for j in journal(tmp_path)] == [
        ("step-00000002", True, [1], 2, 170), ("step-00000004", True, [1], 2, 170)]
    assert said == ["gathering checkpoint step-00000002: 0.0 MiB from node 1 into node 0 (n0)"]


def test_a_node_lost_half_way_leaves_that_step_not_whole_and_named_and_the_one_before_resumable(tmp_path):
    g, (n0, n1), said = gatherer(tmp_path, lose_after=300)  # step 2's 170 bytes pass, step 4's do not
    save([n0, n1], 2)
    save([n0, n1], 4)
    failed = asyncio.run(g.settle())
    listed = list_checkpoints(str(n0))
    assert [(c.step, c.complete, c.missing_nodes) for c in listed] == [(2, True, ()), (4, False, (1,))]
    assert sorted(os.listdir(n0 / "step-00000004")) == [".metadata", "__0_0.distcp", "__1_0.distcp", "meta.json"]
    assert "node 1 (n1): lost" in failed["step-00000004"]
    entry = journal(tmp_path)[-1]
    assert entry["name"] == "step-00000004" and not entry["ok"] and "node 1 (n1): lost" in entry["error"]
    assert said[-1].startswith("checkpoint step-00000004 is not whole: node 1 (n1): lost")
    assert os.listdir(n1) == ["step-00000004"]  # its shards stay where they are
    # the run's triage will name node 1 first, in the gather's words
    assert list(g.lost_in_gathers) == [1]
    assert g.lost_in_gathers[1].startswith("lost during the gather of checkpoint step-00000004: node 1 (n1): lost")


def test_a_node_the_run_lost_is_not_asked_at_the_end(tmp_path):
    g, (n0, n1), _ = gatherer(tmp_path)
    save([n0, n1], 2)
    failed = asyncio.run(g.settle(lost={1}))
    assert "node 1 was lost" in failed["step-00000002"]
    assert list(g.lost_in_gathers) == [1]


def test_gathered_here_the_nodes_keep_nothing_and_a_retry_gets_the_newest_back_on_node_0(tmp_path):
    g, (n0, n1), _ = gatherer(tmp_path, holder="here")
    save([n0, n1], 2)
    asyncio.run(g.pass_once(final=True))
    here = tmp_path / "here"
    assert [(c.step, c.complete) for c in list_checkpoints(str(here))] == [(2, True)]
    assert os.listdir(n0) == [] and os.listdir(n1) == []
    assert asyncio.run(g.bring_newest()) == ("step-00000002", True)
    assert [(c.step, c.complete) for c in list_checkpoints(str(n0))] == [(2, True)]
    asyncio.run(g.pass_once(final=False))  # the copy brought for the resume is left alone while it runs
    assert os.listdir(n0) == ["step-00000002"]


def test_a_source_that_changes_during_the_copy_fails_it_and_names_nothing(tmp_path, monkeypatch):
    from launcher.runs.owner import ckpt_copy

    monkeypatch.setattr(ckpt_copy, "CHUNK", 8)  # the first chunk arrives, the second is short
    src, dst = tmp_path / "src", tmp_path / "dst"
    (src / "step-00000001").mkdir(parents=True)
    (src / "step-00000001" / "a.distcp").write_bytes(b"x" * 10)
    files = HereCheckpointFiles()
    with pytest.raises(NodeError, match="it changed while it was copied"):
        asyncio.run(copy_checkpoint(Endpoint(files, str(src)), Endpoint(files, str(dst)), "step-00000001",
                                    {"a.distcp": 20}))
    assert os.listdir(dst / "step-00000001") == []


def test_bringing_a_checkpoint_that_is_there_copies_nothing(tmp_path):
    roots = [tmp_path / "n0", tmp_path / "n1"]
    name = save(roots, 2)
    for f in os.listdir(roots[1] / name):
        os.replace(roots[1] / name / f, roots[0] / name / f)
    files = HereCheckpointFiles()
    assert asyncio.run(bring(Endpoint(files, str(roots[0])), Endpoint(files, str(roots[0])), name)) is None
    copied = asyncio.run(bring(Endpoint(files, str(roots[0])), Endpoint(files, str(tmp_path / "other")), name))
    assert copied.files == 6 and list_checkpoints(str(tmp_path / "other"))[0].complete


# -- straight from node to node ---------------------------------------------------------------------------


def test_a_direct_copy_arrives_named_only_with_the_token_and_the_senders_hashes(tmp_path):
    import socket

    from launcher.backends.agent import ckpt_direct

    src, dst = tmp_path / "n1", tmp_path / "n0"
    (src / "step-00000002").mkdir(parents=True)
    (src / "step-00000002" / "__1_0.distcp").write_bytes(os.urandom(3 << 20))
    sizes = {"__1_0.distcp": 3 << 20}
    there = ckpt_direct.listen(str(dst), "step-00000002", sizes, 30.0)
    with socket.create_connection(("127.0.0.1", there["port"])) as stranger:  # no token: turned away
        stranger.sendall(b"guess\n" + b"x" * 100)
    sent = ckpt_direct.send(str(src), "step-00000002", sizes, "127.0.0.1", there["port"], there["token"], 30.0)
    got = ckpt_direct.received(there["token"], 10.0)
    assert got["state"] == "done" and got["sums"] == sent["sums"]
    assert os.listdir(dst / "step-00000002") == [".part-__1_0.distcp"]  # not named before the seal
    ckpt_files.seal(str(dst), "step-00000002", {f: (sizes[f], h) for f, h in sent["sums"].items()})
    assert (dst / "step-00000002" / "__1_0.distcp").read_bytes() == (src / "step-00000002" / "__1_0.distcp").read_bytes()
    with pytest.raises(ValueError, match="for a direct copy"):
        ckpt_direct.send(str(src), "step-00000002", sizes, "127.0.0.1", there["port"], there["token"], 5.0)


class DirectNodeFiles(NodeFiles):
    """A node whose agent can send and receive straight over TCP, on this machine (or, ``refused``, can
    reach no one that way: a firewall between the nodes)."""

    def __init__(self, rank: int, refused: bool = False) -> None:
        super().__init__(rank)
        self.refused = refused

    async def listen(self, root, name, sizes, timeout_s):
        from launcher.backends.agent import ckpt_direct

        there = await asyncio.to_thread(ckpt_direct.listen, root, name, sizes, timeout_s)
        return there["port"], there["token"]

    async def received(self, token):
        from launcher.backends.agent import ckpt_direct

        got = await asyncio.to_thread(ckpt_direct.received, token, 30.0)
        if got["state"] != "done":
            raise NodeError(f"{self.label}: {got['error']}")
        return got["sums"]

    async def send(self, root, name, sizes, addr, port, token, timeout_s):
        from launcher.backends.agent import ckpt_direct

        try:
            sent = await asyncio.to_thread(ckpt_direct.send, root, name, sizes, addr, 1 if self.refused else port,
                                           token, timeout_s)  # port 1: nothing listens, the dial is refused
        except ValueError as err:
            raise NodeError(f"{self.label}: ckpt_send: {err}") from None
        return sent["sums"]


@pytest.mark.parametrize("refused, via", [(False, "direct"), (True, "launcher")])
def test_a_gather_goes_node_to_node_and_through_here_when_the_nodes_cannot_dial_each_other(tmp_path, refused, via):
    roots = [tmp_path / "n0", tmp_path / "n1"]
    disks = Disks(roots, [DirectNodeFiles(0), DirectNodeFiles(1, refused)])
    place = with_holder(judge_marks("out", [str(r) for r in roots], [True, False], ["", ""]), "node0")
    g = Gatherer(disks, place, Endpoint(disks.files[0], str(roots[0])), keep_last=None,
                 journal=tmp_path / "gathers.jsonl", lineage=MINE, direct_addr="127.0.0.1")
    save(roots, 2)
    asyncio.run(g.pass_once(final=False))
    assert [(c.step, c.complete) for c in list_checkpoints(str(roots[0]))] == [(2, True)]
    lines = journal(tmp_path)
    assert lines[-1]["via"] == via
    if refused:
        assert "cannot dial node 0 (n0)" in lines[0]["note"] and "for a direct copy" in lines[0]["note"]


def test_a_launch_finds_the_place_keeps_it_in_the_plan_and_refuses_a_holder_it_does_not_have(tmp_path):
    from launcher.runs.owner.keeper import CheckpointKeeper
    from launcher.runs.owner.outcome import LaunchFailed
    from launcher.workload.plan import build_plan, plan_from_json, plan_to_json
    from launcher.workload.validate import validate_text

    def plan_for(gather_to: str):
        text = ("experiment_name: g\ncompute: {accelerator_type: CPU, procs_per_node: 1, num_accelerators: 2, "
                "hosts: [a, b]}\nparameters: {model_name: builtin:tiny-llama, dataset_name: builtin:tiny-alpaca, "
                f"output_dir: out, checkpoint: {{gather_to: '{gather_to}'}}}}\n")
        return build_plan(validate_text(text, "w.yaml").workload, run_id="r")

    class Nodes:
        def __init__(self, plan) -> None:
            self.plan = plan

        async def checkpoint_place(self, output_dir: str) -> CheckpointPlace:
            return judge_marks(output_dir, ["/a/out/checkpoints", "/b/out/checkpoints"], [True, False], ["", ""])

    keeper = CheckpointKeeper(tmp_path, lambda plan: None, HereCheckpointFiles)
    found = asyncio.run(keeper.locate(Nodes(plan_for("node1:/big/ckpts"))))
    assert found.ckpt_place.holder == Holder(1, "/big/ckpts") and found.ckpt_place.gathers
    assert plan_from_json(json.loads(json.dumps(plan_to_json(found)))).ckpt_place == found.ckpt_place
    with pytest.raises(LaunchFailed, match="gather_to: node 5, but the run has 2 node"):
        asyncio.run(keeper.locate(Nodes(plan_for("node5:/big/ckpts"))))
