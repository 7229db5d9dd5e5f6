"""LoRA: adapters through PEFT and what they add to a run; the run's adaptation as one component.

- ``adaptation.py``: what trains of the model, one component the job asks without telling the cases apart:
  full fine-tuning (the null case), LoRA, QLoRA; chosen from the parameters or a checkpoint's ``meta.json``.
- ``adapters.py``: PEFT on the skeleton before sharding, adapters-only state in checkpoints.
- ``export.py``: the PEFT-format and merged exports, in the job and from a checkpoint.
- ``qlora.py``: the 4-bit base through bitsandbytes.

May import: torch, peft, bitsandbytes, and every room below it (``wire``, ``model``, ``ckpt``).
"""
