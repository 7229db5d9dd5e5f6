"""The trainer's entry point: start-up without cyclic GC, and an exit that skips the interpreter's
teardown but still runs every atexit handler and flushes output."""

import gc
import subprocess
import sys
import textwrap
import weakref
from pathlib import Path

from trainer.wire.startup import imports_without_gc

ROOT = Path(__file__).resolve().parents[2]


def test_gc_is_back_on_after_start_up_even_on_error():
    assert gc.isenabled()
    with imports_without_gc():
        assert not gc.isenabled()
    assert gc.isenabled()
    try:
        with imports_without_gc():
            raise SystemExit("bad parameters")
    except SystemExit:
        pass
    assert gc.isenabled()
    gc.disable()
    try:
        with imports_without_gc():
            pass
        assert not gc.isenabled()  # left as the caller had it
    finally:
        gc.enable()


def test_without_freeze_what_was_made_inside_can_still_be_collected():
    class Cycle:
        pass

    frozen = gc.get_freeze_count()
    with imports_without_gc(freeze=False):
        loop = Cycle()
        loop.me = loop
    assert gc.get_freeze_count() <= frozen and gc.isenabled()  # nothing frozen (frozen objects may die)
    gone = weakref.ref(loop)
    del loop
    gc.collect()
    assert gone() is None  # the cycle made inside, found and freed


def _exit_script(tmp_path: Path, body: str) -> subprocess.CompletedProcess:
    script = tmp_path / "entry.py"
    script.write_text(textwrap.dedent(f"""
        import atexit, sys, threading, time
        from pathlib import Path
        from trainer.wire.startup import exit_without_teardown
        out = Path({str(tmp_path)!r})
        atexit.register(lambda: (out / "atexit").write_text("ran"))
        sys.stdout.write("buffered, no newline")
        {body}
        exit_without_teardown(3)
    """))
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60, cwd=ROOT,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


def test_exit_runs_atexit_handlers_and_flushes(tmp_path):
    done = _exit_script(tmp_path, "")
    assert done.returncode == 3
    assert done.stdout == "buffered, no newline"
    assert (tmp_path / "atexit").read_text() == "ran"


def test_exit_waits_for_a_running_non_daemon_thread(tmp_path):
    body = "threading.Thread(target=lambda: (time.sleep(0.5), (out / 'thread').write_text('done'))).start()"
    done = _exit_script(tmp_path, body)
    assert done.returncode == 3
    assert (tmp_path / "thread").read_text() == "done"
    assert (tmp_path / "atexit").read_text() == "ran"


def test_a_refusal_ends_with_its_message_and_code_1_without_the_teardown(tmp_path):
    """``python -m trainer`` refused: its message in one line, code 1, atexit handlers run, and the
    interpreter's teardown skipped as after a run (there gloo's threads can abort a rank)."""
    script = tmp_path / "refused.py"
    script.write_text(textwrap.dedent(f"""
        import atexit
        from pathlib import Path
        import trainer.__main__ as entry_point
        out = Path({str(tmp_path)!r})

        class TornDown:
            def __del__(self):
                (out / "torn-down").write_text("yes")

        kept = TornDown()  # freed only in the interpreter's teardown
        atexit.register(lambda: (out / "atexit").write_text("ran"))

        def refuse(argv):
            raise SystemExit("params.yaml: parameters.max_steps: must be positive")

        entry_point.main = refuse
        entry_point.entry([])
    """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60, cwd=ROOT,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 1, done.stderr
    assert done.stderr == "params.yaml: parameters.max_steps: must be positive\n"
    assert (tmp_path / "atexit").read_text() == "ran"
    assert not (tmp_path / "torn-down").exists()
