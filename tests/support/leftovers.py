"""What the test suite left running: ``.ci/run`` lists every process before the tests and calls this after
them (``python tests/support/leftovers.py BEFORE``). A process started since that is the suite's (it carries
the suite's environment, runs from the repository or a test's temporary folder, or is a daemon the tests
start: sshd, SLURM, munge, tmux, torchrun) and still runs after a short grace is named, stopped, and fails
the run: an agent of a killed namespace host, a torchrun whose test timed out, a cluster left up.

Run by hand with ``--self-test`` to see it find a process it started itself.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

GRACE_S = 15.0
"""How long processes may take to finish exiting after the tests end (a fixture's teardown signals them)."""
DAEMONS = ("sshd", "slurmctld", "slurmd", "slurmstepd", "munged", "tmux", "torchrun")
"""Programs the suite starts: one of them started during the run is the suite's wherever it runs from."""
MARKS = (str(Path(__file__).resolve().parents[2]), "/tmp/pytest-of-")
"""Where the suite's processes run from or name in their command line: the repository, pytest's folders."""


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


def _state(pid: int) -> str:
    stat = _read(Path(f"/proc/{pid}/stat")).decode(errors="replace")
    return stat.rsplit(")", 1)[-1].split()[0] if ")" in stat else ""


def _ours(pid: int) -> str:
    """The process's command line when it is the suite's, else empty."""
    proc = Path(f"/proc/{pid}")
    argv = _read(proc / "cmdline").split(b"\0")
    if not argv or not argv[0] or _state(pid) in ("Z", "X", ""):
        return ""  # a kernel thread, a zombie, or gone
    line = " ".join(a.decode(errors="replace") for a in argv if a)
    try:
        cwd = os.readlink(proc / "cwd")
    except OSError:
        cwd = ""
    program = Path(argv[0].decode(errors="replace").split()[0]).name
    if (program in DAEMONS or any(m in line or cwd.startswith(m) for m in MARKS)
            or b"FSDP_TUI_SUITE=1" in _read(proc / "environ").split(b"\0")):
        return line
    return ""


def leftovers(before: set[int]) -> dict[int, str]:
    """The suite's processes alive now that were not in ``before`` (this one and its parent aside)."""
    mine = {os.getpid(), os.getppid()}
    found: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) not in before and int(entry.name) not in mine:
            line = _ours(int(entry.name))
            if line:
                found[int(entry.name)] = line
    return found


def check(before: set[int], grace_s: float = GRACE_S, *, stop: bool = True) -> dict[int, str]:
    """What still runs after ``grace_s``; each is then killed (``stop``: the machine left as the suite found
    it)."""
    deadline = time.monotonic() + grace_s
    left = leftovers(before)
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = leftovers(before)
    for pid in left if stop else ():
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return left


def main(argv: list[str]) -> int:
    if argv[1:] == ["--self-test"]:
        before = {int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()}
        child = subprocess.Popen(["sleep", "300"], env={**os.environ, "FSDP_TUI_SUITE": "1"})
        left = check(before, grace_s=1.0, stop=False)
        child.kill()
        child.wait()
        print(f"found {left}" if child.pid in left else "missed the process it started")
        return 0 if child.pid in left else 1
    before = {int(x) for x in Path(argv[1]).read_text().split()}
    left = check(before)
    if not left:
        print("leftovers: no process of the suite outlived it")
        return 0
    print(f"leftovers: {len(left)} process(es) of the suite outlived it (stopped now):", file=sys.stderr)
    for pid, line in sorted(left.items()):
        print(f"  {pid}: {line[:300]}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
