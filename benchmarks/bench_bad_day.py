"""What a bad day costs the operator's machine: ``fsdp-tui logs RUN --tail 50`` on node logs of growing
size (time and peak memory should follow the 50 lines, not the file), and ``validate --set`` with an
8-level YAML alias bomb as the value (refused; time and peak memory of the whole command).

    .venv/bin/python benchmarks/bench_bad_day.py

Each figure is one child process: wall time, and its peak resident memory (``os.wait4``'s rusage).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FSDP_TUI = str(Path(sys.executable).with_name("fsdp-tui"))
LINE = b"%08d step\n"


def timed(argv: list[str], env: dict) -> tuple[float, float, int]:
    """Wall seconds, peak RSS in MiB and exit code of one child."""
    began = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=ROOT)
    _pid, status, usage = os.wait4(proc.pid, 0)
    return time.perf_counter() - began, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status)


def main() -> None:
    print(f"load average at start: {os.getloadavg()}")
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "data"
        env = {**os.environ, "FSDP_TUI_HOME": str(home)}
        wl = Path(tmp) / "w.yaml"
        wl.write_text("experiment_name: bench-bad-day\ncommand: echo one line\nmlflow: {enabled: false}\n")
        out = subprocess.run([FSDP_TUI, "run", str(wl), "--json"], capture_output=True, text=True, env=env, cwd=ROOT)
        run_id = json.loads(out.stdout.splitlines()[0])["run_id"]
        mirror = home / "runs" / run_id / "nodes" / "0.log"
        block = b"".join(LINE % i for i in range(100_000))
        print("| log size | lines | `logs --tail 50` wall | peak RSS |")
        print("|---|---|---|---|")
        for blocks in (4, 43, 129):
            with open(mirror, "wb") as f:
                for _ in range(blocks):
                    f.write(block)
            wall, rss, code = timed([FSDP_TUI, "logs", run_id, "--tail", "50"], env)
            assert code == 0
            print(f"| {mirror.stat().st_size / 1e6:.0f} MB | {blocks * 100_000:,} | {wall:.2f} s | {rss:.0f} MiB |")
        bomb = "{" + ", ".join([f"l0: &l0 [{', '.join(['x'] * 9)}]"]
                               + [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 9)]) + "}"
        for what, argv in (("validate (no --set)", [FSDP_TUI, "validate", str(wl)]),
                           ("validate --set compute.hosts=<alias bomb>",
                            [FSDP_TUI, "validate", str(wl), "--set", f"compute.hosts={bomb}"])):
            wall, rss, code = timed(argv, env)
            print(f"{what}: exit {code}, {wall:.2f} s, peak RSS {rss:.0f} MiB")
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
