"""Under torchrun: the trainer's own entry (``trainer.__main__.main``) on each parameters file in turn, in
the same processes (the process group is made once and kept). Each refusal's exit message is printed as
``REFUSED <index> <rank> <message>``; the last file's refusal ends the process as ``python -m trainer``
ends (its message on stderr, exit code 1, without the interpreter's teardown).

    bad_data_worker.py PARAMS.yaml [PARAMS.yaml ...]
"""

import os
import sys

from trainer.__main__ import ended, main
from trainer.wire.startup import exit_without_teardown

*first, last = sys.argv[1:]
for index, path in enumerate(first):
    try:
        main([path])
    except SystemExit as exit_:
        sys.stdout.write(f"REFUSED {index} {os.environ['RANK']} {exit_.code}\n")  # one write: ranks share the pipe
    else:
        sys.stdout.write(f"TRAINED {index} {os.environ['RANK']}\n")
code = ended(lambda: main([last]))  # as `python -m trainer` ends: its message in one write, exit code 1
if code == 0:
    sys.stdout.write(f"TRAINED {len(first)} {os.environ['RANK']}\n")
exit_without_teardown(code)  # and without the interpreter's teardown
