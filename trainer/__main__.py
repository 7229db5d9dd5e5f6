"""``torchrun ... -m trainer [PARAMS.yaml]``: supervised fine-tuning with FSDP2. Only orchestrates."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from pathlib import Path

from trainer.wire.startup import exit_without_teardown, imports_without_gc

PROGRESS_BARS = ("TQDM_DISABLE", "HF_HUB_DISABLE_PROGRESS_BARS", "HF_DATASETS_DISABLE_PROGRESS_BARS")


def load_config(argv: list[str]):
    """The parameters file (argument, else ``HYPERPARAMETERS_PATH``) as a validated config."""
    import yaml
    from pydantic import ValidationError

    from trainer.wire.config import TrainerConfig

    path = argv[0] if argv else os.environ.get("HYPERPARAMETERS_PATH")
    if not path:
        raise SystemExit("usage: torchrun ... -m trainer PARAMS.yaml (or set HYPERPARAMETERS_PATH)")
    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
        cfg = TrainerConfig.model_validate(data)
    except OSError as err:
        raise SystemExit(f"{path}: cannot read the parameters file: {err.strerror}") from None
    except yaml.YAMLError as err:
        raise SystemExit(f"{path}: not valid YAML: {err}") from None
    except ValidationError as err:
        lines = [f"{path}: parameters.{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors()]
        raise SystemExit("\n".join(lines)) from None
    # $FSDP_TUI_RUN_ID and ~ in paths: one output folder per run, shared by its retries.
    resume = cfg.checkpoint.resume
    ckpt = cfg.checkpoint.model_copy(update={"staging_dir": _expand(cfg.checkpoint.staging_dir),
                                             "resume": resume if resume in ("auto", "never") else _expand(resume)})
    return cfg.model_copy(update={"output_dir": _expand(cfg.output_dir), "checkpoint": ckpt})


def _expand(path: str | None) -> str | None:
    """``$NAME`` and ``~`` as the job sees them; ``file://`` is a path, another URL stays one."""
    from trainer.wire.ckpt_paths import expand_path

    return expand_path(path, dict(os.environ)) if path else path


def run(cfg, stop=None) -> None:
    """Train: the parts come from the rooms (assembled in :mod:`trainer.job`, owned by its ``Run``); this
    is their order. ``stop`` (a :class:`trainer.loop.stop_signal.StopSignal`) ends the run early with a
    checkpoint."""
    for name in PROGRESS_BARS:  # noise in node logs: off before tqdm and huggingface_hub read them at import
        os.environ.setdefault(name, "1")
    with imports_without_gc():
        from trainer import job

        choices = job.choose(cfg)
    d = job.start(cfg)
    parts = job.assemble(cfg, choices, d)
    if parts.resume():  # a finished run started again: its checkpoint and export are there
        parts.checkpoints.close()
        job.end()
        return
    log = parts.start_logging()
    steps = parts.steps(log)
    from trainer.loop.nonfinite import NonFiniteLoss

    try:
        stopped = steps.run(stop)
        steps.finish(stopped, stop)
    except NonFiniteLoss as err:  # found alike on every rank, at the same step
        parts.checkpoints.close()  # the saves before it, complete (each was checked before it began)
        log.close()
        raise SystemExit(str(err)) from None
    if not stopped:
        parts.export()
    log.close()
    job.end()


def main(argv: list[str] | None = None) -> int:
    import faulthandler
    import signal

    # Every thread's stack to the node's log on SIGUSR2: the launcher's stack dump where py-spy is missing.
    faulthandler.register(signal.SIGUSR2, all_threads=True)
    from trainer.loop import stop_signal

    stop = stop_signal.install()  # before anything slow: a signal during start-up waits for the first step
    with imports_without_gc():
        cfg = load_config(list(sys.argv[1:] if argv is None else argv))
    from trainer.wire.config import SettingError  # imported by load_config

    try:
        run(cfg, stop)
    except SettingError as err:  # found alike on every rank (one at the first forward pass)
        raise SystemExit(str(err)) from None
    return 0


@contextlib.contextmanager
def refusal_written():
    """A refusal (``SystemExit`` with a message) written to stderr in one write and turned into exit code 1:
    the interpreter writes the message and its newline apart, and unbuffered, as a node runs the trainer,
    two ranks' lines would run together."""
    try:
        yield
    except SystemExit as exit_:
        if not isinstance(exit_.code, str):
            raise
        sys.stderr.write(exit_.code + "\n")
        raise SystemExit(1) from None


def entry(argv: list[str] | None = None) -> None:
    """``python -m trainer``: :func:`main`, its refusal written whole, then the process ended, a refusal's
    too, without the interpreter's teardown."""
    exit_without_teardown(ended(lambda: main(argv)))


def ended(call: Callable[[], int | None]) -> int:
    """``call``'s exit code as ``python -m trainer`` ends with it: 0 (or what it returns) when it returns, a
    refusal's message written whole to stderr and 1, another ``SystemExit``'s own code."""
    try:
        with refusal_written():
            return call() or 0
    except SystemExit as exit_:
        return exit_code(exit_)


def exit_code(exit_: SystemExit) -> int:
    """The code the interpreter would end with for ``exit_``: none is 0, a message 1."""
    return 0 if exit_.code is None else exit_.code if isinstance(exit_.code, int) else 1


if __name__ == "__main__":
    entry()
