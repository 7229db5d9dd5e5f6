"""``logs --rank`` on a big rank log: a real run on this machine, then 200 MB of one rank's own output in
its node's run directory. The command reads it through the node's agent chunk by chunk and prints as it
goes: every line arrives, in an address space capped far below the log's size (reading it whole, as it
did, ends there out of memory), and ``--tail`` keeps only what it shows."""

from __future__ import annotations

import asyncio
import hashlib
import resource
import subprocess

import pytest

from launcher.runs.core.ownership import owned
from launcher.runs.read.rank_log import CHUNK, RankLog
from tests.support.cli import FSDP_TUI, ROOT, cli_env, events, wait_until

pytestmark = pytest.mark.slow

LINE = b"%09d rank 0 says\n"
LINES = 12_000_000  # 216 MB


def _capped(megabytes: int):
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (megabytes << 20, megabytes << 20))

    return limit


def test_a_rank_log_of_any_size_streams_through_in_bounded_memory(tmp_path):
    home = tmp_path / "data"
    wl = tmp_path / "w.yaml"
    wl.write_text("experiment_name: big-rank-log\ncommand: echo done\nmlflow: {enabled: false}\n")
    run = subprocess.run([FSDP_TUI, "run", str(wl), "--json"], capture_output=True, text=True, timeout=300,
                         env=cli_env(home), cwd=ROOT)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    run_id = events(run.stdout)[0]["run_id"]
    wait_until(lambda: not owned(home, run_id), 120, "the owner to leave")
    [node_dir] = (home / "nodes" / run_id).iterdir()
    written = hashlib.sha256()
    with open(node_dir / "rank-0.log", "wb") as f:
        for n in range(LINES // 100_000):
            block = b"".join(LINE % i for i in range(n * 100_000, (n + 1) * 100_000))
            written.update(block)
            f.write(block)
    size = (node_dir / "rank-0.log").stat().st_size
    assert size > 200e6

    # The reader's contract: chunks of at most CHUNK bytes, the whole log once, in order.
    async def read_all() -> tuple[int, int, int]:
        log = RankLog(home, run_id, 0)
        count = total = biggest = 0
        try:
            async for chunk in log.chunks():
                count, total, biggest = count + 1, total + len(chunk), max(biggest, len(chunk))
        finally:
            await log.close()
        return count, total, biggest

    count, total, biggest = asyncio.run(read_all())
    assert (total, biggest) == (size, CHUNK) and count == -(-size // CHUNK)

    env = cli_env(home)
    every = subprocess.Popen([FSDP_TUI, "logs", run_id, "--rank", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env=env, cwd=ROOT, preexec_fn=_capped(300))
    printed, seen = hashlib.sha256(), 0
    assert every.stdout is not None
    while chunk := every.stdout.read(1 << 20):
        printed.update(chunk)
        seen += chunk.count(b"\n")
    assert every.wait(timeout=600) == 0, every.stderr.read()[-2000:]
    assert seen == LINES and printed.hexdigest() == written.hexdigest()  # every line, in order, byte for byte
    tail = subprocess.run([FSDP_TUI, "logs", run_id, "--rank", "0", "--tail", "3"], capture_output=True, timeout=600,
                          env=env, cwd=ROOT, preexec_fn=_capped(300))
    assert tail.returncode == 0, tail.stderr[-2000:]
    assert tail.stdout.splitlines() == [(LINE % i).rstrip(b"\n") for i in range(LINES - 3, LINES)]
