"""How the launcher reaches nodes: one small typed protocol (``base.Backend``) and one folder per way."""
