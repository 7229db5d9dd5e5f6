"""Completion in the workload's text: a menu floating under the cursor, driven by the keyboard.

textual-autocomplete completes ``Input`` widgets only, so the menu for a ``TextArea`` is this small
``OptionList`` overlay. While it is open, up/down move, tab or enter accept, escape closes; every other
key goes to the text as usual.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.geometry import Offset
from textual.message import Message
from textual.widgets import OptionList, TextArea
from textual.widgets.option_list import Option

from launcher.workload.complete import Completions

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


class WorkloadArea(TextArea):
    """The YAML editor: keys go to the completion menu while it is open."""

    BINDINGS = [Binding("ctrl+space", "complete", "complete", show=False)]

    @dataclass
    class CompletionWanted(Message):
        """Completion was asked for (``explicit``) or the user typed a character."""

        area: WorkloadArea
        explicit: bool

    @dataclass
    class MenuKey(Message):
        key: str

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.menu_open = False

    async def _on_key(self, event: events.Key) -> None:
        if self.menu_open and event.key in MENU_KEYS:
            event.stop()
            event.prevent_default()
            self.post_message(self.MenuKey(event.key))
            return
        await super()._on_key(event)
        if event.is_printable or event.key == "backspace":
            self.post_message(self.CompletionWanted(self, explicit=False))

    def _on_blur(self, event: events.Blur) -> None:
        if self.menu_open:
            self.post_message(self.MenuKey("escape"))  # the menu follows the text's focus
        super()._on_blur(event)

    def action_complete(self) -> None:
        self.post_message(self.CompletionWanted(self, explicit=True))
