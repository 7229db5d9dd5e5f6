"""The run store at scale (goals: ``fsdp-tui runs`` <= 0.5 s and the app's first screen <= 1 s at
100,000 runs): data dirs of 10,000 and 100,000 ended runs, filled through the store's own API
(``tests/support/many_runs.py``: ``RunStore.restore_runs``, a folder per run), then

- ``fsdp-tui runs``, ``runs --limit 20`` and ``show RUN``, each a whole command (a child process: start-up
  included; ``fsdp-tui --help`` is timed beside them as the start-up alone);
- what ``runs`` and the app's home ask of the door, timed in this process (the store's share);
- ``fsdp-tui`` in a real terminal (tmux) from its start to the home screen showing the runs' title;
- with ``--base DIR`` (a checkout of the code before this change, e.g. ``git archive``), its
  ``runs --limit 20`` at 10,000 runs on a copy of the store without the new indexes, side by side.

    flock /tmp/fsdp-bench.lock .venv/bin/python benchmarks/bench_store_scale.py [--base DIR] [--sizes 10000 100000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.support.many_runs import fill, run_id  # noqa: E402  (this checkout's test helpers)

FSDP_TUI = str(Path(sys.executable).with_name("fsdp-tui"))
TIMEOUT_S = 600


def command(argv: list[str], home: Path, code_root: Path = ROOT, times: int = 3) -> tuple[float, str]:
    """Median wall seconds of ``argv`` (run ``times`` times) and its last output's first line."""
    env = {**os.environ, "FSDP_TUI_HOME": str(home), "PYTHONPATH": str(code_root)}
    walls, out = [], ""
    for _ in range(times):
        began = time.perf_counter()
        try:
            done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=code_root, timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return float("inf"), f"over {TIMEOUT_S} s"
        walls.append(time.perf_counter() - began)
        out = (done.stdout or done.stderr).splitlines()[-1:] if done.returncode == 0 else [done.stderr[-300:]]
    return statistics.median(walls), out[0] if out else ""


def in_process(home: Path) -> dict[str, float]:
    """Seconds of what ``runs`` and the app's home ask of the door, in this process (no start-up)."""
    from launcher.api import Client
    from tui.screens.home import HOME_RUNS

    client = Client(home)
    out = {}
    for name, call in (("runs: listing of the newest 50", lambda: client.runs.listing(limit=50)),
                       ("runs: the count", lambda: client.runs.count()),
                       ("runs: live runs adopted, unsent runs looked for", client.runs.adopt),
                       ("home: the newest 500", lambda: client.runs.list(limit=HOME_RUNS)),
                       ("home: a filter asked of the store", lambda: client.runs.list(limit=HOME_RUNS,
                                                                                        matching="sweep-3 cancelled"))):
        call()  # the page cache warm, as for a user's second look
        began = time.perf_counter()
        call()
        out[name] = time.perf_counter() - began
    return out


def first_screen(home: Path, runs: int, tries: int = 3) -> list[float]:
    """Seconds from ``fsdp-tui`` starting in tmux to its home screen's runs title naming ``runs``."""
    if shutil.which("tmux") is None:
        return []
    want = f"of {runs:,} runs"
    times = []
    # A session that stays while the measured ones come and go: the server never exits between them.
    subprocess.run(["tmux", "-L", "bench-store", "new-session", "-d", "-s", "keep", "sleep 3600"], check=True)
    for i in range(tries):
        session = f"bench-store-{runs}-{i}"
        began = time.perf_counter()
        subprocess.run(["tmux", "-L", "bench-store", "new-session", "-d", "-s", session, "-x", "160", "-y", "50",
                        f"cd {ROOT} && PYTHONPATH={ROOT} FSDP_TUI_HOME={home} {FSDP_TUI}"], check=True)
        try:
            while True:
                shown = subprocess.run(["tmux", "-L", "bench-store", "capture-pane", "-t", session, "-p"],
                                       capture_output=True, text=True).stdout
                if want in shown:
                    times.append(time.perf_counter() - began)
                    break
                if time.perf_counter() - began > 60:
                    raise SystemExit(f"the app did not show '{want}' in 60 s:\n{shown}")
                time.sleep(0.01)
        finally:
            subprocess.run(["tmux", "-L", "bench-store", "kill-session", "-t", session])
    subprocess.run(["tmux", "-L", "bench-store", "kill-server"], capture_output=True)
    return times


def without_indexes(home: Path, into: Path) -> Path:
    """A copy of ``home``'s store as the code before the indexes made it (their folders linked)."""
    into.mkdir()
    shutil.copy(home / "runs.db", into / "runs.db")
    (into / "runs").symlink_to(home / "runs")
    db = sqlite3.connect(into / "runs.db")
    names = [n for (n,) in db.execute("SELECT name FROM sqlite_master WHERE type='index' AND name NOT LIKE 'sqlite_%'")]
    for name in names:
        db.execute(f"DROP INDEX {name}")
    db.commit()
    db.close()
    return into


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    p.add_argument("--base", type=Path, help="a checkout of the code before this change (side by side at 10,000)")
    args = p.parse_args()
    print(f"load average at start: {os.getloadavg()}")
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
        empty = Path(tmp) / "empty"
        start_up, _ = command([FSDP_TUI, "--help"], empty)
        print(f"fsdp-tui --help (start-up alone): {start_up:.2f} s")
        for size in args.sizes:
            home = Path(tmp) / f"home-{size}"
            began = time.perf_counter()
            fill(home, 0, size, folders="all")
            print(f"\n### {size:,} runs (filled in {time.perf_counter() - began:.0f} s)\n")
            print("| what | wall | said |\n|---|---|---|")
            for what, argv in (("fsdp-tui runs", [FSDP_TUI, "runs"]),
                               ("fsdp-tui runs --limit 20", [FSDP_TUI, "runs", "--limit", "20"]),
                               ("fsdp-tui show RUN", [FSDP_TUI, "show", run_id(size - 1)])):
                wall, said = command(argv, home)
                print(f"| `{what}` | {wall:.2f} s | {said[:90]} |")
            for what, seconds in in_process(home).items():
                print(f"| {what} (in process) | {seconds * 1000:.1f} ms | |")
            screens = first_screen(home, size)
            if screens:
                print(f"| the app: start to the home screen's runs ({len(screens)} starts) | median "
                      f"{statistics.median(screens):.2f} s, max {max(screens):.2f} s | |")
            if args.base and size == min(args.sizes):
                old = without_indexes(home, Path(tmp) / f"old-{size}")
                base, said = command([FSDP_TUI, "runs", "--limit", "20"], old, code_root=args.base, times=1)
                ours, _ = command([FSDP_TUI, "runs", "--limit", "20"], home)
                print(f"| before: `fsdp-tui runs --limit 20` ({args.base}, store without the indexes) | "
                      f"{base:.2f} s | {said[:60]} |")
                print(f"| ratio before / now | {base / ours:.1f}x | |")
            shutil.rmtree(home)
    print(f"\nload average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
