"""The display sanitizer: job output reaches a terminal as text, never as control."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from launcher.runs.core.display import MAX_LINE_CHARS, sanitize_line
from launcher.runs.core.streams import MAX_PENDING_BYTES, LineSplitter
from tests.support.hostile import CORPUS, hostile_log, reached_terminal_safely


@pytest.mark.parametrize("name, seq", CORPUS, ids=[name for name, _ in CORPUS])
def test_every_hostile_sequence_is_removed_and_the_text_around_it_kept(name, seq):
    line = ("start " + seq.decode("utf-8", "replace") + "ok end")
    shown = sanitize_line(line)
    assert reached_terminal_safely(shown)
    assert shown.startswith("start ")
    assert "PWNED" not in shown and "UFdORUQ" not in shown
    if name != "unterminated osc":
        assert shown.endswith("ok end")


@pytest.mark.parametrize("line, plain, coloured", [
    ("progress 10%\rprogress 20%\rprogress 30%", "progress 30%", "progress 30%"),
    ("done\r", "done", "done"),
    ("abc\r\r", "abc", "abc"),
    ("\x1b[31mred\x1b[0m plain", "red plain", "\x1b[31mred\x1b[0m plain\x1b[0m"),
    ("\x1b[1;38;5;208mbold\x1b[m", "bold", "\x1b[1;38;5;208mbold\x1b[m\x1b[0m"),
    ("\x1b[?25mhidden", "hidden", "hidden"),
    ("tab\there", "tab\there", "tab\there"),
    ("über ✓", "über ✓", "über ✓"),
    ("a\x1b[1\x18b", "ab", "ab"),
])
def test_redraws_keep_the_last_segment_and_colours_follow_the_setting(line, plain, coloured):
    assert sanitize_line(line) == plain
    assert sanitize_line(line, keep_colour=True) == coloured


def test_a_huge_line_is_cut_for_display_and_says_so():
    shown = sanitize_line("x" * 10_000_000)
    assert len(shown) < MAX_LINE_CHARS + 100
    assert "more characters in the node log" in shown


def test_the_splitter_bounds_a_line_that_never_ends():
    s = LineSplitter()
    out = []
    for _ in range(12):
        out += s.feed(b"y" * (1 << 20))
    out += s.feed(b"tail\nnext\n")
    assert len(out) == 2 and out[1] == "next"
    assert out[0].endswith(f"({12 * (1 << 20) + 4 - MAX_LINE_CHARS:,} more characters in the node log)")  # the line
    assert len(s.rest) <= MAX_PENDING_BYTES and s.long_head is None
    s.feed(b"z" * (2 << 20) + b"\xc3\xa9" * 10)
    assert s.flush()[0].endswith(f"({(2 << 20) + 10 - MAX_LINE_CHARS:,} more characters in the node log)")


def test_the_splitter_keeps_only_the_last_redraw_of_an_endless_progress_bar():
    s = LineSplitter()
    for i in range(200_000):
        s.feed(f"\rstep {i:>7}".encode())
    assert len(s.rest) < 100
    assert s.feed(b"\n") == ["step  199999"]


def test_the_whole_hostile_log_through_the_splitter():
    lines = LineSplitter().feed(hostile_log())
    assert all(reached_terminal_safely(line) for line in lines)
    assert "progress 30%" in lines and "bad utf8 \ufffd\ufffd\ufffd here" in lines


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("\x1b[]P_^X\\;0129mAc\x07\x9b\x9c\x9d\r\t\x00\x08abc")),
               max_size=60), st.booleans())
def test_nothing_but_text_and_sgr_gets_through(line, keep_colour):
    assert reached_terminal_safely(sanitize_line(line, keep_colour), keep_colour)


def test_a_triage_excerpt_is_shown_output_too():
    from launcher.runs.core.triage import triage_run

    report = triage_run({0: "RuntimeError: boom \x1b]2;PWNED\x1b\\\x1b[2J done\n"}, {0: 1})
    assert report.signature == "python_error"
    assert report.excerpt == "RuntimeError: boom  done" and reached_terminal_safely(report.summary)


def test_a_batch_of_lines_shows_exactly_as_line_by_line():
    """The batch fast path (one decode, one check) gives what sanitizing each line gives."""
    from launcher.runs.core.display import MAX_LINE_CHARS, sanitize_line, show_lines

    batches = [
        [b"plain", b"", b"caf\xc3\xa9 ok"],
        [b"cut \xe2\x82", b"\xac after"],  # a UTF-8 sequence broken by the line end
        [b"a" * (MAX_LINE_CHARS + 5), b"short"],
        [b"title \x1b]2;PWNED\x1b\\ here", b"tab\there", b"bar 10%\r20%"],
        [b"\xff\xfe invalid", b"c1 \xc2\x9b31m"],
    ]
    for raw in batches:
        expected = [sanitize_line(line.decode("utf-8", "replace")) for line in raw]
        assert show_lines(raw) == expected, raw
