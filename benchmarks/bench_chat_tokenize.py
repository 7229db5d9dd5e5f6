"""Chat tokenization: the one-render rule (``trainer.data.chat.ChatTokens``: one render of the whole
conversation, three more per assistant turn to find it whole (the turn as the last one, with a probe in its
place, its generation prompt), one tokenization) against the prefix renders
it replaced (one render and one tokenization of ``messages[:i+1]`` for every message ``i``), side by side
on the same conversations and tokenizer. Prints the load average with its figures.

    .venv/bin/python benchmarks/bench_chat_tokenize.py [CONVERSATIONS]
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

IGNORE = -100


def prefix_renders(tok, messages):
    """The replaced method: each message's tokens are what its prefix render adds to the previous one."""
    ids, labels = [], []
    for i, message in enumerate(messages):
        rendered = tok.apply_chat_template(messages[: i + 1], tokenize=False)
        new = tok(rendered, add_special_tokens=False)["input_ids"][len(ids):]
        ids += new
        labels += new if message["role"] == "assistant" else [IGNORE] * len(new)
    return ids, labels


def main() -> None:
    from transformers import AutoTokenizer

    from trainer.assets import resolve_model
    from trainer.data.chat import ChatTokens

    count = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    tok = AutoTokenizer.from_pretrained(resolve_model("builtin:tiny-llama"))
    words = ["the", "sum", "of", "two", "and", "three", "is", "five", "and", "four", "plus", "four", "is", "eight"]
    conversations = [[{"role": "system", "content": "Answer briefly."}]
                     + [m for t in range(3) for m in (
                         {"role": "user", "content": " ".join(words[(i + t) % 7:(i + t) % 7 + 6]) + "?"},
                         {"role": "assistant", "content": " ".join(words[(i * 3 + t) % 5:(i * 3 + t) % 5 + 8])})]
                     for i in range(count)]
    one = ChatTokens(tok, tok.chat_template, mask_prompt=True)
    print(f"load average at start: {os.getloadavg()[0]:.2f}; {count} conversations of 7 messages (3 assistant)")
    for name, fn in (("prefix renders (replaced)", lambda m: prefix_renders(tok, m)), ("one render (ChatTokens)", one)):
        fn(conversations[0])
        start = time.perf_counter()
        for messages in conversations:
            fn(messages)
        seconds = time.perf_counter() - start
        print(f"{name:<28} {seconds:6.2f} s  {count / seconds:8.0f} conversations/s")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
