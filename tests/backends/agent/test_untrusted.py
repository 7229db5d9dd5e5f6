"""What a node sends, decoded where it enters: printable strings, checkpoint listings that never follow a
link, and exports unpacked by the agent's own tar rule. Pure and fast, plus one export fetched through a
real ``AgentLink`` from a fake agent that answers with crafted tars."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import os
import tarfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from launcher.backends.agent import wire
from launcher.backends.agent.checkpoints import delete
from launcher.backends.agent_client import AgentLink
from launcher.backends.base import CheckpointListing, NodeError, NodeStatus, StackDump
from launcher.backends.replies import gpus_from_wire
from launcher.backends.shipping import unpack_here
from launcher.backends.transfer import fetch_tree
from launcher.untrusted import clean_reply, printable
from tests.support.hostile import CORPUS, SAFE_TEXT, reached_terminal_safely
from trainer.wire.ckpt_layout import list_checkpoints
from trainer.wire.ckpt_owner import newest_whole

BIDI = "\u202e\u2066\u200f\u2028"


def _clean_text(text: str, newlines: bool) -> bool:
    return reached_terminal_safely(text) and (newlines or "\n" not in text) and not any(c in text for c in BIDI)


@pytest.mark.parametrize("name,seq", CORPUS, ids=[n for n, _ in CORPUS])
def test_printable_passes_the_log_panes_corpus(name, seq):
    raw = ("step-00000009-" + seq.decode("utf-8", "replace") + SAFE_TEXT + "\r\tx\n" + BIDI + "end")
    one_line = printable(raw)
    assert _clean_text(one_line, newlines=False) and one_line.startswith("step-00000009-")
    assert "PWNED" not in one_line and one_line.endswith("end")
    kept = printable(raw, newlines=True)
    assert _clean_text(kept, newlines=True) and kept.count("\n") == 1


def test_plain_text_is_left_alone_and_long_replies_are_not_cut():
    text = "step-00000011-a #b: c ünïcode ✓"
    assert printable(text) is text
    long = "{" + "x" * 50_000 + "}\n" + "y" * 20_000
    assert clean_reply({"stdout": long}) == {"stdout": long}


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=6)
_keys = st.sampled_from(["state", "attempt", "exit_code", "stopped", "supervisor_alive", "error", "resubmit",
                         "checkpoints", "root", "exists", "step", "path", "complete", "size_bytes", "mtime",
                         "link", "gpus", "index", "name", "memory_used_mib", "utilization_pct", "stacks", "pid",
                         "how", "text"])
_nasty_text = st.text(alphabet=st.characters(codec="utf-8") | st.sampled_from(["\x1b", "\x9b", "\x07", "\r",
                                                                                 "\n", "]", "\u202e"]))
_reply = st.dictionaries(_keys, _json | _nasty_text | st.lists(st.dictionaries(_keys, _json | _nasty_text)),
                         max_size=8)


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(k)
            yield from _strings(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _strings(v)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_reply)
def test_fuzz_node_replies_decode_to_printable_values_and_never_raise(reply):
    cleaned = clean_reply(json.loads(json.dumps(reply)))
    assert all(_clean_text(s, newlines=True) for s in _strings(cleaned))
    status = NodeStatus.from_wire(1, cleaned)
    assert status.state in ("absent", "starting", "running", "exited")
    assert all(_clean_text(s, newlines=False) for s in (status.error, status.resubmit))
    assert status.attempt is None or type(status.attempt) is int
    listing = CheckpointListing.from_wire(0, "node 0 (x)", "out", cleaned)
    for c in listing.checkpoints:
        assert _clean_text(c.path, newlines=False) and _clean_text(c.name, newlines=False)
        assert type(c.step) is int and c.size_bytes >= 0 and not (c.link and c.complete)
    assert _clean_text(listing.root, newlines=False)
    for g in gpus_from_wire(cleaned):
        assert _clean_text(g.name, newlines=False) and type(g.index) is int
    for d in StackDump.many_from_wire(cleaned.get("stacks")):
        assert _clean_text(d.text, newlines=True) and type(d.pid) is int


GPU = {"index": 0, "name": "NVIDIA H100 80GB HBM3", "memory_used_mib": 40960.0, "memory_total_mib": 81920.0,
       "utilization_pct": 97.0, "power_w": 350.5, "power_limit_w": 700.0}


@pytest.mark.parametrize(("gpus", "expect"), [
    ([GPU], [(0, "NVIDIA H100 80GB HBM3", 40960.0, 97.0, 350.5, 700.0)]),
    ([{**GPU, "power_w": None, "power_limit_w": None}], [(0, GPU["name"], 40960.0, 97.0, None, None)]),
    ([{k: v for k, v in GPU.items() if not k.startswith("power")}], [(0, GPU["name"], 40960.0, 97.0, None, None)]),
    ([{**GPU, "power_w": "[N/A]", "power_limit_w": -1}], [(0, GPU["name"], 40960.0, 97.0, None, None)]),
    ([{**GPU, "name": "H100\x1b]2;PWNED\x07"}], [(0, "H100", 40960.0, 97.0, 350.5, 700.0)]),
    ([{**GPU, "memory_used_mib": 12}], [(0, GPU["name"], 12.0, 97.0, 350.5, 700.0)]),   # an int is a figure
    ([{**GPU, "index": "0"}, {**GPU, "index": True}, {**GPU, "index": -1}], []),
    ([{**GPU, "utilization_pct": 250.0}, {**GPU, "utilization_pct": "97"}], []),
    ([{**GPU, "memory_used_mib": float("inf")}, {**GPU, "memory_total_mib": None}, {**GPU, "name": 7}], []),
    ([{**GPU, "extra": 1}, "not a gpu", [1, 2]], [(0, GPU["name"], 40960.0, 97.0, 350.5, 700.0)]),
    ("gpus", []),
    (None, []),
])
def test_gpu_samples_are_decoded_once_where_a_node_sends_them(gpus, expect):
    """What ``nvidia-smi`` said on a node (its agent's ``gpus`` reply, a SLURM task's ``gpus.json``): a GPU
    whose figures are not a GPU's is left out, a power figure of the wrong kind reads as unknown."""
    got = gpus_from_wire({"gpus": gpus})
    assert [(g.index, g.name, g.memory_used_mib, g.utilization_pct, g.power_w, g.power_limit_w) for g in got] == expect
    assert gpus_from_wire(gpus) == ()  # a reply that is not an object holds no GPU


