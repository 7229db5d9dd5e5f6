"""The header's title set while its screen is taken apart is dropped, not an error that ends the app
(Textual's own header catches only ``NoScreen``)."""

from __future__ import annotations

import asyncio

import pytest
from textual.app import App
from textual.widgets import Header as TextualHeader

from tui.widgets.header import Header


def _title_after_children_gone(header_type) -> list[BaseException]:
    class Titled(App):
        def compose(self):
            yield header_type()

    errors: list[BaseException] = []

    async def scenario() -> None:
        app = Titled()
        app._handle_exception = errors.append  # what would end the app
        async with app.run_test() as pilot:
            header = app.query_one(header_type)
            await header.remove_children()  # as when the screen is taken apart
            app.sub_title = "network: 2 nodes ok"
            await pilot.pause()

    asyncio.run(scenario())
    return errors


def test_a_title_set_as_the_screen_closes_is_dropped():
    assert _title_after_children_gone(Header) == []


@pytest.mark.parametrize("header_type", [TextualHeader])
def test_textuals_own_header_would_end_the_app_there(header_type):
    """Keeps the replacement honest: drop it once Textual's header survives the same."""
    errors = _title_after_children_gone(header_type)
    assert [type(e).__name__ for e in errors] == ["NoMatches"]
