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

    def bindings_changed(self, screen) -> None:
        """Recompose only when what the footer would show has changed. Focus moving between two log panes
        (``m`` in the monitor) changes nothing here, and a recompose restyles every key: on a busy monitor
        that was most of a key press's time."""
        if screen.app.app_focus and self.is_attached and screen is self.screen:
            shown = tuple((key, b.action, b.description, b.show, enabled, tooltip)
                          for key, (_node, b, enabled, tooltip) in screen.active_bindings.items())
            if self._bindings_ready and shown == getattr(self, "_shown", None):
                return
            self._shown = shown
        super().bindings_changed(screen)

    def on_resize(self, event: events.Resize) -> None:
        compact, palette = event.size.width < COMPACT_BELOW, event.size.width >= PALETTE_KEY_BELOW
        if (compact, palette) != (self.compact, self.show_command_palette):
            self.compact, self.show_command_palette = compact, palette
            self.refresh(recompose=True)
