"""Completion in the workload's text: a menu floating under the cursor, driven by the keyboard.

textual-autocomplete completes ``Input`` widgets only, so the menu for a ``TextArea`` is this small
``OptionList`` overlay. While it is open, up/down move, tab or enter accept, escape closes; every other
key goes to the text as usual.
"""

from __future__ import annotations

from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.geometry import Offset
from textual.widgets import OptionList, TextArea
from textual.widgets.option_list import Option

from launcher.workload.complete import Completions, Sources, complete
from tui.widgets.kept_lines import KeptLinesTextArea

MENU_KEYS = frozenset({"up", "down", "tab", "enter", "escape", "pageup", "pagedown"})


class CompletionMenu(OptionList):
    DEFAULT_CSS = """
    CompletionMenu {
        overlay: screen;
        constrain: inside inflect;
        display: none;
        width: auto;
        max-width: 70;
        min-width: 20;
        height: auto;
        max-height: 10;
        border: none;
        padding: 0;
        background: $surface;
    }
    CompletionMenu:focus { border: none; }
    CompletionMenu.-open { display: block; }
    """
    can_focus = False

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.completions: Completions | None = None

    @property
    def is_open(self) -> bool:
        return self.has_class("-open")

    def open(self, completions: Completions, at: Offset) -> None:
        if self.is_open and self.completions == completions:
            return  # the same list: no new layout while typing
        self.completions = completions
        self.clear_options()
        self.add_options(Option(_label(item.label, item.help)) for item in completions.items)
        self.highlighted = 0
        self.absolute_offset = at
        self.add_class("-open")

    def close(self) -> None:
        self.completions = None
        self.remove_class("-open")


def _label(label: str, help: str) -> Text:
    text = Text(label, "bold")
    if help:
        text.append(f"  {help[:50]}", "dim")
    return text


class WorkloadArea(KeptLinesTextArea):
    """The YAML editor, completing as it is typed into; keys go to the menu while it is open."""

    BINDINGS = [
        Binding("ctrl+space", "complete", "complete", show=False),
        Binding("ctrl+@", "complete", "complete", show=False),  # what tmux and many terminals send for ctrl+space
        # Document start and end, as in most editors (Textual's TextArea binds neither).
        Binding("ctrl+home", "document_edge(False, False)", "start", show=False),
        Binding("ctrl+end", "document_edge(True, False)", "end", show=False),
        Binding("ctrl+shift+home", "document_edge(False, True)", "select to start", show=False),
        Binding("ctrl+shift+end", "document_edge(True, True)", "select to end", show=False),
    ]

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.sources = Sources()
        """Host aliases, secret names and folders; the screen fills them in once read."""
        self._completion_due = False

    @property
    def menu(self) -> CompletionMenu:
        return self.screen.query_one(CompletionMenu)

    async def _on_key(self, event: events.Key) -> None:
        if event.key in MENU_KEYS and self.menu.is_open:
            event.stop()
            event.prevent_default()
            self._menu_key(event.key)
            return
        if event.key == "escape":
            event.prevent_default()
            return  # not TextArea's "focus the next widget": the screen's escape leaves (or asks first)
        await super()._on_key(event)
        if (event.is_printable or event.key == "backspace") and not self._completion_due:
            # The typed character is drawn first; the menu follows in the next frame, once for a burst
            # of keys (a new list re-lays out the screen, which would hold the character back).
            self._completion_due = True
            self.call_after_refresh(self._complete_while_typing)

    def _complete_while_typing(self) -> None:
        self._completion_due = False
        if self.is_mounted and self.has_focus:
            self.complete_at_cursor(explicit=False)

    def action_document_edge(self, end: bool, select: bool) -> None:
        """The cursor to the document's first or last character; ``select`` extends the selection there."""
        self.close_menu()
        self.move_cursor(self.document.end if end else self.document.start, select=select)

    def action_complete(self) -> None:
        self.complete_at_cursor(explicit=True)

    def complete_at_cursor(self, *, explicit: bool) -> None:
        """Open (or refresh) the menu for the word before the cursor; typing opens it only inside a word."""
        row, col = self.cursor_location
        found = complete(self.text, row, col, self.sources)
        if found is None or (not explicit and found.start == col):
            self.close_menu()
            if explicit:
                self.notify("nothing to complete here", timeout=2)
            return
        x, y = self.cursor_screen_offset
        self.menu.open(found, Offset(max(0, x - (col - found.start)), y + 1))

    def _menu_key(self, key: str) -> None:
        menu = self.menu
        if key in ("tab", "enter"):
            self.accept_completion()
        elif key == "escape":
            self.close_menu()
        else:
            {"up": menu.action_cursor_up, "down": menu.action_cursor_down,
             "pageup": menu.action_page_up, "pagedown": menu.action_page_down}[key]()

    def accept_completion(self) -> None:
        """Replace the word before the cursor with the highlighted candidate."""
        menu = self.menu
        found = menu.completions
        index = menu.highlighted
        self.close_menu()
        if found is None or index is None:
            return
        row, col = self.cursor_location
        if row == found.row:
            self.replace(found.items[index].insert, (row, found.start), (row, col))

    def close_menu(self) -> None:
        for menu in self.screen.query(CompletionMenu):  # none while the screen is being torn down
            menu.close()

    def on_text_area_selection_changed(self, event: TextArea.SelectionChanged) -> None:
        menus = self.screen.query(CompletionMenu)
        found = menus.first().completions if menus else None
        end = event.selection.end
        if found is not None and (end[0] != found.row or end[1] < found.start):
            self.close_menu()  # the cursor left the word being completed

    def _on_blur(self, event: events.Blur) -> None:
        self.close_menu()  # the menu follows the text's focus
        super()._on_blur(event)
