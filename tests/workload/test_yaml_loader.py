"""YAML reading: positions, duplicates, hostile input: a problem, never an exception or a hang."""


import pytest

from launcher.workload.validate import validate_text
from launcher.workload.yaml_loader import MAX_BYTES, load_yaml


def test_marks_point_at_keys_and_values():
    loaded = load_yaml("a:\n  b: 1\n  c:\n    - x\n    - y\n", "f.yaml")
    assert loaded.key_marks[("a", "c")] == (3, 3)
    assert loaded.value_marks[("a", "c", 1)] == (5, 7)
    assert loaded.mark(("a", "c", 7)) == (4, 5)  # nearest located parent: the list


def test_keys_keep_their_text():
    loaded = load_yaml("on: 1\n1: x\nnull: y\n", "f.yaml")
    assert set(loaded.data) == {"on", "1", "null"}


def test_duplicate_key_names_both_lines():
    loaded = load_yaml("a: 1\nb: 2\na: 3\n", "f.yaml")
    [p] = loaded.problems
    assert (p.line, p.path) == (3, "a") and "line 1" in p.message
    assert loaded.data["a"] == 1


def test_merge_keys_merge_and_explicit_keys_win():
    loaded = load_yaml("base: &b {x: 1, y: 2}\nd:\n  <<: *b\n  y: 3\n", "f.yaml")
    assert loaded.problems == [] and loaded.data["d"] == {"x": 1, "y": 3}


def test_unclosed_quote_points_where_it_opened():
    loaded = load_yaml("a: 1\nb: 'never closed\nc: 2\nd: 3\n", "f.yaml")
    [p] = loaded.problems
    assert (p.line, p.column) == (2, 4) and p.hint == "close the quote"


def test_huge_file_is_refused_quickly():
    text = "a: " + "x" * (MAX_BYTES + 10) + "\n"
    result = validate_text(text, "big.yaml")
    assert "limited to" in result.problems[0].message


@pytest.mark.parametrize("text", ["[" * 5000 + "]" * 5000, "a:\n" + "".join(f"{' ' * i}- \n" for i in range(1, 3000))])
def test_deep_nesting_is_a_problem(text):
    result = validate_text(text, "deep.yaml")
    assert not result.ok and result.problems


def test_billion_laughs_is_stopped():
    rows = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    rows += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    result = validate_text("\n".join(rows) + "\n", "bomb.yaml")
    assert any("alias bomb" in p.message for p in result.problems)


def test_multiple_documents_are_a_problem():
    result = validate_text("experiment_name: a\n---\nexperiment_name: b\n", "two.yaml")
    assert not result.ok and result.problems[0].line == 2
