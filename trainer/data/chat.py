"""A conversation -> token ids and labels, from one render of the whole conversation.

Chat templates are not prefix-stable: Qwen3's renders an empty think block only on the last assistant
turn, others number turns or add a date to the last one. So the tokens are those of the conversation
rendered once, as the model sees it at inference, and the labels mark which of them the model writes:

- a template with ``{% generation %}`` markers says so itself (``return_assistant_tokens_mask``);
- otherwise each assistant turn is found in that one render by rendering again
  (:mod:`trainer.data.turns`): the whole of what the model writes after its generation prompt, its
  text, its tool calls, its reasoning where the template keeps it, and the end-of-turn token after
  them (``<|im_end|>``, ``<|eot_id|>``, ``</s>``), so the model learns to call tools and to stop;
  headers, other roles and the next turn's header are never learned.

With ``mask_prompt: false`` every token is learned but the tool results (``role: tool``): the model
reads them, it never writes them. A row's ``tools`` (the function definitions) reach the template.

Character spans become token labels through the tokenizer's offset mapping: a token is learned when it
overlaps a learned span (the rule ``transformers`` applies to generation markers) and no tool result.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.data.turns import TemplateRefused, TurnFinder
from trainer.wire.config import SettingError

__all__ = ["FALLBACK_TEMPLATE", "IGNORE", "ChatTokens", "Template", "TemplateRefused", "choose_template"]

IGNORE = -100
GENERATION = re.compile(r"\{%-?\s*generation\s*-?%\}")
FALLBACK_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] + ': ' + m['content'] + eos_token + '\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ 'assistant: ' }}{% endif %}"
)
"""Used when neither the tokenizer nor the workload has a template (said once at start)."""
FALLBACK_WORDS = "'role: text<eos>' lines"


@dataclass(frozen=True)
class Template:
    text: str
    note: str | None = None
    """One line for the start of the run when the template is not the tokenizer's own."""
    unended: str | None = None
    """One line for the start of the run when an assistant turn of this template ends with no special
    token, with what to do (:meth:`ChatTokens.closes_turns`)."""

    @property
    def notes(self) -> tuple[str, ...]:
        """The lines to say at the start of the run."""
        return tuple(line for line in (self.note, self.unended) if line)


def choose_template(tokenizer: Any, setting: str | None, model_name: str) -> Template:
    """The workload's template (``data.chat_template``: Jinja text or a file), else the tokenizer's, else
    :data:`FALLBACK_TEMPLATE` with a note saying so; a template whose assistant turns end with no special
    token is said too."""
    if setting:
        chosen = Template(_template_text(setting), f"chat template: parameters.data.chat_template "
                          f"({'inline' if _is_jinja(setting) else _expand(setting)})")
    else:
        own = getattr(tokenizer, "chat_template", None)
        if isinstance(own, dict):
            own = own.get("default")
        if isinstance(own, str) and own.strip():
            chosen = Template(own)
        else:
            chosen = Template(FALLBACK_TEMPLATE, f"the tokenizer of {model_name} has no chat template and "
                              f"parameters.data.chat_template is not set: conversations are rendered as "
                              f"{FALLBACK_WORDS}; set data.chat_template to the template the model is used with")
    return Template(chosen.text, chosen.note, ChatTokens(tokenizer, chosen.text, mask_prompt=True).closes_turns())


def _is_jinja(text: str) -> bool:
    return "{{" in text or "{%" in text


def _expand(path: str) -> str:
    return os.path.expanduser(os.path.expandvars(path))


def _template_text(setting: str) -> str:
    if _is_jinja(setting):
        return setting
    path = Path(_expand(setting.strip()))
    candidates = [path]
    if not path.is_absolute() and os.environ.get("CODE_SOURCE_PATH"):
        candidates.append(Path(os.environ["CODE_SOURCE_PATH"]) / path)
    for candidate in candidates:
        if candidate.is_file():
            try:
                return candidate.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as err:
                raise SettingError(f"{candidate}: parameters.data.chat_template: cannot read it: {err}") from None
    raise SettingError(f"parameters.data.chat_template: no file '{setting}' on this node (and the value is no "
                       "Jinja template): give the template's text or a path the nodes have")


