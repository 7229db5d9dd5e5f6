"""A thread worker's result shown on its screen, on the app's loop. A load that ends after its screen
closed, or while the app quits and takes its screens apart (a slow load on a busy machine), finds no
widget to show its result in: that result is dropped, and the app ends without an error."""

from __future__ import annotations

from collections.abc import Callable

from textual.css.query import NoMatches
from textual.screen import Screen


def show_from_worker(screen: Screen, show: Callable[..., None], *args: object) -> None:
    """``show(*args)`` on the app's loop, from a thread worker of ``screen``."""

    def shown() -> None:
        try:
            show(*args)
        except NoMatches:
            if screen.app.is_running and screen.is_attached:
                raise  # the screen is there and lacks the widget: a bug, said as one

    screen.app.call_from_thread(shown)
