"""The interconnect self-test (``fsdp-tui nettest``): launched as a run of the workload, judged here."""
