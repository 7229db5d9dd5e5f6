"""The fsdp-tui terminal app."""

import os

# Textual draws a frame at its next timer tick after a change (60 a second by default), so a key waits up
# to a whole tick before its frame even begins. At 120 the wait halves (key-to-screen p50 7-10 ms lower
# while 64 nodes stream, BENCHMARKS.md); frames are still drawn only when something changed. Set before
# Textual is first imported (it reads the variable then); a user's own TEXTUAL_FPS wins.
os.environ.setdefault("TEXTUAL_FPS", "120")
