"""Where each turn of a conversation lies in its one render, found by rendering the conversation again.

What the model writes in an assistant turn is whatever the template renders for it after the prompt
it is given at inference: its text, its tool calls, its reasoning where the template keeps it, and the
token that ends the turn. None of that is found by looking for the message's ``content`` (a tool call
has none) or for special tokens (a DeepSeek-style call is full of them). Instead:

- **the message's part** is where the render changes when the message is replaced by a plain probe
  (its text a private-use character, its tool calls and reasoning removed). The probe goes last in the
  conversation cut after the message, so nothing after it can change with it (a template's state, such
  as "first tool call of the turn", would otherwise carry the change into later turns); the whole
  conversation is probed only when the template renders the turn differently once it is no longer the
  last (it is not prefix-stable there);
- **where the model starts writing** is the end of the generation prompt, ``messages[:i]`` rendered
  with ``add_generation_prompt``, when the conversation's render continues it; otherwise (a template
  that places a system message differently when the last message is the user's, or has no generation
  prompt) the start of the message's part;
- **the end of the turn** is what the template renders after the message's part when the message is
  the last one: its closing, e.g. ``<|im_end|>\\n``, up to and including its last special token
  (``<|im_end|>``: the model stops there and never writes the newline). A closing without any special
  token ends nothing the model could stop at: :func:`closes_turns` says so at start.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

MARK = "\ue000"
"""Stands in for a message's text in a probe render (a private-use character no text starts or ends with)."""
PAYLOAD_KEYS = ("tool_calls", "function_call", "reasoning_content", "thinking", "reasoning")
"""What an assistant message holds besides its text; a probe drops them (transformers aliases the
reasoning fields to each other)."""

Render = Callable[[list[dict[str, Any]], bool], str]
"""``render(messages, add_generation_prompt)``: the template's text for those messages."""


@dataclass(frozen=True)
class Turn:
    """One message's place in the conversation's render (character offsets)."""

    start: int
    """Where the message's own part starts (for an assistant turn: where the model starts writing)."""
    end: int
    """Where what the model writes ends: after the closing's last special token, else after its part."""
    rendered_end: int
    """Where the message's rendering ends, its whole closing included."""
    closed: bool
    """The closing holds a special token (the turn ends with a token the model can learn to stop at)."""