@pytest.mark.parametrize(("stacks", "expect"), [
    ([{"pid": 41, "rank": 1, "how": "py-spy", "text": "Thread 41\n  train (train.py:9)"}],
     [(41, 1, "py-spy", "Thread 41\n  train (train.py:9)")]),
    ([{"pid": 0, "rank": 0, "how": "flight-recorder", "text": "{}"}], [(0, 0, "flight-recorder", "{}")]),
    ([{"pid": 7, "how": "none", "text": "cannot signal it"}], [(7, None, "none", "cannot signal it")]),
    ([{"pid": 7, "rank": "1", "how": "faulthandler", "text": None}], [(7, None, "faulthandler", "")]),
    ([{"pid": 7, "how": "gdb", "text": "x"}], [(7, None, "none", "x")]),   # a way of dumping we do not know
    ([{"pid": "7", "how": "py-spy", "text": ""}, {"pid": True, "how": "py-spy"}, {"how": "py-spy", "text": ""},
      "dump"], []),
    ({"pid": 7}, []),
])
def test_stack_dumps_are_decoded_once_where_a_node_sends_them(stacks, expect):
    """A node's stack dumps (its agent's reply, a SLURM task's ``stacks.json``): an entry without a process
    id is left out, never a ``KeyError`` in the owner."""
    got = StackDump.many_from_wire(stacks)
    assert [(d.pid, d.rank, d.how, d.text) for d in got] == expect


