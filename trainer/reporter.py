"""The metrics reporter for training scripts of your own, at the path the docs give them:
``from trainer.reporter import Reporter``. It lives with the shared vocabulary
(:mod:`trainer.wire.reporter`: stdlib only, no torch); this name is the stable one user scripts import."""

from trainer.wire.reporter import Reporter

__all__ = ["Reporter"]
