"""What each example format needs of a row, and reading it from one row (standard library only).

One rule for ``fsdp-tui validate`` (columns of a file's first rows) and for the trainer (every row):
which columns a format needs, which format a file's columns show, and how a row's values become a
prompt and answer, a text, or a conversation. A cell that holds JSON as text (a CSV or parquet column
of SQuAD ``answers`` or of ``messages``) is parsed; a value that does not fit is an error naming the
row, never a silent fallback.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Iterable
from typing import Any

from trainer.wire.data_config import ChatFields

FORMATS = ("alpaca", "squad", "chat", "text")
_NEEDS = {"alpaca": ("instruction", "output"), "squad": ("context", "question", "answers"), "text": ("text",)}
CHAT_COLUMNS = ("messages", "conversations")
"""The columns a conversation is read from when ``data.chat.messages_field`` is not set: OpenAI-style
``messages`` (``role``/``content``) or ShareGPT ``conversations`` (``from``/``value``)."""
ROLE_NAMES = {"human": "user", "gpt": "assistant", "chatgpt": "assistant", "bot": "assistant",
              "model": "assistant", "function_call": "assistant", "observation": "tool"}
"""Speaker names of ShareGPT-style data and the role a chat template knows them by."""
TEMPLATE_ROLES = ("system", "user", "assistant", "tool", "developer", "ipython", "function")
"""Roles passed to the chat template as they are (templates know these by name)."""

Fail = Callable[[str], Exception]
"""Builds the error for the current row from a message (it knows the file and line)."""


def needed_columns(fmt: str, chat: ChatFields, columns: Iterable[str] = ()) -> tuple[str, ...]:
    """The columns a row of ``fmt`` must have (for chat: the configured messages column, else whichever of
    ``messages``/``conversations`` the data has)."""
    if fmt == "chat":
        if chat.messages_field:
            return (chat.messages_field,)
        present = [c for c in CHAT_COLUMNS if c in set(columns)]
        return (present[0] if present else CHAT_COLUMNS[0],)
    return _NEEDS[fmt]


def detect_format(columns: Iterable[str], chat: ChatFields) -> str | None:
    """The format a file's columns show, or ``None``."""
    cols = set(columns)
    if chat.messages_field and chat.messages_field in cols:
        return "chat"
    for fmt in ("alpaca", "squad"):
        if set(_NEEDS[fmt]) <= cols:
            return fmt
    if cols & set(CHAT_COLUMNS):
        return "chat"
    if "text" in cols:
        return "text"
    return None


def column_problem(columns: Iterable[str], fmt: str, chat: ChatFields) -> tuple[str, str] | None:
    """Why rows with these columns cannot be read as ``fmt`` (``auto``: as any format), with the close
    column names as did-you-means, and what to do; ``None`` when they can."""
    cols = list(columns)
    if fmt == "auto":
        if detect_format(cols, chat) is not None:
            return None
        best = max(FORMATS, key=lambda f: _closeness(needed_columns(f, chat, cols), cols))
        near = ""
        if _closeness(needed_columns(best, chat, cols), cols):
            near = f": for {best}, {_missing_words(needed_columns(best, chat, cols), cols)}"
        return (f"cannot tell the format from columns {_listed(cols)}{near}",
                "name the columns as a format needs them (alpaca: instruction, output; squad: context, question, "
                "answers; chat: messages or conversations; text: text), or set parameters.data.format")
    missing = [c for c in needed_columns(fmt, chat, cols) if c not in cols]
    if not missing:
        return None
    if fmt == "chat" and chat.messages_field:
        return (f"{_missing_words(missing, cols)} (parameters.data.chat.messages_field names it)",
                f"columns: {_listed(cols)}")
    return (f"{_missing_words(missing, cols)}: the {fmt} format needs {', '.join(needed_columns(fmt, chat, cols))}",
            f"columns: {_listed(cols)}")


def prompt_answer(fmt: str, row: dict[str, Any], fail: Fail) -> tuple[str, str]:
    """An alpaca or squad row as (prompt, answer)."""
    if fmt == "alpaca":
        instruction, output = _text(row, "instruction", fail, fmt), _text(row, "output", fail, fmt)
        prompt = f"### Instruction:\n{instruction}\n\n"
        if row.get("input"):
            prompt += f"### Input:\n{row['input']}\n\n"
        return prompt + "### Response:\n", output
    context, question = _text(row, "context", fail, fmt), _text(row, "question", fail, fmt)
    answer = squad_answer(_value(row, "answers", fail, fmt), fail)
    return f"Context: {context}\nQuestion: {question}\nAnswer: ", answer


def text_of(row: dict[str, Any], fail: Fail) -> str:
    return _text(row, "text", fail, "text")


def squad_answer(value: Any, fail: Fail) -> str:
    """The first answer's text of SQuAD ``answers``: ``{"text": [...], "answer_start": [...]}``, a list
    of texts or of ``{"text": ...}``, the same as JSON text (a CSV cell), or plain text."""
    if isinstance(value, str):
        if value.strip()[:1] not in ("{", "["):
            return value
        value = _json_cell(value, "answers", fail)
    text = value.get("text") if isinstance(value, dict) else value
    if isinstance(text, list):
        text = text[0] if text else None
        if isinstance(text, dict):
            text = text.get("text")
    if not isinstance(text, (str, int, float)) or isinstance(text, bool):
        raise fail("'answers' holds no answer text (expected {\"text\": [\"...\"], ...})")
    return str(text)


