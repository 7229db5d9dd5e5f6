"""The frame a key causes, drawn as soon as what the key changed is changed.

Textual draws a changed screen at the next tick of the screen's update timer (``TEXTUAL_FPS`` a second), which
it resumes only once the screen's messages are handled: a key's frame waited up to a tick (8 ms at 120 a second)
after its action had run, and longer when a tick had just drawn new lines. :func:`draw_soon` asks the screen to
draw from its own message queue right away (the same drawing the tick does: layout if needed, then the changed
regions); a tick that comes after finds nothing left to draw.
"""

from __future__ import annotations

from textual.screen import Screen


def draw_soon(screen: Screen) -> None:
    """Draw ``screen``'s changes next, from its own message queue, instead of at its next update tick."""
    screen.call_later(_draw, screen)


def _draw(screen: Screen) -> None:
    if screen.is_current and screen.is_attached:
        screen._on_timer_update()  # what the update timer calls: a no-op when nothing changed
