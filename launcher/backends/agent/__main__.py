"""``python agent.zip with-venv NODE_DIR``: the job's first step when it has dependencies;
``python agent.zip slurm-task ATTEMPT``: a SLURM job's task on each node (in the run directory).

(The serve loop starts through the boot script instead, which installs the zip it reads from stdin.)
"""

from __future__ import annotations

import sys


def _main(argv: list) -> int:
    if len(argv) == 2 and argv[0] == "with-venv":
        from .venv import with_venv

        return with_venv(argv[1])
    if len(argv) == 2 and argv[0] == "slurm-task" and argv[1].isdigit():
        import os

        from .slurm_task import task

        return task(int(argv[1]), os.path.abspath(sys.argv[0]))
    print("usage: agent.zip with-venv NODE_DIR | agent.zip slurm-task ATTEMPT", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
