"""Under torchrun: the trainer's own entry (``trainer.__main__.main``) on each parameters file in turn, in
the same processes (the process group is made once and kept). Each refusal's exit message is printed as
``REFUSED <index> <rank> <message>``; the last file's refusal ends the process as ``python -m trainer``
ends (its message on stderr, exit code 1, without the interpreter's teardown).

    bad_data_worker.py PARAMS.yaml [PARAMS.yaml ...]
"""

import os
import sys

from trainer.__main__ import exit_code, main, refusal_written
from trainer.wire.startup import exit_without_teardown

*first, last = sys.argv[1:]
for index, path in enumerate(first):
    try:
        main([path])
    except SystemExit as exit_:
        sys.stdout.write(f"REFUSED {index} {os.environ['RANK']} {exit_.code}\n")  # one write: ranks share the pipe
    else:
        sys.stdout.write(f"TRAINED {index} {os.environ['RANK']}\n")
try:  # as `python -m trainer` ends: its message in one write, exit code 1, no teardown
    with refusal_written():
        main([last])
except SystemExit as exit_:
    exit_without_teardown(exit_code(exit_))
sys.stdout.write(f"TRAINED {len(first)} {os.environ['RANK']}\n")
exit_without_teardown(0)
