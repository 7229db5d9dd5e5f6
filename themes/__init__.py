"""Built-in themes, as data."""
