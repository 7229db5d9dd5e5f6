"""The data of a run: examples into token rows, built the same way on every rank.

- ``dataset.py``: where the rows come from (a local file read with its lines, a saved folder, a hub name,
  the built-in ``tiny_alpaca.jsonl`` beside this file), split for evaluation, tokenized, summarised.
- ``rows.py``: tokenizing each format, prompt masking, packing, padding, and the resumable global order.
- ``chat.py``: a conversation tokenized from one render of its chat template; ``turns.py``: where each
  turn lies in that render (what an assistant writes, a tool result's block), found by rendering again.

May import: torch, transformers, datasets, ``trainer.wire`` and ``trainer.assets``.
"""
