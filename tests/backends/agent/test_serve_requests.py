"""The agent as it travels (the boot command, its zip on stdin) answering over a pipe: a channel that asks
no checkpoint request never loads the checkpoints' modules, one that does gets its answer, and a request
nobody knows is named in its answer."""

from __future__ import annotations

import io
import subprocess
import sys

from launcher.backends import bundle
from launcher.backends.agent import wire

TRACE = """import atexit, sys
atexit.register(lambda: sys.stderr.write("LOADED " + " ".join(sorted(
    m.rsplit(".", 1)[-1] for m in sys.modules if m.startswith("fsdp_tui_agent."))) + "\\n"))
"""


def _ask(tmp_path, *requests: dict) -> tuple[list[dict], set[str]]:
    """The answers to ``requests`` on one channel, and the agent's modules loaded by its end."""
    argv = bundle.boot_argv(sys.executable, str(tmp_path / "node"))
    argv[2] = TRACE + argv[2]  # the boot as it is, after a line that names the modules loaded at the end
    stdin = bundle.boot_payload() + b"".join(wire.encode(r) for r in requests)
    done = subprocess.run(argv, input=stdin, capture_output=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 0, done.stderr.decode()
    out = io.BytesIO(done.stdout)
    out.readline()  # the ready line
    answers = []
    while (frame := wire.read_frame(out)) is not None:
        answers.append(frame[0])
    loaded = next(line for line in done.stderr.decode().splitlines() if line.startswith("LOADED "))
    return answers, set(loaded.split()[1:])


def test_a_channel_without_checkpoint_requests_never_loads_their_modules(tmp_path):
    answers, loaded = _ask(tmp_path, {"op": "status"}, {"op": "gpus"})
    assert [a["ok"] for a in answers] == [True, True]
    assert "serve" in loaded and not loaded & {"ckpt_serve", "checkpoints", "ckpt_direct", "ckpt_files"}


def test_a_checkpoint_request_is_answered_and_an_unknown_one_named(tmp_path):
    (tmp_path / "out").mkdir()
    answers, loaded = _ask(tmp_path, {"op": "ckpt_list", "output_dir": str(tmp_path / "out")},
                           {"op": "no_such_request"})
    assert answers[0]["ok"] is True, answers[0]
    assert answers[1] == {"ok": False, "error": "unknown request 'no_such_request'"}
    assert {"ckpt_serve", "checkpoints"} <= loaded
