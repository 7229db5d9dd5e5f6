"""Start-up with and without the cyclic garbage collector (``trainer.wire.startup.imports_without_gc``):
the CPU seconds each heavy import takes in a fresh process, with collection on and inside the helper, side
by side, alternating, the median of ``--repeat`` runs each, and the ratio; then the suite's own collection
(``pytest --co``; ``tests/conftest.py`` collects without the collector and freezes what it imported).

    .venv/bin/python benchmarks/bench_startup_gc.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMPORTS = {
    "a rank: trainer.job, transformers' model classes": "import trainer.job, transformers.modeling_utils",
    "a run's owner: its supervisor (not used there)": "from launcher.runs.owner import supervisor",
    "the app: tui.app (not used there)": "import tui.app",
    "MLflow's client": "import mlflow.entities; from mlflow import MlflowClient",
}
PROBE = """import sys, time
sys.path.insert(0, {root!r})
from trainer.wire.startup import imports_without_gc
start = time.process_time()
if {off}:
    with imports_without_gc():
        {code}
else:
    {code}
print(time.process_time() - start)
"""


def _cpu(code: str, off: bool) -> float:
    out = subprocess.run([sys.executable, "-c", PROBE.format(root=str(ROOT), off=off, code=code)], cwd=ROOT,
                         capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def _collect_cpu(plain: bool) -> float:
    """CPU seconds of ``pytest --co -q tests`` as the suite's conftest has it or, with ``plain``, with the
    collector on throughout (the conftest's ``gc.disable`` made to do nothing)."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", "import gc, sys, pytest\n"
                    "if sys.argv[1] == 'plain':\n"
                    "    gc.disable = lambda: None  # the conftest's pause has no effect\n"
                    "sys.exit(pytest.main(['--co', '-q', '-p', 'no:cacheprovider', 'tests']))",
                    "plain" if plain else "as-is"], cwd=ROOT, capture_output=True, text=True, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"{'import':52s} {'gc on':>7s} {'no gc':>7s} {'ratio':>6s}   (CPU s, median of {args.repeat})")
    for name, code in IMPORTS.items():
        on, off = [], []
        for _ in range(args.repeat):
            on.append(_cpu(code, False))
            off.append(_cpu(code, True))
        a, b = statistics.median(on), statistics.median(off)
        print(f"{name:52s} {a:7.2f} {b:7.2f} {b / a:6.2f}x")
    on, off = [], []
    for _ in range(max(1, args.repeat // 2)):
        on.append(_collect_cpu(True))
        off.append(_collect_cpu(False))
    a, b = statistics.median(on), statistics.median(off)
    print(f"{'pytest --co tests (the suite collected, one worker)':52s} {a:7.2f} {b:7.2f} {b / a:6.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
