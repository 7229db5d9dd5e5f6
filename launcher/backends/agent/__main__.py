"""``python agent.zip with-venv NODE_DIR``: the job's first step when it has dependencies.

(The serve loop starts through the boot script instead, which installs the zip it reads from stdin.)
"""

from __future__ import annotations

import sys


def _main(argv: list) -> int:
    if len(argv) == 2 and argv[0] == "with-venv":
        from .venv import with_venv

        return with_venv(argv[1])
    print("usage: agent.zip with-venv NODE_DIR", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
