"""``environment.docker_image``: the workload's command runs inside the image on every node, with the
node's run directory mounted at the same path, the host's network and IPC (torchrun's rendezvous and
NCCL need both), the node's GPUs, and the run's environment passed by name (values, secrets included,
never on a command line). docker or podman, whichever the node has."""

from __future__ import annotations

import shlex
from collections.abc import Iterable

from launcher.workload.model import Workload

_FIND_RUNTIME = (
    'rt=$(command -v docker || command -v podman) || { echo "fsdp-tui: environment.docker_image needs docker '
    'or podman on this node; install one, or remove docker_image" >&2; exit 127; }'
)


def container_script(w: Workload, env_names: Iterable[str], *, gpus: bool) -> str:
    """The ``bash -c`` text that runs ``w.command`` in ``w.environment.docker_image`` on a node."""
    image = w.environment.docker_image
    assert image is not None and w.command is not None
    names = " ".join(f"-e {shlex.quote(n)}" for n in sorted(set(env_names)))
    pull = "--pull always" if image.tag_policy == "latest" else "--pull missing"
    lines = [_FIND_RUNTIME]
    if gpus:
        lines.append('case "${rt##*/}" in podman) gpus="--device nvidia.com/gpu=all";; *) gpus="--gpus all";; esac')
    lines.append(
        f'exec "$rt" run --rm --init {pull} --name "fsdp-tui-$FSDP_TUI_RUN_ID-$NODE_RANK" '
        f'--network host --ipc host{" $gpus" if gpus else ""} -v "$PWD:$PWD" -w "$PWD" {names} '
        f"{shlex.quote(image.url)} bash -c {shlex.quote(w.command)}")
    return "\n".join(lines) + "\n"