class ChatTokens:
    """Token ids and labels of whole conversations under one template."""

    def __init__(self, tokenizer: Any, template: str, mask_prompt: bool) -> None:
        self.tok = tokenizer
        self.template = template
        self.mask_prompt = mask_prompt
        self.marked = bool(GENERATION.search(template)) and bool(getattr(tokenizer, "is_fast", False))
        specials = {str(t) for t in getattr(tokenizer, "all_special_tokens", [])}
        specials |= {str(t) for t in getattr(tokenizer, "added_tokens_decoder", {}).values()
                     if getattr(t, "special", False)}
        specials.discard("")
        self.end_of_turn = re.compile("|".join(re.escape(s) for s in sorted(specials, key=len, reverse=True))) \
            if specials else None
        """The tokenizer's special tokens: what can end a turn."""
        self._prompted: bool | None = None
        """Whether the template renders a generation prompt (found once)."""

    def __call__(self, messages: list[dict[str, Any]],
                 tools: list[dict[str, Any]] | None = None) -> tuple[list[int], list[int]]:
        """Ids of the conversation rendered once, and labels on what the model writes (``mask_prompt``),
        or on everything but the tool results; ``tools``: the function definitions the template shows."""
        if self.marked and self.mask_prompt:
            out = self._apply(messages, tools=tools, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
            ids = list(out["input_ids"])
            return ids, [t if m else IGNORE for t, m in zip(ids, out["assistant_masks"], strict=True)]
        text = self._render(messages, False, tools)
        if not self.mask_prompt:
            return self._labelled(text, [(0, len(text))], self._tool_spans(messages, text, tools))
        return self._labelled(text, self.learned_spans(messages, text, tools), [])

    def learned_spans(self, messages: list[dict[str, Any]], text: str,
                      tools: list[dict[str, Any]] | None = None) -> list[tuple[int, int]]:
        """Character spans of ``text`` (the whole conversation rendered) that the model writes: each
        assistant turn from where its generation prompt ends to its end-of-turn token."""
        finder = self._finder(tools)
        spans = []
        for i, message in enumerate(messages):
            if message.get("role") == "assistant":
                turn = finder.turn(messages, i, text)
                if turn is not None and turn.end > turn.start:  # else the template does not show this turn
                    spans.append((turn.start, turn.end))
        return spans

    def _tool_spans(self, messages: list[dict[str, Any]], text: str,
                    tools: list[dict[str, Any]] | None) -> list[tuple[int, int]]:
        """Each tool result's whole rendering, from the end of what precedes it (a tool result right before
        it included) to the end of its closing: never learned, whatever ``mask_prompt`` says."""
        if not any(m.get("role") == "tool" for m in messages):
            return []
        finder = self._finder(tools)
        spans: list[tuple[int, int]] = []
        for i, message in enumerate(messages):
            if message.get("role") != "tool":
                continue
            turn = finder.turn(messages, i, text)
            if turn is None:
                continue
            spans.append((self._after_previous(messages, i, text, finder, spans, turn.start),
                          max(turn.rendered_end, turn.end)))
        return spans

    @staticmethod
    def _after_previous(messages: list[dict[str, Any]], i: int, text: str, finder: TurnFinder,
                        spans: list[tuple[int, int]], start: int) -> int:
        """Where the rendering of what precedes message ``i`` ends (at most ``start``): a tool result's
        span right before it, else the conversation cut before it when the template renders that alike,
        else the previous turn's end."""
        if spans and messages[i - 1].get("role") == "tool":
            return min(start, spans[-1][1])
        before = finder.rendered_before(messages, i, text)
        if before is None and i > 0 and messages[i - 1].get("role") == "assistant":
            previous = finder.turn(messages, i - 1, text)
            before = previous.rendered_end if previous is not None else None
        return before if before is not None and before <= start else start

    def _finder(self, tools: list[dict[str, Any]] | None) -> TurnFinder:
        finder = TurnFinder(lambda m, prompt: self._render(m, prompt, tools), self.end_of_turn, self._prompted)
        self._prompted = finder.prompts()
        return finder

    def closes_turns(self) -> str | None:
        """One line for the start of the run when an assistant turn of this template ends with no special
        token (the model would never learn to stop), with what to do; ``None`` when it does (or the
        template refuses a plain two-turn conversation, so nothing can be said)."""
        messages = [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi there"}]
        try:
            text = self._render(messages, False, None)
            turn = self._finder(None).turn(messages, 1, text)
        except TemplateRefused:
            return None
        if turn is None or turn.closed:
            return None
        shown = text[turn.start:turn.rendered_end]
        eos = getattr(self.tok, "eos_token", None)
        return (f"chat template: an assistant turn ends with no special token (it renders {shown!r}), so the model "
                "never learns to end its answer and generation runs on to max_new_tokens; set data.chat_template "
                "to a template that closes each assistant turn with a special token"
                + (f", e.g. {{{{ eos_token }}}} ({eos})" if eos else "") + " after the message")

    def tokens(self, text: str, spans: list[tuple[int, int]]) -> tuple[list[int], list[int]]:
        """Ids of ``text`` and labels that keep the tokens overlapping ``spans``."""
        return self._labelled(text, spans, [])

    def _labelled(self, text: str, spans: list[tuple[int, int]],
                  hidden: list[tuple[int, int]]) -> tuple[list[int], list[int]]:
        """Ids of ``text``; labels on the tokens that overlap ``spans`` and no ``hidden`` span."""
        if getattr(self.tok, "is_fast", False):
            enc = self.tok(text, add_special_tokens=False, return_offsets_mapping=True)
            ids = list(enc["input_ids"])
            offsets = enc["offset_mapping"]
            learned = _overlapping(offsets, spans)
            masked = _overlapping(offsets, hidden)
            return ids, [t if keep and not drop else IGNORE for t, keep, drop in zip(ids, learned, masked, strict=True)]
        ids, labels = [], []  # a slow tokenizer has no offsets: the pieces between the spans' edges
        for lo, hi, learn in _pieces(spans, hidden, len(text)):
            piece = self._ids(text[lo:hi])
            ids += piece
            labels += piece if learn else [IGNORE] * len(piece)
        return ids, labels

    def _render(self, messages: list[dict[str, Any]], prompt: bool, tools: list[dict[str, Any]] | None) -> str:
        """The template's text for ``messages`` (the same as ``apply_chat_template(tokenize=False)``)."""
        from jinja2 import TemplateError

        render = _jinja_renderer()
        try:
            if render is None:
                return self.tok.apply_chat_template(messages, chat_template=self.template, tools=tools,
                                                    add_generation_prompt=prompt, tokenize=False)
            return render(conversations=[messages], tools=tools, chat_template=self.template,
                          add_generation_prompt=prompt, **self.tok.special_tokens_map)[0][0]
        except (TemplateError, TypeError, KeyError, IndexError, ValueError) as err:
            raise TemplateRefused(f"the chat template refused this conversation: {err}") from None

    def _apply(self, messages: list[dict[str, Any]], **kwargs: Any) -> Any:
        from jinja2 import TemplateError

        try:
            return self.tok.apply_chat_template(messages, chat_template=self.template, **kwargs)
        except (TemplateError, TypeError, KeyError, IndexError, ValueError) as err:
            raise TemplateRefused(f"the chat template refused this conversation: {err}") from None

    def _ids(self, text: str) -> list[int]:
        return list(self.tok(text, add_special_tokens=False)["input_ids"]) if text else []


def _overlapping(offsets: list[tuple[int, int]], spans: list[tuple[int, int]]) -> list[bool]:
    """For each token's (start, end), whether it overlaps one of ``spans`` (sorted, apart)."""
    out, k = [], 0
    for lo, hi in offsets:
        while k < len(spans) and lo >= spans[k][1]:
            k += 1
        out.append(k < len(spans) and hi > spans[k][0] and hi > lo)
    return out


def _pieces(spans: list[tuple[int, int]], hidden: list[tuple[int, int]], length: int):
    """``(start, end, learned)`` pieces of a text of ``length`` characters, cut at every span's edges."""
    edges = sorted({0, length, *(e for s in spans + hidden for e in s)})
    for lo, hi in zip(edges, edges[1:], strict=False):
        if hi > lo:
            inside = any(s <= lo and hi <= e for s, e in spans) and not any(s <= lo and hi <= e for s, e in hidden)
            yield lo, hi, inside


@functools.cache
def _jinja_renderer():
    """The renderer behind ``apply_chat_template``, without its per-call overhead (a turn costs three
    renders); ``None`` on a transformers without it (``apply_chat_template`` itself then)."""
    try:
        from transformers.utils.chat_template_utils import render_jinja_template
    except ImportError:
        return None
    return render_jinja_template
