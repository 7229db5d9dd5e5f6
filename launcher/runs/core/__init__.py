"""What a run's owner and its readers share: the run store (SQLite), the record's file layout and its
plain readers (:mod:`.layout`), the ownership lock and the requests left for the owner
(:mod:`.ownership`), and the pure handling of a node's bytes (lines, the sanitizer, triage).

It may import ``launcher.events``, ``launcher.paths``, ``launcher.workload``, ``trainer.protocol``; nothing
else of ``launcher.runs`` (both sides build on it, so it must not lean on either).
"""
