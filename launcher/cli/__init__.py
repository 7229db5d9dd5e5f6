"""The headless command line: ``fsdp-tui validate | schema | run | runs | show | logs | cancel | ckpt |
doctor | secrets | trust``. One module per command, each with ``register(subparsers)`` and
``run(args) -> int``; modules keep imports light at the top (``fsdp-tui --help`` imports all of them)."""


def find_run(command: str, prefix: str):
    """The data dir's store and the run id that ``prefix`` names, or ``None`` after saying why on stderr."""
    import sys

    from launcher.paths import data_home
    from launcher.runs.core.store import RunStore

    store = RunStore(data_home())
    try:
        return store, store.find(prefix)
    except LookupError as err:
        print(f"fsdp-tui {command}: {err}", file=sys.stderr)
        return None


def keep_colour() -> bool:
    """Job output keeps its SGR colours on a terminal, unless ``NO_COLOR`` is set (no-color.org); every other
    control sequence is always removed (:mod:`launcher.runs.core.display`)."""
    import os
    import sys

    return sys.stdout.isatty() and not os.environ.get("NO_COLOR")
