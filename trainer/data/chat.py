"""A conversation -> token ids and labels, from one render of the whole conversation.

Chat templates are not prefix-stable: Qwen3's renders an empty think block only on the last assistant
turn, others number turns or add a date to the last one. So the tokens are those of the conversation
rendered once, as the model sees it at inference, and the labels mark which of them the model writes:

- a template with ``{% generation %}`` markers says so itself (``return_assistant_tokens_mask``);
- otherwise each assistant message is found in that one render by rendering the conversation once more
  with the message's text replaced by a marker: where the two renders differ is where the template put
  that message's text (however it transformed it). The learned span runs from there to the template's
  end-of-turn token after it (the first special token, e.g. ``<|im_end|>``, ``<|eot_id|>``, ``</s>``),
  so the model learns to stop; headers, other roles and the next turn's header are never learned.

Character spans become token labels through the tokenizer's offset mapping: a token is learned when it
overlaps a learned span (the rule ``transformers`` applies to generation markers).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.wire.config import SettingError

IGNORE = -100
GENERATION = re.compile(r"\{%-?\s*generation\s*-?%\}")
FALLBACK_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] + ': ' + m['content'] + eos_token + '\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ 'assistant: ' }}{% endif %}"
)
"""Used when neither the tokenizer nor the workload has a template (said once at start)."""
FALLBACK_WORDS = "'role: text<eos>' lines"
_MARK = "\ue000"
"""Stands in for a message's text in the probe render (a private-use character no text starts or ends with)."""


@dataclass(frozen=True)
class Template:
    text: str
    note: str | None = None
    """One line for the start of the run when the template is not the tokenizer's own."""


def choose_template(tokenizer: Any, setting: str | None, model_name: str) -> Template:
    """The workload's template (``data.chat_template``: Jinja text or a file), else the tokenizer's, else
    :data:`FALLBACK_TEMPLATE` with a note saying so."""
    if setting:
        return Template(_template_text(setting), f"chat template: parameters.data.chat_template "
                        f"({'inline' if _is_jinja(setting) else _expand(setting)})")
    own = getattr(tokenizer, "chat_template", None)
    if isinstance(own, dict):
        own = own.get("default")
    if isinstance(own, str) and own.strip():
        return Template(own)
    return Template(FALLBACK_TEMPLATE, f"the tokenizer of {model_name} has no chat template and "
                    f"parameters.data.chat_template is not set: conversations are rendered as {FALLBACK_WORDS}; "
                    "set data.chat_template to the template the model is used with")


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


class TemplateRefused(ValueError):
    """The template raised for this conversation (e.g. roles that do not alternate)."""


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

    def __call__(self, messages: list[dict[str, Any]]) -> tuple[list[int], list[int]]:
        if self.marked and self.mask_prompt:
            out = self._apply(messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
            ids = list(out["input_ids"])
            return ids, [t if m else IGNORE for t, m in zip(ids, out["assistant_masks"], strict=True)]
        text = self._apply(messages, tokenize=False)
        if not self.mask_prompt:
            ids = self._ids(text)
            return ids, list(ids)
        return self.tokens(text, self.learned_spans(messages, text))

    def learned_spans(self, messages: list[dict[str, Any]], text: str) -> list[tuple[int, int]]:
        """Character spans of ``text`` (the whole conversation rendered) that the model writes."""
        spans = []
        for i, message in enumerate(messages):
            if message.get("role") != "assistant":
                continue
            region = self._region(messages, i, text)
            if region is None:
                continue  # the template does not show this turn
            start, end = region
            limit = len(text)
            if i + 1 < len(messages):
                following = self._region(messages, i + 1, text)
                limit = following[0] if following is not None and following[0] >= end else limit
            found = self.end_of_turn.search(text, end, limit) if self.end_of_turn is not None else None
            spans.append((start, found.end() if found is not None else end))
        return spans

    def tokens(self, text: str, spans: list[tuple[int, int]]) -> tuple[list[int], list[int]]:
        """Ids of ``text`` and labels that keep the tokens overlapping ``spans``."""
        if getattr(self.tok, "is_fast", False):
            enc = self.tok(text, add_special_tokens=False, return_offsets_mapping=True)
            ids = list(enc["input_ids"])
            labels, k = [], 0
            for token, (lo, hi) in zip(ids, enc["offset_mapping"], strict=True):
                while k < len(spans) and lo >= spans[k][1]:
                    k += 1
                learned = k < len(spans) and hi > spans[k][0] and hi > lo
                labels.append(token if learned else IGNORE)
            return ids, labels
        ids, labels, cut = [], [], 0  # a slow tokenizer has no offsets: the pieces between spans
        for lo, hi in [*spans, (len(text), len(text))]:
            head, body = self._ids(text[cut:lo]), self._ids(text[lo:hi])
            ids += head + body
            labels += [IGNORE] * len(head) + body
            cut = hi
        return ids, labels

    def _region(self, messages: list[dict[str, Any]], i: int, text: str) -> tuple[int, int] | None:
        """Where message ``i``'s text lies in ``text``: the part that changes when it is replaced by a marker."""
        probe = [dict(m) for m in messages]
        probe[i]["content"] = _MARK
        other = self._apply(probe, tokenize=False)
        if other == text:
            return None
        start = _common_prefix(text, other)
        end = len(text) - _common_prefix(text[start:][::-1], other[start:][::-1])
        return start, end

    def _apply(self, messages: list[dict[str, Any]], **kwargs: Any) -> Any:
        from jinja2 import TemplateError

        try:
            return self.tok.apply_chat_template(messages, chat_template=self.template, **kwargs)
        except (TemplateError, TypeError, KeyError, IndexError) as err:
            raise TemplateRefused(f"the chat template refused this conversation: {err}") from None

    def _ids(self, text: str) -> list[int]:
        return list(self.tok(text, add_special_tokens=False)["input_ids"]) if text else []


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
