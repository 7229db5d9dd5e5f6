"""The key footer, fitted to the terminal's width."""

from __future__ import annotations

from textual import events
from textual.widgets import Footer

COMPACT_BELOW = 120
"""Columns under which keys lose the padding around them."""
PALETTE_KEY_BELOW = 100
"""Columns under which the command palette's key (ctrl+p, also in Textual's own help) leaves the footer."""


class FitFooter(Footer):
    """A ``Footer`` that stays readable at 80 columns: compact, and without the palette key, when narrow."""

    def on_resize(self, event: events.Resize) -> None:
        compact, palette = event.size.width < COMPACT_BELOW, event.size.width >= PALETTE_KEY_BELOW
        if (compact, palette) != (self.compact, self.show_command_palette):
            self.compact, self.show_command_palette = compact, palette
            self.refresh(recompose=True)
