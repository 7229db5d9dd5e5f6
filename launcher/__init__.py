"""The operator-side core: workload files, plans, launches and run records. No Textual, no torch."""
