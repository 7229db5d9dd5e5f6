"""A worker's result drawn on its screen (a handler of one of :mod:`tui.messages`' results). A load that ends
while its screen is being taken apart (the screen closed, or the app quits, on a busy machine) can reach
the handler after the screen's widgets are gone: that result is dropped, and the app ends without an
error. A live screen that lacks the widget is a bug, and is said as one."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from textual.css.query import NoMatches
from textual.screen import Screen


@contextmanager
def unless_taken_apart(screen: Screen) -> Iterator[None]:
    """Draw inside this: a missing widget ends the drawing quietly once ``screen`` is being taken apart."""
    try:
        yield
    except NoMatches:
        if screen.app.is_running and screen.is_attached:
            raise