@settings(max_examples=60, deadline=None)
@given(st.text(min_size=1, max_size=30).filter(lambda s: "/" not in s and "\x00" not in s and s not in (".", "..")))
def test_fuzz_checkpoint_names_from_a_real_listing(tmp_path_factory, suffix):
    root = tmp_path_factory.mktemp("ck") / "checkpoints"
    try:
        (root / ("step-00000007-" + suffix)).mkdir(parents=True)
    except (OSError, UnicodeEncodeError):
        return  # a name this filesystem will not hold
    wire_reply = json.loads(json.dumps({"ok": True, "root": str(root), "exists": True,
                                        "checkpoints": [c.to_dict() for c in list_checkpoints(str(root))]}))
    listing = CheckpointListing.from_wire(0, "node 0", "out", clean_reply(wire_reply))
    [c] = listing.checkpoints
    assert c.step == 7 and _clean_text(c.name, newlines=False)


def test_listing_never_follows_a_link(tmp_path):
    root = tmp_path / "out" / "checkpoints"
    real = root / "step-00000011-a #b: c"
    real.mkdir(parents=True)
    for f in (".metadata", "meta.json"):
        (real / f).write_text(json.dumps({"step": 11}))
    elsewhere = tmp_path / "planted"
    elsewhere.mkdir()
    for f in (".metadata", "meta.json"):
        (elsewhere / f).write_text(json.dumps({"step": 30}))
    (root / "step-00000006").symlink_to("/")
    (root / "step-00000030").symlink_to(elsewhere)  # complete-looking, behind a link
    (real / "big").symlink_to("/proc/kcore")  # a link inside a checkpoint counts as itself

    got = list_checkpoints(str(root))
    assert [(c.step, c.complete, c.link) for c in got] == [(6, False, True), (11, True, False), (30, False, True)]
    assert newest_whole(got).name == "step-00000011-a #b: c"
    assert got[0].size_bytes == 0 and got[1].size_bytes < 1000

    delete("out", {}, str(tmp_path), "step-00000030")  # the link goes, never what it points at
    assert not (root / "step-00000030").is_symlink() and (elsewhere / "meta.json").exists()


