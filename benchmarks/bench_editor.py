"""The editor while typing: key-to-screen latency in a 300-line workload, with completion computed on
every key and validation (a worker thread, debounced) running between bursts of keys.

Types ``  seed: 7`` on a line inside ``parameters`` and deletes it again, over and over, 70 ms between
keys, with a pause after each word long enough for validation to start; latency is from the key event
(posted as a terminal's would be) to the first frame rendered after the buffer changed.

    .venv/bin/python benchmarks/bench_editor.py [--seconds 30] [--bare]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

WORD = "  seed: 7"


def workload_300_lines() -> str:
    """A valid built-in-trainer workload of 300 lines: a long environment and every parameter section."""
    head = """\
experiment_name: bench-editor
compute:
  accelerator_type: GPU_8xH100
  num_accelerators: 16
  hosts:  # loopback addresses: the Plan tab's glance at them stays on this machine
    - 127.0.0.2
    - 127.0.0.3
environment:
  dependencies:
    - transformers>=4.45
parameters:
  model_name: meta-llama/Llama-3.2-1B
  dataset_name: tatsu-lab/alpaca
  output_dir: checkpoints
  max_steps: 200

  fsdp:
    sharding: full_shard
  checkpoint:
    every_steps: 100
env_variables:
"""
    lines = head.splitlines()
    lines += [f"  BENCH_VARIABLE_{i}: value-{i}  # a comment that makes the line as long as real ones"
              for i in range(300 - len(lines))]
    return "\n".join(lines) + "\n"


async def measure(seconds: float, bare: bool = False) -> None:
    """Type in the editor (or, ``bare``, in a plain Textual code-editor ``TextArea`` holding the same
    text: what Textual itself costs per key on this machine, with no completion and no validation)."""
    from textual.app import App, ComposeResult
    from textual.widgets import TextArea

    from tui.app import FsdpTuiApp
    from tui.screens.editor import EditorScreen

    class Bare(App):
        def compose(self) -> ComposeResult:
            yield TextArea.code_editor(text, language="yaml")

    text = workload_300_lines()
    assert len(text.splitlines()) == 300
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "w.yaml"
        path.write_text(text)
        app = Bare() if bare else FsdpTuiApp(Path(tmp) / "home", workload=path)
        async with app.run_test(size=(160, 48)) as pilot:
            if bare:
                await pilot.pause(0.5)
                shown = lambda: 0  # noqa: E731
            else:
                while not (isinstance(app.screen, EditorScreen) and app.screen.shown_version):
                    await pilot.pause(0.05)
                editor = app.screen
                assert not [p for p in editor.problems if p.is_error], editor.problems
                shown = lambda: editor.validations_shown  # noqa: E731
            area = app.screen.query_one(TextArea)
            area.focus()
            before = shown()
            latencies, cpu_ms, wall = await _type(app, area, text.splitlines().index(""), seconds)
            validations = shown() - before
    what = "bare TextArea" if bare else "editor"
    print(f"{what}, 300-line workload, {wall:.0f} s of typing: {len(latencies)} keys, "
          f"{validations} validations shown")
    print(f"key-to-screen latency: {_spread(latencies)} (floor: p95 < 50 ms)")
    print(f"process CPU from key to frame (both threads; what waiting for a loaded core adds is not in it): "
          f"{_spread(cpu_ms)}")


async def _type(app, area, row: int, seconds: float) -> tuple[list[float], list[float], float]:
    from textual import events

    area.cursor_location = (row, 0)
    screen = app.screen
    # Each frame is stamped with how many edits the buffer had when it was drawn, so that a key's latency
    # ends at the first frame that shows its edit (a frame drawn before the poll below notices the change
    # still counts: comparing clock times would wait for the next, unrelated frame).
    edits = [0]
    frames: list[tuple[float, int]] = []
    original_edit, original_refresh = area.edit, screen._compositor_refresh

    def edit_and_count(*args, **kwargs):
        result = original_edit(*args, **kwargs)
        edits[0] += 1
        return result

    def render_and_stamp() -> None:
        original_refresh()
        frames.append((time.perf_counter(), edits[0]))

    area.edit = edit_and_count
    screen._compositor_refresh = render_and_stamp
    latencies: list[float] = []
    cpu_ms: list[float] = []
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        keys = [(c, c if c != " " else "space") for c in WORD] + [("", "backspace")] * len(WORD)
        for char, key in keys:
            edits_before = edits[0]
            cpu0 = time.process_time()
            start = time.perf_counter()
            app.post_message(events.Key(key, char or None))
            while not frames or frames[-1][1] <= edits_before:
                await asyncio.sleep(0.0005)
            shown = next(stamp for stamp, count in frames if count > edits_before)
            latencies.append((shown - start) * 1000)
            cpu_ms.append((time.process_time() - cpu0) * 1000)
            await asyncio.sleep(0.07)
            if key == "7" or (key == "backspace" and area.document.get_line(row) == ""):
                await asyncio.sleep(0.35)  # the debounce passes: validation runs under the next keys
    return latencies, cpu_ms, time.perf_counter() - t0


def _spread(values: list[float]) -> str:
    values = sorted(values)
    return (f"p50 {statistics.median(values):.1f} ms, p95 {values[int(len(values) * 0.95) - 1]:.1f} ms, "
            f"max {values[-1]:.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--bare", action="store_true", help="a plain TextArea instead: Textual's own cost")
    args = parser.parse_args()
    asyncio.run(measure(args.seconds, args.bare))


if __name__ == "__main__":
    main()
