"""Headless subcommands of ``fsdp-tui``: one module each, with ``register`` and ``run``.

Modules keep imports light at the top: ``fsdp-tui --help`` imports all of them.
"""
