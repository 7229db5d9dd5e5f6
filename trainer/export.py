"""Use a DCP checkpoint outside the distributed job: load it in one plain process, or export it.

    python -m trainer.export CHECKPOINT_DIR OUT_DIR [--merged | --merged-only]

A LoRA run's checkpoint holds the adapter only: it is exported in PEFT's format, and with ``--merged``
also merged into the base (``OUT_DIR-merged``), a folder ``from_pretrained`` loads; ``--merged-only``
writes the merged model alone, into ``OUT_DIR`` (the adapter was exported already). The checkpoint's own
adaptation exports it (:func:`trainer.lora.adaptation.of_checkpoint`).
"""

from __future__ import annotations

import sys
from pathlib import Path

from trainer.ckpt.inference import load_for_inference

__all__ = ["load_for_inference", "main"]


def main(argv: list[str]) -> int:
    only = "--merged-only" in argv
    merged = "--merged" in argv or only
    argv = [a for a in argv if a not in ("--merged", "--merged-only")]
    if len(argv) != 2:
        print("usage: python -m trainer.export CHECKPOINT_DIR OUT_DIR [--merged | --merged-only]", file=sys.stderr)
        return 2
    out = Path(argv[1]).expanduser()
    if out.exists():
        print(f"{out} exists: pick a new folder (exports never overwrite)", file=sys.stderr)
        return 1
    from trainer.lora import adaptation

    return adaptation.of_checkpoint(argv[0]).export_checkpoint(argv[0], out, merged, adapter=not only)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
