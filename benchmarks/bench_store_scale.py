"""The run store at scale (goals: ``fsdp-tui runs`` <= 0.5 s and the app's first screen <= 1 s at
100,000 runs): data dirs of 10,000 and 100,000 ended runs, filled through the store's own API
(``tests/support/many_runs.py``: ``RunStore.restore_runs``, a folder per run), then

- ``fsdp-tui runs``, ``runs --limit 20`` and ``show RUN``, each a whole command (a child process: start-up
  included; ``fsdp-tui --help`` and ``python -c pass`` are timed beside them);
- ``runs`` taken apart, measured: the interpreter's start and exit, the imports the command makes, and the
  command's own work (queries, folders read, printing), in one child that imports first, then runs;
- what ``runs`` and the app's home ask of the door, timed in this process (the store's share);
- ``fsdp-tui`` in a real terminal (tmux) from its start to the home screen showing the runs' title;
- with ``--base DIR`` (a checkout of the code before a change, e.g. ``git archive``), the same commands and
  first screen with that code, on the same store, side by side, with the ratios.

Each child gets a bytecode cache of its own (``PYTHONPYCACHEPREFIX`` in the benchmark's folder, written by a
first, untimed run), as an installed package has (pip compiles it): a ``PYTHONDONTWRITEBYTECODE`` in the
environment would otherwise make every command compile each module it imports (the row "no bytecode
cache" says what that costs).

    flock /tmp/fsdp-bench.lock .venv/bin/python benchmarks/bench_store_scale.py [--base DIR] [--sizes 10000 100000]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
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
PYCACHE: Path | None = None
"""The children's bytecode cache (set in ``main``); ``None``: no cache, each module compiled."""


def child_env(home: Path, code_root: Path, cache: bool = True) -> dict[str, str]:
    env = {**os.environ, "FSDP_TUI_HOME": str(home), "PYTHONPATH": str(code_root)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if cache and PYCACHE is not None:
        env["PYTHONPYCACHEPREFIX"] = str(PYCACHE / code_root.name)
    else:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env.pop("PYTHONPYCACHEPREFIX", None)
    return env


def command(argv: list[str], home: Path, code_root: Path = ROOT, times: int = 5,
            cache: bool = True) -> tuple[float, str]:
    """Median wall seconds of ``argv`` (run ``times`` times, after one untimed run that writes the bytecode
    cache) and its last output's first line."""
    env = child_env(home, code_root, cache)
    subprocess.run(argv, capture_output=True, env=env, cwd=code_root, timeout=TIMEOUT_S)
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


_TAKEN_APART = """
import json, sys, time
began = time.perf_counter()
import importlib
for name in json.loads(sys.argv[1]):
    try:
        importlib.import_module(name)
    except ImportError:
        pass
imported = time.perf_counter()
from launcher.cli.main import main
code = main(["runs"])
done = time.perf_counter()
print(json.dumps([imported - began, done - imported, code]), file=sys.stderr)
"""


def runs_taken_apart(home: Path, code_root: Path = ROOT, times: int = 3) -> dict[str, float]:
    """``fsdp-tui runs`` in parts, each measured: the modules it loads (asked of one run of it) imported
    first, timed, then the command run in the same process (its queries, folders read and printing); the
    process's wall less both is the interpreter's start and exit. Medians of ``times``."""
    env = child_env(home, code_root)
    listed = subprocess.run([sys.executable, "-c", "import sys, json\nfrom launcher.cli.main import main\n"
                             "main(['runs'])\nprint(json.dumps(sorted(sys.modules)), file=sys.stderr)"],
                            capture_output=True, text=True, env=env, cwd=code_root, timeout=TIMEOUT_S)
    before = subprocess.run([sys.executable, "-c", "import sys, json; print(json.dumps(sorted(sys.modules)))"],
                            capture_output=True, text=True, env=env, cwd=code_root).stdout
    modules = sorted(set(json.loads(listed.stderr.splitlines()[-1])) - set(json.loads(before)))
    parts: dict[str, list[float]] = {"start and exit": [], "imports": [], "the command's work": [], "whole": []}
    for _ in range(times):
        began = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", _TAKEN_APART, json.dumps(modules)], capture_output=True,
                              text=True, env=env, cwd=code_root, timeout=TIMEOUT_S)
        wall = time.perf_counter() - began
        imports, work, code = json.loads(done.stderr.splitlines()[-1])
        assert code == 0, done.stderr
        for name, value in (("start and exit", wall - imports - work), ("imports", imports),
                            ("the command's work", work), ("whole", wall)):
            parts[name].append(value)
    return {name: statistics.median(values) for name, values in parts.items()} | {"modules": len(modules)}


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


BARE_APP = """
from textual.app import App
from textual.widgets import DataTable, Footer, Header, Label
class Bare(App):
    def compose(self):
        yield Header()
        yield Label("a bare app, drawn")
        yield DataTable()
        yield Footer()
Bare().run()
"""
"""The floor of any Textual app's first screen here: Python's start, Textual's imports, its first paint."""


