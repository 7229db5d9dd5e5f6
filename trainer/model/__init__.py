"""The model: a Hugging Face causal LM built without weights, sharded, then filled.

- ``source.py``: the model's and tokenizer's names resolved once into what ``from_pretrained`` reads.
- ``build.py``: the tokenizer, the model's config, the skeleton filled shard by shard (the base's weights
  met by name: full fine-tuning's ``BaseWeights``, or LoRA's adapters), activation checkpointing,
  compile; ``loading.py``: each rank's shards read from the weight files.
- ``attention.py``: which attention a run uses; ``packed_masks.py`` the packed rows' masks (per layer type,
  with sliding windows); ``packed_sdpa.py`` packed rows on CPU, one example at a time.
- ``learned_logits.py``: the output layer on learned positions only; ``router_loss.py``: a mixture of
  experts' router loss.

May import: torch, transformers, ``trainer.wire`` and ``trainer.assets``; never the loop, checkpoints or
LoRA (they build on this room).
"""
