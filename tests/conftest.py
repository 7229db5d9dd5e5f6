"""Running side by side (pytest-xdist, ``.ci/run``'s ``-n 2 --dist loadgroup``).

Tests are handed out one by one to whichever worker is free, except those that share something costly
or machine-wide, which stay together on one worker:

- a test that uses a module-scoped fixture (a trained model, a SLURM cluster per module) joins its
  module's group, so the fixture is built once, not once per worker (automatic, below);
- a test that needs a machine-wide resource nobody else may touch meanwhile names it:
  ``@pytest.mark.xdist_group("name")``; every test in that group runs on the same worker, one after
  the other.

Everything else is isolated by the fixtures: ``tmp_path`` homes, free ports, network namespaces and
bridges claimed by name (``tests/support/switches.py``), run ids in every process's environment.
"""

from __future__ import annotations

import os

# One thread per process: two or three workers share two cores, and every trainer, torchrun and CLI the
# tests start inherits this (torch's default, a thread per core in each of them, spends much of the CPU
# waiting on the others; set before anything imports torch).
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402

from tests.support.cli import home, hosts, ns_hosts, slurm, slurm_module  # noqa: F401  (fixtures for every room)
from tests.support.reruns import pytest_runtest_logreport, pytest_terminal_summary  # noqa: F401  (a rerun's first failure)
from tests.support.s3_server import s3_server  # noqa: F401  (a fixture of two rooms: runs/owner, trainer/data)

SHARED_SCOPES = ("module", "package", "class")


@pytest.fixture(scope="session", autouse=True)
def data_cache(tmp_path_factory):
    """Tokenized data goes to a cache of the test session's own (a node's cache is ``~/.cache``), shared
    by the trainer processes the tests start (they inherit the environment) and by every xdist worker of
    the session (the cache takes a key's lock to build it: one worker tokenizes a dataset, the others wait
    and read it). A test of the cache itself points ``data.cache_dir`` at a folder of its own."""
    import os

    from trainer.data.token_cache import CACHE_ENV

    if CACHE_ENV in os.environ:
        yield os.environ[CACHE_ENV]
        return
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # the workers' common folder
    (shared / "data-cache").mkdir(exist_ok=True)
    os.environ[CACHE_ENV] = str(shared / "data-cache")
    yield os.environ[CACHE_ENV]
    del os.environ[CACHE_ENV]


def pytest_configure(config):
    """A suite started in the background of a script (``bash .ci/run &``) inherits SIGINT ignored, and so
    would every process a test starts: the tests that press Ctrl-C on a command need a terminal's Ctrl-C."""
    import signal

    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue
        info = getattr(item, "_fixtureinfo", None)
        if info is None:
            continue
        for name in info.names_closure:
            defs = info.name2fixturedefs.get(name) or ()
            if any(d.scope in SHARED_SCOPES for d in defs):
                item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))
                break


@pytest.hookimpl(wrapper=True)
def pytest_collection(session):
    """No cyclic garbage collection while the test modules are imported (torch, transformers, textual: the
    objects they allocate set off collections that find almost nothing; a worker's collection takes half
    the CPU without them). What the imports made lives as long as the worker: frozen afterwards, so that the
    collections the tests set off (a Textual app under Pilot allocates a lot) skip it."""
    from trainer.wire.startup import imports_without_gc

    with imports_without_gc():
        return (yield)
