"""How counts and quantities read in every message of the app, the CLI and the docs: ``1 node``, ``2 nodes``,
``1:05:09``, ``1.5 GiB``, ``12.50 GB/s``, ``node 1 (h1)``.

One rule, in one place: a count names its noun in the singular for exactly one, else the plural
(``tests/foundation/test_words.py`` finds any message that writes ``node(s)`` or puts a count before a
plural noun by hand). The quantities here are the ones both the core (a report's text, an error) and the
front ends say; what only the front ends say is in :mod:`launcher.present`."""

from __future__ import annotations


def ascii_number(text: str) -> int | None:
    """``text`` as a number written in ASCII digits only, else ``None`` (``²`` and ``٣`` are digits to
    ``str.isdigit``, not here): the rule the trainer reads checkpoint steps by, handed to the front ends."""
    from trainer.wire.ckpt_layout import ascii_int

    return ascii_int(text)


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


def fmt_duration(seconds: float | None) -> str:
    """A run's elapsed time as a clock reads it: ``4:05``, ``1:05:09`` (whole seconds); ``-`` when unknown."""
    if seconds is None:
        return "-"
    seconds = int(seconds)
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def fmt_span(seconds: float | None) -> str:
    """A span in a sentence, short: ``45s``, ``1m05s``, ``2h03m`` (how long a run took in a notification, how
    old a checkpoint is); ``-`` when unknown. :func:`fmt_duration` is the clock a table column shows."""
    if seconds is None:
        return "-"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def fmt_age(seconds: float | None) -> str:
    """How long ago: ``1m15s ago``; ``age unknown``."""
    return "age unknown" if seconds is None else f"{fmt_span(seconds)} ago"


def fmt_bytes(n: int) -> str:
    """A size on disk in binary units with one decimal: ``1.5 GiB``, ``12.0 KiB``, ``512 B``."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def fmt_bandwidth(bytes_per_s: float) -> str:
    """A bandwidth in the unit people compare links in: decimal GB/s or MB/s (as nccl-tests prints GB/s)."""
    if bytes_per_s >= 1e9:
        return f"{bytes_per_s / 1e9:.2f} GB/s"
    return f"{bytes_per_s / 1e6:.1f} MB/s"


def fmt_message_size(nbytes: int) -> str:
    """A collective's message size as the sizes an interconnect test picks read: ``64 MiB``, ``0.5 KiB``."""
    if nbytes >= 1 << 30:
        return f"{nbytes / (1 << 30):g} GiB"
    if nbytes >= 1 << 20:
        return f"{nbytes / (1 << 20):g} MiB"
    return f"{nbytes / 1024:g} KiB"


def node_name(rank: int, hosts: tuple[str, ...]) -> str:
    """A node by its rank and, where known, its host: ``node 1 (h1)``; ``node 5`` past the hosts given."""
    return node_at(rank, hosts[rank]) if 0 <= rank < len(hosts) else f"node {rank}"


def node_at(rank: object, host: object) -> str:
    """A node by its rank and host: ``node 1 (h1)``."""
    return f"node {rank} ({host})"
