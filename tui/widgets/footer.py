"""The key footer, fitted to the terminal's width, and quick to follow the focus between views."""

from __future__ import annotations

from textual import events
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer
from textual.widgets._footer import FooterKey

COMPACT_BELOW = 120
"""Columns under which keys lose the padding around them."""
PALETTE_KEY_BELOW = 100
"""Columns under which the command palette's key (ctrl+p, also in Textual's own help) leaves the footer."""


def _shown(screen: Screen) -> list[tuple[tuple, Binding, bool, str]]:
    """(what a key is, its binding, enabled, tooltip) for each key the footer shows, in the footer's order."""
    return [((b.key, b.action, b.description, tooltip), b, enabled, tooltip)
            for _node, b, enabled, tooltip in screen.active_bindings.values() if b.show]


class FitFooter(Footer):
    """A ``Footer`` that stays readable at 80 columns (compact, and without the palette key, when narrow),
    and that keeps the keys of every view it has shown.

    A recompose restyles every key; on a busy monitor that was most of a key press's time when the keys
    changed between the node overview (its own sort keys) and a log. Keys seen before stay composed and
    are shown or hidden instead (their order is the order of the bindings, which does not change); only a
    key never seen, or a new order, composes the footer again."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._known: dict[tuple, tuple] = {}
        """Every key composed so far (what it is -> (binding, tooltip)), in the footer's order."""
        self._keys: dict[tuple, FooterKey] = {}

    def compose(self):
        if not self._bindings_ready:
            return
        shown = _shown(self.screen)
        if any(b.group is not None for _, b, _, _ in shown):  # grouped keys: as Textual composes them
            self._known, self._keys = {}, {}
            yield from super().compose()
            return
        wanted = {what for what, _, _, _ in shown}
        merged, at = list(self._known), -1
        for what, _, _, _ in shown:  # a new key goes after the shown key before it
            if what in merged:
                at = merged.index(what)
            else:
                at += 1
                merged.insert(at, what)
        if [what for what in merged if what in wanted] != [what for what, _, _, _ in shown]:
            merged = [what for what, _, _, _ in shown]  # the keys came in another order: start over
        found = {what: (b, tooltip) for what, b, _, tooltip in shown}
        known = {what: found.get(what) or self._known[what] for what in merged}
        enabled = {what: on for what, _, on, _ in shown}
        self._known, self._keys = known, {}
        for what, (binding, tooltip) in known.items():
            key = FooterKey(binding.key, self.app.get_key_display(binding), binding.description, binding.action,
                            disabled=not enabled.get(what, True), tooltip=tooltip).data_bind(compact=Footer.compact)
            key.display = what in wanted
            self._keys[what] = key
            yield key
        yield from (w for w in super().compose() if w.has_class("-command-palette"))

    def _fits(self, shown: list) -> bool:
        """Every key shown is composed already, in the same order."""
        return all(what in self._known for what, _, _, _ in shown) and [
            what for what in self._known if what in {w for w, _, _, _ in shown}] == [w for w, _, _, _ in shown]

    def bindings_changed(self, screen) -> None:
        """Recompose only when what the footer would show has changed, and then only for a key not yet
        composed: focus moving between two log panes (``m`` in the monitor) changes nothing here, and
        moving between the overview and a log shows or hides the overview's keys."""
        if screen.app.app_focus and self.is_attached and screen is self.screen:
            shown = _shown(screen)
            signature = tuple((what, enabled) for what, _, enabled, _ in shown)
            if self._bindings_ready and signature == getattr(self, "_signature", None):
                return
            self._signature = signature
            if self._bindings_ready and self._keys and self._fits(shown):
                wanted = dict(signature)
                for what, key in self._keys.items():
                    key.display = what in wanted
                    if what in wanted and key._disabled == wanted[what]:  # enabled changed
                        key._disabled = not wanted[what]
                        key.set_class(key._disabled, "-disabled")
                return
        super().bindings_changed(screen)

    def on_resize(self, event: events.Resize) -> None:
        compact, palette = event.size.width < COMPACT_BELOW, event.size.width >= PALETTE_KEY_BELOW
        if (compact, palette) != (self.compact, self.show_command_palette):
            self.compact, self.show_command_palette = compact, palette
            self.refresh(recompose=True)
