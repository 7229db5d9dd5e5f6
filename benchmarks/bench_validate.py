"""Validation time of a typical workload, and ``fsdp-tui --help`` start-up time.

Side by side in one run: our validator against a bare ``yaml.safe_load`` of the same file (what
validation costs on top of parsing), and ``fsdp-tui --help`` against a bare ``python -c pass``.

    .venv/bin/python benchmarks/bench_validate.py
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORKLOAD = ROOT / "sample_workloads" / "air_llama31_8b_sft" / "train.yaml"
TRAINER_WORKLOAD = ROOT / "sample_workloads" / "torchtune_llama70b_2node.yaml"
FSDP_TUI = Path(sys.executable).with_name("fsdp-tui")


def _time(fn, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1000)
    return out


def _row(name: str, samples: list[float]) -> float:
    samples = sorted(samples)
    median = statistics.median(samples)
    p95 = samples[int(len(samples) * 0.95) - 1]
    print(f"{name:<44} median {median:8.2f} ms   p95 {p95:8.2f} ms   (n={len(samples)})")
    return median


def main() -> None:
    import yaml

    from launcher.workload.validate import validate_file

    validate_file(WORKLOAD)  # warm imports
    print(f"machine: {sys.platform}, python {sys.version.split()[0]}")
    base = _row("yaml.safe_load (parse only)", _time(lambda: yaml.safe_load(WORKLOAD.read_text()), 200))
    ours = _row("validate_file: air workload (command)", _time(lambda: validate_file(WORKLOAD), 200))
    ours_t = _row("validate_file: built-in trainer workload", _time(lambda: validate_file(TRAINER_WORKLOAD), 200))
    print(f"validation / parse ratio: {ours / base:.1f}x; floor < 50 ms: "
          f"{'met' if max(ours, ours_t) < 50 else 'MISSED'}")
    _with_local_dataset()

    bare = _row("python -c pass", _time(lambda: subprocess.run([sys.executable, "-c", "pass"], check=True), 10))
    helps = _row("fsdp-tui --help", _time(
        lambda: subprocess.run([str(FSDP_TUI), "--help"], check=True, capture_output=True), 10))
    print(f"--help / bare interpreter ratio: {helps / bare:.1f}x; floor < 500 ms: "
          f"{'met' if helps < 500 else 'MISSED'}")
    loaded = subprocess.run([sys.executable, "-c", "import sys; import tui.cli, launcher.cli; "
                             "launcher.cli.build_parser(); print(sorted(m for m in ('torch','textual','mlflow',"
                             "'asyncssh','pydantic') if m in sys.modules))"], capture_output=True, text=True)
    print(f"heavy modules imported by --help: {loaded.stdout.strip()}")


def _with_local_dataset() -> None:
    """The built-in trainer workload reading a local 10 MB JSON Lines dataset: its first rows are read
    once per change of the file (the editor validates at every pause in typing), then come from a cache."""
    import json
    import os
    import tempfile

    from launcher.workload.validate import validate_file
    from trainer.wire import data_peek

    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "train.jsonl"
        row = json.dumps({"instruction": "Summarise the text. " * 5, "input": "word " * 100, "output": "a summary"})
        data.write_text((row + "\n") * (10_000_000 // len(row)))
        wl = Path(tmp) / "w.yaml"
        wl.write_text(TRAINER_WORKLOAD.read_text().replace("yahma/alpaca-cleaned", str(data)))
        assert str(data) in wl.read_text()
        print(f"load average: {os.getloadavg()[0]:.2f}")
        cached = _row("validate_file: + local 10 MB jsonl (cached)", _time(lambda: validate_file(wl), 200))

        def fresh() -> None:
            data_peek._peek.cache_clear()
            validate_file(wl)

        first = _row("validate_file: + local 10 MB jsonl (first read)", _time(fresh, 50))
        print(f"reading the first rows adds {first - cached:.2f} ms once per change of the file")


if __name__ == "__main__":
    main()
