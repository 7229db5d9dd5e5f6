"""Notifications of a run's end (and of a stall or idle GPUs), sent by the run's owner.

:mod:`.summary` builds the one-screen summary (pure), :mod:`.sinks` sends it one way each, and
:mod:`.deliver` tries every configured sink with retries and returns what happened to each, for the
run's record. Nothing here can change a run: every failure becomes a :class:`~.deliver.Delivery`.
"""