def conversation(row: dict[str, Any], chat: ChatFields, fail: Fail) -> list[dict[str, Any]]:
    """A chat row's turns as ``{"role", "content", ...}`` in the template's role names: OpenAI-style
    ``messages``, ShareGPT ``conversations`` (``from``/``value``, ``human``/``gpt``), or the fields
    ``data.chat`` names."""
    field = needed_columns("chat", chat, row)[0]
    turns = _value(row, field, fail, "chat")
    if isinstance(turns, str) and turns.strip().startswith("["):
        turns = _json_cell(turns, field, fail)
    if not isinstance(turns, list) or not turns:
        raise fail(f"'{field}' must be a non-empty list of turns, not {_shown(turns)}")
    names = {**ROLE_NAMES, **{k.lower(): v for k, v in chat.roles.items()}}
    out = []
    for number, turn in enumerate(turns, start=1):
        if not isinstance(turn, dict):
            raise fail(f"'{field}' turn {number} must be a mapping, not {_shown(turn)}")
        role_key = chat.role_key or ("role" if "role" in turn or "from" not in turn else "from")
        content_key = chat.content_key or ("content" if "content" in turn or "value" not in turn else "value")
        if role_key not in turn:
            raise fail(f"'{field}' turn {number} has no '{role_key}' (its keys: {_listed(turn)}; "
                       "parameters.data.chat.role_key names another)")
        said = str(turn[role_key])
        role = names.get(said.lower()) or (said.lower() if said.lower() in TEMPLATE_ROLES else None)
        if role is None:
            raise fail(f"'{field}' turn {number}: unknown role '{said}' (known: {', '.join(TEMPLATE_ROLES)}, "
                       f"{', '.join(ROLE_NAMES)}; map it with parameters.data.chat.roles, e.g. {{{said}: user}})")
        content = _content(turn.get(content_key), f"'{field}' turn {number}", content_key, turn, fail)
        rest = {k: v for k, v in turn.items() if k not in (role_key, content_key, "role", "content")}
        out.append({**rest, "role": role, "content": content})
    return out


def read_row(fmt: str, row: dict[str, Any], chat: ChatFields, fail: Fail) -> None:
    """Raise ``fail``'s error where the trainer could not read ``row`` as ``fmt`` (its text, its
    conversation and tools, its prompt and answer): what ``validate`` and the doctor ask of a source's
    first rows."""
    if fmt == "chat":
        conversation(row, chat, fail)
        tools_of(row, fail)
    elif fmt == "text":
        text_of(row, fail)
    elif fmt in ("alpaca", "squad"):
        prompt_answer(fmt, row, fail)


def tools_of(row: dict[str, Any], fail: Fail) -> list[dict[str, Any]] | None:
    """The function definitions a chat row offers the model (its ``tools`` column: JSON schemas as the
    chat template takes them, or that list as JSON text in a CSV or parquet cell); ``None`` without."""
    value = row.get("tools")
    if isinstance(value, str):
        value = _json_cell(value, "tools", fail) if value.strip() else None
    if value is None or value == []:
        return None
    if not isinstance(value, list) or not all(isinstance(tool, dict) for tool in value):
        raise fail(f"'tools' must be a list of function definitions (JSON schemas), not {_shown(value)}")
    return value


def _content(value: Any, where: str, key: str, turn: dict[str, Any], fail: Fail) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        if key in turn or turn.get("tool_calls"):
            return ""
        raise fail(f"{where} has no '{key}' (its keys: {_listed(turn)}; parameters.data.chat.content_key names "
                   "another)")
    if isinstance(value, list) and all(isinstance(p, dict) and isinstance(p.get("text"), str) for p in value):
        return "".join(p["text"] for p in value)  # content parts: [{"type": "text", "text": ...}]
    raise fail(f"{where}: '{key}' must be text, not {_shown(value)}")


def _value(row: dict[str, Any], key: str, fail: Fail, fmt: str) -> Any:
    if row.get(key) is None:
        needs = ("a chat row needs messages or conversations, or the column parameters.data.chat.messages_field "
                 "names") if fmt == "chat" else f"the {fmt} format needs {', '.join(_NEEDS[fmt])}"
        if key in row:
            raise fail(f"'{key}' is empty; {needs}")
        close = difflib.get_close_matches(key, [str(k) for k in row], n=1, cutoff=0.6)
        raise fail(f"row has no '{key}'" + (f" (did you mean '{close[0]}'?)" if close else "") + f"; {needs}")
    return row[key]


def _text(row: dict[str, Any], key: str, fail: Fail, fmt: str) -> str:
    value = _value(row, key, fail, fmt)
    if isinstance(value, (dict, list)):
        raise fail(f"'{key}' must be text, not {_shown(value)}")
    return str(value)


def _json_cell(text: str, key: str, fail: Fail) -> Any:
    try:
        return json.loads(text)
    except ValueError as err:
        raise fail(f"'{key}' is text that looks like JSON but is not: {getattr(err, 'msg', err)} "
                   f"(column {getattr(err, 'colno', '?')} of the cell)") from None


def _closeness(needed: tuple[str, ...], columns: list[str]) -> int:
    return sum(1 for n in needed if n in columns or difflib.get_close_matches(n, columns, n=1, cutoff=0.6))


def _missing_words(missing: Iterable[str], columns: list[str]) -> str:
    parts = []
    for name in missing:
        if name in columns:
            continue
        close = difflib.get_close_matches(name, columns, n=1, cutoff=0.6)
        parts.append(f"no column '{name}'" + (f" (did you mean '{close[0]}'?)" if close else ""))
    return ", ".join(parts)


def _listed(columns: Iterable[Any]) -> str:
    names = [str(c) for c in columns]
    return "[" + ", ".join(names[:12]) + (", ..." if len(names) > 12 else "") + "]"


def _shown(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 40 else text[:37] + "..."
