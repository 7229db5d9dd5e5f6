"""The door's rooms hand out the core's types, errors and constants without loading them at import: a front end
that imports a room for one name pays for the module that name lives in, on first use, and nothing else.
(Type checkers read each room's ``TYPE_CHECKING`` imports of the same names.)"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_names(room: str, homes: Mapping[str, tuple[str, ...]]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``room`` that loads each name of ``homes`` (module -> names) from its
    module on first use and keeps it in the room; ``"NEW=OLD"`` hands out the module's ``OLD`` as ``NEW``."""
    home_of = {name.split("=")[0]: (module, name.split("=")[-1]) for module, names in homes.items() for name in names}

    def __getattr__(name: str) -> Any:
        if name not in home_of:
            raise AttributeError(f"module {room!r} has no attribute {name!r}")
        module, original = home_of[name]
        value = getattr(importlib.import_module(module), original)
        setattr(importlib.import_module(room), name, value)
        return value

    return __getattr__
