"""Starting a workload: pick a template, and (from the home screen) name the file it is written to."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label, OptionList
from textual.widgets.option_list import Option

from launcher.workload.templates import Template

if TYPE_CHECKING:
    from textual.screen import Screen

_MODAL_CSS = """
{name} {{ align: center middle; }}
{name} > Vertical {{
    width: 80%; max-width: 90; height: auto; max-height: 80%;
    border: round $accent; background: $surface; padding: 0 1;
}}
{name} Label {{ width: 100%; padding: 0 0 1 0; }}
{name} OptionList {{ height: auto; max-height: 20; border: none; }}
"""


class TemplateModal(ModalScreen[Template | None]):
    """A short list of starting points; enter picks one, escape starts from nothing."""

    DEFAULT_CSS = _MODAL_CSS.format(name="TemplateModal")
    BINDINGS = [Binding("escape", "dismiss_none", "start empty")]

    def __init__(self, templates: list[Template], intro: str) -> None:
        super().__init__()
        self.templates = templates
        self.intro = intro

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(self.intro)
            yield OptionList(*(Option(_prompt(t), id=t.key) for t in self.templates), id="templates")

    def on_mount(self) -> None:
        self.query_one(OptionList).focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.dismiss(self.templates[event.option_index])

    def action_dismiss_none(self) -> None:
        self.dismiss(None)


def _prompt(t: Template) -> Text:
    return Text.assemble((t.title, "bold"), "\n", (f"  {t.summary}", "dim"))


class FileNameModal(ModalScreen[Path | None]):
    """Asks where a new workload goes (relative to the current folder); refuses an existing file."""

    DEFAULT_CSS = _MODAL_CSS.format(name="FileNameModal")
    BINDINGS = [Binding("escape", "dismiss_none", "cancel")]

    def __init__(self, template: Template, folder: Path) -> None:
        super().__init__()
        self.template = template
        self.folder = folder

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(f"{self.template.title}: save it as (in {self.folder})")
            yield Input(value=suggest_name(self.template, self.folder), id="file-name")
            yield Label("", id="file-error")

    def on_mount(self) -> None:
        self.query_one(Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        name = event.value.strip()
        target = (self.folder / name).resolve() if name else None
        error = ""
        if target is None:
            error = "type a file name, such as my-run.yaml"
        elif target.suffix not in (".yaml", ".yml"):
            error = "the name must end in .yaml"
        elif target.exists():
            error = f"{target.name} exists already: pick another name"
        if error:
            self.query_one("#file-error", Label).update(Text(error, "bold red"))
            return
        self.dismiss(target)

    def action_dismiss_none(self) -> None:
        self.dismiss(None)


def suggest_name(template: Template, folder: Path) -> str:
    """``<template>.yaml``, numbered when taken."""
    stem = template.key.split(":")[-1].rsplit("/", 1)[-1].removesuffix(".yaml")
    name, n = f"{stem}.yaml", 2
    while (folder / name).exists():
        name, n = f"{stem}-{n}.yaml", n + 1
    return name


def new_workload(screen: Screen, folder: Path, written: Callable[[Path], None]) -> None:
    """Pick a template, name its file in ``folder``, write it (a refusal is said in a notification); then
    ``written(target)``."""
    from launcher.workload.templates import templates, write_template

    def named(target: Path | None, template: Template) -> None:
        if target is None:
            return
        try:
            write_template(template, target)
        except OSError as err:
            screen.notify(f"cannot write {target}: {err.strerror or err}", severity="error")
            return
        screen.notify(f"wrote {target}")
        written(target)

    def chosen(template: Template | None) -> None:
        if template is not None:
            screen.app.push_screen(FileNameModal(template, folder), lambda t: named(t, template))

    screen.app.push_screen(TemplateModal(templates(), "A new workload: start from"), chosen)
