"""A run's owner started ahead of its run: ``python -m launcher.runs.owner.warm FD``.

:class:`launcher.runs.core.ownership.WarmOwner` starts it while a launch checks the nodes. It imports the
supervisor, then waits on the socket ``FD`` for the run: its arguments, the run's lock and its log file (as
descriptors), and goes on as the supervisor would have started (``launcher.runs.owner.supervisor``). When
the launch was refused (the socket closes with nothing on it), it leaves without a trace.
"""

from __future__ import annotations

import json
import os
import socket
import sys


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    sock = socket.socket(fileno=int(args[0]))
    from launcher.runs.owner import supervisor  # the imports, done while the launch checks the nodes

    try:
        message, fds, _flags, _address = socket.recv_fds(sock, 1 << 16, 2)
    except OSError:
        return 0
    if not message or len(fds) != 2:
        for fd in fds:
            os.close(fd)
        return 0  # no run came: the launch was refused or gave up
    lock_fd, log_fd = fds
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.close(log_fd)
    run_args = json.loads(message.decode())
    try:
        sock.sendall(b"taken")
    except OSError:
        return 0  # the launch did not hear it: it starts an owner of its own, still holding the lock
    sock.close()
    return supervisor.main(["--lock-fd", str(lock_fd), *run_args])


if __name__ == "__main__":
    sys.exit(main())
