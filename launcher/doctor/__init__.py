"""Preflight for a workload: every node probed in parallel through its backend (``diagnose``), every
outcome judged purely (``judge``) and reported with what to do."""
