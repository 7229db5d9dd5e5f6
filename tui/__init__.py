"""The fsdp-tui terminal app."""