def _tar(*entries) -> bytes:
    """Entries: (name, kind, payload): kind is file, dir, symlink, hardlink, fifo, chardev."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, kind, payload in entries:
            info = tarfile.TarInfo(name)
            data = b""
            if kind == "file":
                data = payload
                info.size = len(data)
            elif kind == "dir":
                info.type = tarfile.DIRTYPE
            elif kind == "symlink":
                info.type, info.linkname = tarfile.SYMTYPE, payload
            elif kind == "hardlink":
                info.type, info.linkname = tarfile.LNKTYPE, payload
            elif kind == "fifo":
                info.type = tarfile.FIFOTYPE
            elif kind == "chardev":
                info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 3
            tar.addfile(info, io.BytesIO(data) if data else None)
    return buf.getvalue()


HONEST = [("export-step-9", "dir", None), ("export-step-9/config.json", "file", b"{}"),
          ("export-step-9/model.safetensors", "file", b"w" * 1000)]
HOSTILE = {
    "symlink out": [("export-step-9/pwned", "symlink", "../../outside")],
    "symlink to a secret": [("export-step-9/tokenizer_config_extra.json", "symlink", "/root/.ssh/id_ed25519")],
    "hard link to a secret": [("export-step-9/hardlink_secret", "hardlink", "/etc/passwd")],
    "dot-dot": [("export-step-9/../../pwned.txt", "file", b"x")],
    "absolute": [("/tmp/pwned.txt", "file", b"x")],
    "fifo": [("export-step-9/fifo", "fifo", None)],
    "device": [("export-step-9/null", "chardev", None)],
    "second folder": [("other/pwned.txt", "file", b"x")],
}


def _unpack(data: bytes, to: Path, label: str) -> Path:
    tar_path = to.parent.parent / "received.tar"
    tar_path.write_bytes(data)
    return unpack_here(tar_path, to, label)


@pytest.mark.parametrize("case", list(HOSTILE))
def test_an_export_with_anything_but_files_and_folders_is_refused_whole(tmp_path, case):
    to = tmp_path / "deep" / "export"
    with pytest.raises(NodeError) as err:
        _unpack(_tar(*HONEST, *HOSTILE[case]), to, "node 0 (lab-box)")
    assert "node 0 (lab-box)" in str(err.value) and "nothing was written" in str(err.value)
    assert not to.exists() and list(tmp_path.rglob("*pwned*")) == []
    assert [p.name for p in tmp_path.rglob("*") if p.is_file() or p.is_symlink()] == ["received.tar"]


def test_sizes_beyond_the_tar_and_an_existing_target_are_refused(tmp_path):
    data = _tar(*HONEST)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        from launcher.backends.agent.files import checked_members

        _members, refused = checked_members(tar, 500)  # more file bytes than the node said it sent
    assert refused == ["export-step-9/model.safetensors"]
    (tmp_path / "taken").symlink_to(tmp_path / "nowhere")
    with pytest.raises(NodeError, match="exists"):
        asyncio.run(fetch_tree(_link(_FakeAgent(data)), "/remote/export-step-9", tmp_path / "taken"))


class _FakeAgent:
    """A node agent's channel that answers ``pack`` and ``read`` with a crafted tar (the node's Python made
    hostile), through the real framing and the real :class:`AgentLink`."""

    def __init__(self, tar: bytes, error: str = "") -> None:
        self.tar, self.error = tar, error
        self.lines = [(wire.ready_line("test") + "\n").encode()]
        self.buffer = b""

    def write(self, data: bytes) -> None:
        n_head, _n_body = wire.parse_sizes(data.split(b"\n", 1)[0])
        req = json.loads(data.split(b"\n", 1)[1][:n_head])
        if req["op"] == "pack":
            answer = wire.encode({"ok": True, "name": req["name"], "size": len(self.tar),
                                  "sha256": hashlib.sha256(self.tar).hexdigest()})
        elif req["op"] == "read":
            answer = wire.encode({"ok": True}, self.tar[req["offset"]:req["offset"] + req["limit"]])
        else:
            answer = wire.encode({"ok": False, "error": self.error})
        line, rest = answer.split(b"\n", 1)
        self.lines.append(line + b"\n")
        self.buffer += rest

    async def drain(self) -> None:
        pass

    async def readline(self) -> bytes:
        return self.lines.pop(0)

    async def readexactly(self, n: int) -> bytes:
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out

    async def stderr_tail(self, timeout_s: float) -> str:
        return ""

    def close(self) -> None:
        pass


def _link(agent: _FakeAgent) -> AgentLink:
    async def opener():
        return agent

    return AgentLink(0, "node 0 (lab-box)", opener, lost_after_s=1.0)


def test_an_export_fetched_from_a_hostile_agent_writes_nothing_outside_its_folder(tmp_path):
    secret = tmp_path / "id_ed25519"
    secret.write_text("KEY")
    crafted = _tar(*HONEST, ("export-step-9/tokenizer_config_extra.json", "symlink", str(secret)),
                   ("export-step-9/hardlink_secret", "hardlink", str(secret)),
                   ("export-step-9/../pwned.txt", "file", b"x"))
    with pytest.raises(NodeError) as err:
        asyncio.run(fetch_tree(_link(_FakeAgent(crafted)), "/remote/export-step-9", tmp_path / "out"))
    assert "node 0 (lab-box)" in str(err.value) and "3 entries" in str(err.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["id_ed25519"] and os.stat(secret).st_nlink == 1
    assert secret.read_text() == "KEY"

    got = asyncio.run(fetch_tree(_link(_FakeAgent(_tar(*HONEST))), "/remote/export-step-9", tmp_path / "out"))
    assert sorted(p.name for p in got.iterdir()) == ["config.json", "model.safetensors"]
    assert all(p.is_file() and not p.is_symlink() and p.stat().st_nlink == 1 for p in got.iterdir())


def test_an_agents_error_reaches_the_user_printable():
    agent = _FakeAgent(b"", error="no checkpoint \x1b]2;PWNED\x07x\x1b]52;c;UFdORUQ=\x07 here")
    with pytest.raises(NodeError) as err:
        asyncio.run(_link(agent).call("ckpt_delete", name="x"))
    assert reached_terminal_safely(str(err.value)) and "PWNED" not in str(err.value)
    assert str(err.value) == "node 0 (lab-box): no checkpoint x here"
    assert err.value.node_rank == 0  # the node the link is to: the run's triage names it


def test_resume_sets_the_exact_folder_as_data(tmp_path):
    from launcher.runs.core.checkpoints import resume_override
    from launcher.workload.validate import validate_text

    path = "/runs/r1/out/checkpoints/step-00000011-a #b: c"
    result = validate_text("experiment_name: x\ncommand: echo\nparameters: {output_dir: out}\n",
                           overrides=[resume_override(path)])
    assert result.ok, result.problems
    assert result.workload.parameters["checkpoint"]["resume"] == path
    assert [o.describe() for o in result.overrides] == [f"parameters.checkpoint.resume: <unset> -> '{path}'"]
    assert str(Path(path)) == path


def test_the_agent_reads_no_link_and_no_fifo_as_a_runs_file_and_says_so(tmp_path):
    """A rank log, a shard, a checkpoint folder or its meta.json that is a symbolic link (to the node's own
    secret, say) is refused, never followed, in one line naming the file; a FIFO is refused, not waited on."""
    from launcher.backends.agent import ckpt_files, files, serve

    secret = tmp_path / "elsewhere" / "secret"
    secret.parent.mkdir()
    secret.write_bytes(b"the node's own secret\n")
    node_dir = tmp_path / "node-0"
    node_dir.mkdir()
    (node_dir / "rank-1.log").symlink_to(secret)
    os.mkfifo(node_dir / "rank-2.log")
    (node_dir / "rank-3.log").write_bytes(b"rank 3 says\n")
    assert files.read(str(node_dir), "rank-3.log", 0, 100) == b"rank 3 says\n"
    with pytest.raises(files.NotOwn, match=r"rank-1\.log is a symbolic link: not read"):
        files.read(str(node_dir), "rank-1.log", 0, 100)
    with pytest.raises(files.NotOwn, match=r"rank-2\.log is not a regular file: not read"):
        files.read(str(node_dir), "rank-2.log", 0, 100)
    head, _body = wire.read_frame(io.BytesIO(serve.answer(str(node_dir), {"op": "read", "name": "rank-1.log",
                                                                           "offset": 0, "limit": 100}, b"", "")))
    assert head["ok"] is False and "is a symbolic link: not read" in head["error"]
    assert "secret" not in head["error"].replace(str(secret), "")  # its path may be named, never its bytes

    root = tmp_path / "checkpoints"
    whole = root / "step-00000002"
    whole.mkdir(parents=True)
    (whole / "__0_0.distcp").write_bytes(b"shard")
    (whole / "__1_0.distcp").symlink_to(secret)
    (whole / "meta.json").symlink_to(secret)
    (root / "step-00000004").symlink_to(whole)
    assert ckpt_files.read(str(root), "step-00000002", "__0_0.distcp", 0, 10) == b"shard"
    with pytest.raises(files.NotOwn, match=r"__1_0\.distcp is a symbolic link"):
        ckpt_files.read(str(root), "step-00000002", "__1_0.distcp", 0, 10)
    with pytest.raises(files.NotOwn, match=r"step-00000004 is a symbolic link: its files are not read"):
        ckpt_files.read(str(root), "step-00000004", "__0_0.distcp", 0, 10)
    assert ckpt_files.files(str(root), "step-00000002")["meta"] is None  # a linked meta.json is no record
