"""A test that failed once and passed on its rerun (``.ci/run``'s ``--reruns 1``) keeps its first failure.

pytest-rerunfailures reports such a test by name only (``-rR``); its failure, the one that tells the cause,
is printed here at the end of the run: the traceback and the tail of what the test printed. Under xdist
the workers' reports reach the controller, which prints them.
"""

from __future__ import annotations

import pytest

KEEP_CHARS = 8000  # of the traceback, and of each captured section: the end, where the cause is

_first_failures: list[pytest.TestReport] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.outcome == "rerun":
        _first_failures.append(report)


def pytest_terminal_summary(terminalreporter) -> None:
    for report in _first_failures:
        terminalreporter.write_sep("=", f"first failure of {report.nodeid} ({report.when}), passed on its rerun")
        terminalreporter.write_line(_tail(str(report.longrepr)))
        for title, text in report.sections:
            if text.strip():
                terminalreporter.write_sep("-", title)
                terminalreporter.write_line(_tail(text))


def _tail(text: str) -> str:
    return text if len(text) <= KEEP_CHARS else f"[... {len(text) - KEEP_CHARS} characters before]\n" + text[-KEEP_CHARS:]