def first_screen(home: Path, runs: int, tries: int = 3, code_root: Path = ROOT, bare: bool = False) -> list[float]:
    """Seconds from ``fsdp-tui`` starting in tmux to its home screen's runs title naming ``runs`` (after one
    untimed start that writes the bytecode cache); with ``bare``, of :data:`BARE_APP` to its label."""
    if shutil.which("tmux") is None:
        return []
    want = "a bare app, drawn" if bare else f"of {runs:,} runs"
    server = f"bench-store-{runs}-{code_root.name}-{int(bare)}"  # a tmux server of its own each time: one that
    # is still exiting when the next is asked for says "server exited unexpectedly"
    times = []
    # A session that stays while the measured ones come and go: the server never exits between them.
    subprocess.run(["tmux", "-L", server, "new-session", "-d", "-s", "keep", "sleep 3600"], check=True)
    env = child_env(home, code_root)
    cache = f"PYTHONPYCACHEPREFIX={env['PYTHONPYCACHEPREFIX']} " if "PYTHONPYCACHEPREFIX" in env else ""
    line = (f"cd {code_root} && unset PYTHONDONTWRITEBYTECODE && {cache}PYTHONPATH={code_root} "
            f"FSDP_TUI_HOME={home} " + (f"{sys.executable} -c {shlex.quote(BARE_APP)}" if bare else FSDP_TUI))
    for i in range(tries + 1):
        session = f"bench-store-{runs}-{i}"
        began = time.perf_counter()
        subprocess.run(["tmux", "-L", server, "new-session", "-d", "-s", session, "-x", "160", "-y", "50",
                        line], check=True)
        try:
            while True:
                shown = subprocess.run(["tmux", "-L", server, "capture-pane", "-t", session, "-p"],
                                       capture_output=True, text=True).stdout
                if want in shown:
                    if i:  # the first start wrote the bytecode cache
                        times.append(time.perf_counter() - began)
                    break
                if time.perf_counter() - began > 60:
                    raise SystemExit(f"the app did not show '{want}' in 60 s:\n{shown}")
                time.sleep(0.01)
        finally:
            subprocess.run(["tmux", "-L", server, "kill-session", "-t", session])
    subprocess.run(["tmux", "-L", server, "kill-server"], capture_output=True)
    return times


def main() -> None:
    global PYCACHE
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    p.add_argument("--base", type=Path, help="a checkout of the code before a change (side by side)")
    args = p.parse_args()
    print(f"load average at start: {os.getloadavg()}")
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
        PYCACHE = Path(tmp) / "pycache"
        empty = Path(tmp) / "empty"
        python, _ = command([sys.executable, "-c", "pass"], empty)
        start_up, _ = command([FSDP_TUI, "--help"], empty)
        print(f"python -c pass (the interpreter alone): {python:.2f} s")
        print(f"fsdp-tui --help (the command's start-up): {start_up:.2f} s")
        roots = [("", ROOT)] + ([(f" ({args.base.name}, before)", args.base)] if args.base else [])
        for size in args.sizes:
            home = Path(tmp) / f"home-{size}"
            began = time.perf_counter()
            fill(home, 0, size, folders="all")
            recorded = run_id(size - 3)  # an ended run with an output_dir whose owner recorded its safe step
            (home / "runs" / recorded / "safe-step.json").write_text(json.dumps(
                {"name": "step-100", "step": 100, "written_at": time.time() - 3600}))
            print(f"\n### {size:,} runs (filled in {time.perf_counter() - began:.0f} s)\n")
            print("| what | wall | said |\n|---|---|---|")
            walls: dict[tuple[str, str], float] = {}
            for what, argv in (("fsdp-tui runs", [FSDP_TUI, "runs"]),
                               ("fsdp-tui runs --limit 20", [FSDP_TUI, "runs", "--limit", "20"]),
                               ("fsdp-tui show RUN (its safe step recorded)", [FSDP_TUI, "show", recorded]),
                               ("fsdp-tui show RUN (none recorded: its node is asked)",
                                [FSDP_TUI, "show", run_id(size - 1)])):
                for label, root in roots:
                    wall, said = command(argv, home, root)
                    walls[(what, label)] = wall
                    print(f"| `{what}`{label} | {wall:.2f} s | {said[:90]} |")
            wall, _ = command([FSDP_TUI, "runs"], home, times=3, cache=False)
            print(f"| `fsdp-tui runs`, no bytecode cache (each module compiled) | {wall:.2f} s | |")
            parts = runs_taken_apart(home)
            for name in ("start and exit", "imports", "the command's work", "whole"):
                count = f" ({parts['modules']:.0f} modules)" if name == "imports" else ""
                print(f"| `fsdp-tui runs` taken apart: {name}{count} | {parts[name]:.3f} s | |")
            for what, seconds in in_process(home).items():
                print(f"| {what} (in process) | {seconds * 1000:.1f} ms | |")
            bare = first_screen(empty, 0, bare=True)  # the floor, at the same moment's load
            if bare:
                print(f"| a bare Textual app (header, label, table, footer) to its first paint (3 starts) | median "
                      f"{statistics.median(bare):.2f} s, max {max(bare):.2f} s | |")
            for label, root in roots:
                screens = first_screen(home, size, code_root=root)
                if screens:
                    walls[("screen", label)] = statistics.median(screens)
                    print(f"| the app: start to the home screen's runs{label} ({len(screens)} starts) | median "
                          f"{statistics.median(screens):.2f} s, max {max(screens):.2f} s | |")
            for what, label in walls:
                if label and (what, "") in walls:
                    print(f"| ratio before / now: {'the first screen' if what == 'screen' else what} | "
                          f"{walls[(what, label)] / walls[(what, '')]:.2f}x | |")
            shutil.rmtree(home)
    print(f"\nload average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
