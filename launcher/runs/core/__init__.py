"""What a run's owner and its readers share: the run store (SQLite), the record's file layout and its
plain readers (:mod:`.layout`), the ownership lock and the requests left for the owner
(:mod:`.ownership`), and the pure handling of a node's bytes (lines, the sanitizer, triage); the facts
both sides ask about a run: its checkpoints (:mod:`.checkpoints`), the last safe step, its GPU-hours
(:mod:`.usage`), the notifications sent (:mod:`.notifying`), the data dir's free space (:mod:`.space`);
the store rebuilt from the run folders (:mod:`.rebuild`) and an ``idempotency_token``'s claim; what the
model answered as it learned, decoded once (:mod:`.samples`).

It may import ``launcher.events``, ``launcher.paths``, ``launcher.secrets``, ``launcher.workload``,
``launcher.notify``, the Backend protocol and its registry, ``trainer.wire.protocol``; nothing else of
``launcher.runs`` (both sides build on it, so it must not lean on either).
"""
