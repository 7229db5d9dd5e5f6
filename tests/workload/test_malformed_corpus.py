"""Every malformed workload in tests/data/malformed yields its expected problems at the right lines.

Each ``NAME.expected`` line is ``LINE PATH SEVERITY FRAGMENT`` (PATH ``-`` for no key): a problem must
exist at that line, with that dotted path and severity, whose message or hint contains FRAGMENT.
No other error may appear.
"""

from pathlib import Path

import pytest

from launcher.workload.validate import validate_file

CORPUS = Path(__file__).parent.parent / "data" / "malformed"
CASES = sorted(p.stem for p in CORPUS.glob("*.yaml"))


def _expected(name: str) -> list[tuple[int, str, str, str]]:
    rows = []
    for line in (CORPUS / f"{name}.expected").read_text().splitlines():
        lineno, path, severity, fragment = line.split(" ", 3)
        rows.append((int(lineno), "" if path == "-" else path, severity, fragment))
    return rows


def test_corpus_is_large_enough():
    assert len(CASES) >= 30


@pytest.mark.parametrize("name", CASES)
def test_malformed_file_reports_expected_problems(name):
    result = validate_file(CORPUS / f"{name}.yaml")
    expected = _expected(name)
    for lineno, path, severity, fragment in expected:
        matches = [p for p in result.problems
                   if p.line == lineno and p.path == path and p.severity == severity
                   and fragment in f"{p.message} ({p.hint})"]
        assert matches, f"expected {lineno} {path} {severity} '{fragment}', got:\n" + "\n".join(
            p.format() for p in result.problems)
    expected_errors = {(lineno, path) for lineno, path, severity, _ in expected if severity == "error"}
    extra = [p for p in result.errors if (p.line, p.path) not in expected_errors]
    assert not extra, "unexpected errors:\n" + "\n".join(p.format() for p in extra)
    assert (result.workload is None) == any(sev == "error" for _, _, sev, _ in expected)
    for p in result.problems:
        assert p.file.endswith(f"{name}.yaml") and p.line >= 1 and p.column >= 1
