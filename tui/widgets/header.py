"""Textual's ``Header``, whose title survives the screen being taken apart.

Textual's own header updates its title from a watcher that catches ``NoScreen`` only: a title or
sub-title set as the screen closes (a worker's line arriving as the user quits) then finds the header's
children gone and ends the app with ``NoMatches``. This one drops such an update."""

from __future__ import annotations

from textual.css.query import NoMatches
from textual.events import Mount
from textual.widgets import Header as TextualHeader


class Header(TextualHeader):
    def _on_mount(self, event: Mount) -> None:
        from textual.dom import NoScreen
        from textual.widgets._header import HeaderTitle

        event.prevent_default()  # Textual's own handler would watch the titles too

        async def set_title() -> None:
            try:
                self.query_one(HeaderTitle).update(self.format_title())
            except (NoScreen, NoMatches):
                pass  # the screen is being taken apart: nothing left to title

        self.watch(self.app, "title", set_title)
        self.watch(self.app, "sub_title", set_title)
        self.watch(self.screen, "title", set_title)
        self.watch(self.screen, "sub_title", set_title)
