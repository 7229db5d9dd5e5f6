"""The data of a run: examples into token rows, the same on every rank and for every world size.

- ``dataset.py``: a run's rows from the node's cache: each source tokenized once (``encode.py``, through
  ``datasets``' ``map`` over the node's cores) into a folder keyed by what decides its tokens
  (``token_cache.py``: one build per node under a lock, renamed into place whole), read back
  memory-mapped; which examples train, are held out or share a packed row (``token_rows.py``, packing
  on arrays in ``packing.py``); a mixture's sources side by side (``run_data.py``) in their shares
  (``mixture.py``). ``sources.py`` says where a source's rows are (a local file read with its lines, a
  saved folder, a hub name, a bucket object, the built-in ``tiny_alpaca.jsonl`` beside this file).
- ``streamed.py``, ``stream.py``, ``stream_sources.py``: the sources read as they are trained on, in
  windows tokenized and packed on the fly, with a position a checkpoint keeps.
- ``rows.py``: tokenizing each format, prompt masking, packing, padding, and the resumable global order;
  ``position.py``: where a run stands in its data (the part of the training state the order moves).
- ``chat.py``: a conversation tokenized from one render of its chat template; ``turns.py``: where each
  turn lies in that render (what an assistant writes, a tool result's block), found by rendering again.

May import: torch, transformers, datasets, ``trainer.wire`` and ``trainer.assets``.
"""
