"""Random and mutated documents never make the validator raise or hang."""

import string
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from launcher.workload.validate import validate_text

SAMPLES = sorted((Path(__file__).resolve().parents[2] / "sample_workloads").rglob("*.yaml"))
SAMPLE_TEXTS = [p.read_text() for p in SAMPLES]
FUZZ = settings(max_examples=150, deadline=2000, suppress_health_check=[HealthCheck.too_slow])

yaml_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True),
                         st.text(max_size=20))
yaml_values = st.recursive(yaml_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(string.ascii_letters + "_", max_size=12), inner,
                                                 max_size=4)), max_leaves=20)
KEYS = ["experiment_name", "compute", "hosts", "parameters", "command", "secrets", "env_variables",
        "fsdp", "sharding", "max_steps", "num_accelerators", "accelerator_type", "ssh", "metrics"]


def _check(text: str) -> None:
    result = validate_text(text, "fuzz.yaml")
    for p in result.problems:
        assert p.line >= 1 and p.column >= 1 and p.severity in ("error", "warning") and p.message
    assert result.ok == (result.workload is not None)


@FUZZ
@given(st.text(alphabet=string.printable + "\u00e9\u4e2d\t", max_size=400))
def test_random_text(text):
    _check(text)


@FUZZ
@given(st.dictionaries(st.sampled_from(KEYS), yaml_values, max_size=6))
def test_random_documents(doc):
    import yaml

    _check(yaml.safe_dump(doc, allow_unicode=True))


@FUZZ
@given(st.sampled_from(SAMPLE_TEXTS), st.data())
def test_mutated_samples(text, data):
    ops = data.draw(st.lists(st.tuples(st.sampled_from(["delete", "insert", "dup_line", "swap"]),
                                       st.integers(0, 10_000), st.sampled_from(list(":-[]{}'\"&*!#\t\n ab1"))),
                             min_size=1, max_size=6))
    for op, pos, char in ops:
        pos = pos % (len(text) + 1)
        if op == "delete":
            text = text[:pos] + text[pos + 1:]
        elif op == "insert":
            text = text[:pos] + char + text[pos:]
        elif op == "dup_line":
            lines = text.splitlines(keepends=True)
            if lines:
                i = pos % len(lines)
                lines.insert(i, lines[i])
                text = "".join(lines)
        else:
            lines = text.splitlines(keepends=True)
            if len(lines) > 1:
                i = pos % (len(lines) - 1)
                lines[i], lines[i + 1] = lines[i + 1], lines[i]
                text = "".join(lines)
    _check(text)
