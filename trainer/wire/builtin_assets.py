"""The built-in model and dataset names (``builtin:tiny-llama``, ...), which ``trainer/assets.py`` makes or
ships, and the editor offers. Torch-free: the names without the means to build them."""

from __future__ import annotations

PREFIX = "builtin:"
MODELS: dict[str, str] = {
    "tiny-llama": "a tiny Llama-shaped model built locally (0.24M parameters; from_scratch: true)",
    "small-llama": "a small Llama-shaped model built locally (~13M parameters; from_scratch: true)",
}
"""Built-in models by name (after ``builtin:``), each with a line on what it is."""
DATASETS: dict[str, str] = {
    "tiny-alpaca": "2,400 alpaca rows shipped with the trainer",
}
"""Built-in datasets by name (after ``builtin:``)."""
