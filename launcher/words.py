"""How counts read in every message of the app, the CLI and the docs: ``1 node``, ``2 nodes``, ``0 runs``.

One rule, in one place: a count names its noun in the singular for exactly one, else the plural
(``tests/foundation/test_words.py`` finds any message that writes ``node(s)`` or puts a count before a
plural noun by hand)."""

from __future__ import annotations

IRREGULAR = {"process": "processes", "entry": "entries", "retry": "retries", "GPU": "GPUs", "index": "indexes",
             "resubmission": "resubmissions", "match": "matches", "mistake": "mistakes"}


def plural(count: int, noun: str, many: str | None = None) -> str:
    """``plural(1, "node")`` -> ``1 node``; ``plural(3, "node")`` -> ``3 nodes``; thousands separated
    (``12,000 lines``). ``many``: the plural where adding ``s`` is wrong."""
    return f"{count:,} {noun if count == 1 else many or plural_of(noun)}"


def plural_of(noun: str) -> str:
    """The noun's plural: the irregular ones above, ``-y`` -> ``-ies``, ``-s``/``-x``/``-ch`` -> ``-es``."""
    head, _, last = noun.rpartition(" ")
    prefix = f"{head} " if head else ""
    if last in IRREGULAR:
        return prefix + IRREGULAR[last]
    if last.endswith("y") and last[-2:-1] not in "aeiou":
        return prefix + last[:-1] + "ies"
    if last.endswith(("s", "x", "ch", "sh")):
        return prefix + last + "es"
    return prefix + last + "s"
