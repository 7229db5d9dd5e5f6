"""Runs: each launch has one owner, a detached supervisor process that alone writes the run's records;
the app and the headless commands follow those records."""
