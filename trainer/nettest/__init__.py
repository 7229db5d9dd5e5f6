"""The interconnect self-test, node side: ``node.py`` times the collectives and pairs of nodes;
``health.py`` reads GPU health counters; ``model.py`` the message size of the workload's model.

The launcher ships these files flat into one folder with ``trainer/wire``'s ``nettest_pairs.py`` and
``nettest_budget.py`` (``launcher.nettest.launch.NODE_FILES``), so the test runs where the trainer is not
installed: standard library and torch only, and ``trainer.wire`` when imported as a package.
"""