class TurnFinder:
    """Finds turns in renders of one template; ``specials`` matches the tokenizer's special tokens,
    ``prompted`` says whether the template renders a generation prompt (``None``: find out)."""

    def __init__(self, render: Render, specials: re.Pattern[str] | None, prompted: bool | None = None) -> None:
        self.render = render
        self.specials = specials
        self.prompted = prompted

    def turn(self, messages: list[dict[str, Any]], i: int, text: str) -> Turn | None:
        """Message ``i``'s turn in ``text`` (the whole conversation rendered); ``None`` when the template
        does not show the message."""
        last = self.render(messages[: i + 1], False)
        own = self._difference(last, self.render([*messages[:i], probe(messages[i])], False))
        closing = last[own[1]:] if own is not None else ""
        if own is not None and text.startswith(last):
            start, part_end = own
            stop, rendered = self._last_special_end(closing), len(closing)
        else:  # the template renders the turn otherwise when another follows: probe the whole conversation
            whole = self._part(messages, i, text)
            if whole is None:
                return None
            start, part_end = whole
            stop, rendered = self._closing_in(text[part_end:self._next_part(messages, i, text)], closing)
        if messages[i].get("role") == "assistant":
            start = self._writes_from(messages, i, text, start, part_end + stop)
        return Turn(start, part_end + stop, part_end + rendered, stop > 0)

    def rendered_before(self, messages: list[dict[str, Any]], i: int, text: str) -> int | None:
        """Where the rendering of ``messages[:i]`` ends in ``text``, when the template renders them alike
        without the rest (``None`` otherwise)."""
        before = self.render(messages[:i], False)
        return len(before) if text.startswith(before) else None

    def prompts(self) -> bool:
        """Whether the template renders a generation prompt at all (checked once, after a user's turn)."""
        if self.prompted is None:
            asked = [{"role": "user", "content": "Hello"}]
            try:
                self.prompted = self.render(asked, True) != self.render(asked, False)
            except TemplateRefused:
                self.prompted = False
        return self.prompted

    def _part(self, messages: list[dict[str, Any]], i: int, text: str) -> tuple[int, int] | None:
        """Where message ``i``'s own part lies in ``text``: what changes when it alone is a probe."""
        return self._difference(text, self.render([*messages[:i], probe(messages[i]), *messages[i + 1:]], False))

    def _next_part(self, messages: list[dict[str, Any]], i: int, text: str) -> int:
        """Where the next message the template shows starts its own part (the end of ``text`` if none)."""
        for j in range(i + 1, len(messages)):
            found = self._part(messages, j, text)
            if found is not None:
                return found[0]
        return len(text)

    def _writes_from(self, messages: list[dict[str, Any]], i: int, text: str, start: int, end: int) -> int:
        """Where the model starts writing turn ``i``: the end of its generation prompt when ``text``
        continues it, else ``start`` (the message's own part)."""
        if not self.prompts():
            return start
        try:
            prompt = self.render(messages[:i], True)
        except TemplateRefused:
            return start
        return len(prompt) if text.startswith(prompt) and len(prompt) < end else start

    def _closing_in(self, window: str, closing: str) -> tuple[int, int]:
        """Where the turn's closing ends in ``window`` (the text from the end of the message's part to
        the next message's): up to the special tokens of ``closing`` (the closing as rendered when the
        message is the last), found in order; else as far as the two agree. Returns (the end of its last
        special token, or 0; the end of the whole closing)."""
        agreed = _common_prefix(window, closing)
        tokens = [m.group() for m in self.specials.finditer(closing)] if self.specials is not None else []
        at = 0
        for token in tokens:
            found = window.find(token, at)
            if found < 0:
                return self._last_special_end(closing[:agreed]), agreed
            at = found + len(token)
        if not tokens:
            return 0, agreed
        tail = closing[closing.rfind(tokens[-1]) + len(tokens[-1]):]
        return at, at + _common_prefix(window[at:], tail)

    def _difference(self, a: str, b: str) -> tuple[int, int] | None:
        """The part of ``a`` that differs from ``b``, widened to whole special tokens (a turn that ends with
        ``<|eom_id|>`` where its probe ends with ``<|eot_id|>`` differs inside the token)."""
        found = _difference(a, b)
        if found is None or self.specials is None:
            return found
        start, end = found
        for m in self.specials.finditer(a, max(0, start - 64), min(len(a), end + 64)):
            if m.start() < start < m.end():
                start = m.start()
            if m.start() < end < m.end():
                end = m.end()
        return start, end

    def _last_special_end(self, closing: str) -> int:
        if self.specials is None:
            return 0
        found = [m.end() for m in self.specials.finditer(closing)]
        return found[-1] if found else 0


class TemplateRefused(ValueError):
    """The template raised for this conversation (e.g. roles that do not alternate)."""


def probe(message: dict[str, Any]) -> dict[str, Any]:
    """The message as plain text: its text a marker, nothing else it would write."""
    kept = {k: v for k, v in message.items() if k not in PAYLOAD_KEYS}
    return {**kept, "content": MARK}


def _difference(a: str, b: str) -> tuple[int, int] | None:
    """The part of ``a`` that differs from ``b`` (after their common prefix, before their common suffix)."""
    if a == b:
        return None
    start = _common_prefix(a, b)
    end = len(a) - _common_prefix(a[start:][::-1], b[start:][::-1])
    return start, max(start, end)


def _common_prefix(a: str, b: str) -> int:
    """Length of the common prefix, by halving (slices compare at C speed)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo
