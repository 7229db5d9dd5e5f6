"""Where a workload's job runs: the compute (how many processes, on which machines, node 0's address), a
SLURM cluster's batch job, and the SSH settings on top of ``~/.ssh/config``. Sections of
:class:`launcher.workload.model.Workload`."""

from __future__ import annotations

import re

from pydantic import ConfigDict, Field, ValidationInfo, field_validator, model_serializer

from launcher.workload.hosts import check_jump, check_option_value, check_user
from trainer.wire.yaml_words import WordsAsWritten

MAX_NUM_NODES = 100_000
MAX_GPUS_PER_NODE = 64
MAX_PROCS_PER_NODE = 1024
"""Ranges of the counts a workload gives: far past any machine, short of what a launch could not hold."""


_NOT_IN_SBATCH_VALUE = re.compile(r"[\s\x00-\x1f\x7f-\x9f]")


def sbatch_value_problem(value: str) -> str | None:
    """Why ``value`` cannot follow ``#SBATCH --name=`` (``None``: it can): one word, no whitespace or
    control character (a newline would end the ``#SBATCH`` line and run the rest as a shell command)."""
    if not value:
        return "empty: leave the key out for the cluster's default"
    bad = _NOT_IN_SBATCH_VALUE.search(value)
    if bad:
        return (f"{bad.group()!r} at position {bad.start() + 1}: a SLURM name is one word with no whitespace "
                "or control characters (several partitions or features are separated by commas)")
    return None


class _Model(WordsAsWritten):
    # No infinity or NaN in any number: no key has a use for one, and a node would refuse it late.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Slurm(_Model):
    """A SLURM cluster: one batch job per attempt, one task per node, submitted through the login node."""

    login: str = "local"
    """The login node as an SSH target (an ``~/.ssh/config`` alias, ``user@host``, ``host:port``), or
    ``local`` when fsdp-tui runs on the login node itself."""
    partition: str | None = None
    """``--partition`` (default: the cluster's default partition)."""
    account: str | None = None
    """``--account`` to charge."""
    qos: str | None = None
    """``--qos``."""
    time: str | int | None = None
    """``--time``: minutes, or ``MM:SS``, ``HH:MM:SS``, ``D-HH``, ``D-HH:MM``, ``D-HH:MM:SS`` (default:
    ``timeout_minutes``, else the partition's limit)."""
    nodes: int | None = Field(default=None, ge=1, le=MAX_NUM_NODES)
    """``--nodes`` (default: from ``num_accelerators`` and the GPUs per node)."""
    gpus_per_node: int | None = Field(default=None, ge=1, le=MAX_GPUS_PER_NODE)
    """``--gpus-per-node`` (default: the GPUs per node of ``accelerator_type`` / ``gpus_per_node``)."""
    constraint: str | None = None
    """``--constraint``, e.g. ``a100&ib``."""
    exclusive: bool = False
    """``--exclusive``: no other job shares the nodes."""
    exclude: list[str] = Field(default_factory=list)
    """``--exclude``: nodes no job of the run may get (``recovery`` adds a node that failed, so the next job
    gets a replacement)."""
    extra_sbatch: list[str] = Field(default_factory=list)
    """More ``#SBATCH`` lines as written after ``#SBATCH`` (``--mail-type=END``); options only, no shell."""
    job_dir: str = Field(default="~/.fsdp-tui/slurm", min_length=1)
    """A folder on the filesystem the login and compute nodes share: each run's code, parameters, logs
    and metrics live in ``<job_dir>/<run id>/``."""
    signal_lead_s: int = Field(default=120, ge=10, le=3600)
    """Seconds before the time limit when the built-in trainer saves a checkpoint and stops, so the job
    resubmitted after it resumes from there."""
    max_resubmits: int = Field(default=10, ge=0, le=1000)
    """Resubmissions after a time limit or preemption that left a checkpoint (not counted as retries)."""
    requeue: bool = False
    """Let SLURM requeue the job (after NODE_FAIL, a preemption or ``scontrol requeue``). Off, jobs are
    submitted ``--no-requeue``: a restarted job would otherwise run again under the same attempt. On, each
    requeue is a new attempt of the run, kept apart, and the built-in trainer resumes from its newest
    complete checkpoint."""

    @field_validator("partition", "account", "qos", "constraint")
    @classmethod
    def _one_word(cls, value: str | None) -> str | None:
        # Each becomes `#SBATCH --name=value`: a newline there would end the line and start a shell command.
        if value is not None:
            why = sbatch_value_problem(value)
            if why:
                raise ValueError(why)
        return value

    @field_validator("exclude")
    @classmethod
    def _node_names(cls, value: list[str]) -> list[str]:
        for name in value:  # joined into `#SBATCH --exclude=a,b`: one word each, no comma of its own
            why = sbatch_value_problem(name) or ("a comma: list one node per entry" if "," in name else None)
            if why:
                raise ValueError(f"{name!r}: {why}")
        return value


class Compute(_Model):
    """How many processes run, and on which machines."""

    num_accelerators: int | None = Field(default=None, ge=1, le=MAX_NUM_NODES * MAX_GPUS_PER_NODE)
    """Total GPUs (or CPU processes) over all nodes; a multiple of the per-node count."""
    accelerator_type: str | None = None
    """``GPU_<N>x<MODEL>`` as ``air`` writes it (``GPU_8xH100``: 8 per node), or ``CPU``."""
    gpus_per_node: int | None = Field(default=None, ge=1, le=MAX_GPUS_PER_NODE)
    """GPUs per node, when ``accelerator_type`` does not say."""
    procs_per_node: int | None = Field(default=None, ge=1, le=MAX_PROCS_PER_NODE)
    """Processes per node for CPU runs (gloo)."""
    hosts: list[str] = Field(default_factory=list)
    """SSH targets, one per node: ``alias``, ``user@host``, ``host:port`` or ``localhost``. Left out: this machine, no SSH."""
    spares: list[str] = Field(default_factory=list)
    """SSH targets kept in reserve, written like ``hosts``: when a run fails and its triage names a node
    (lost, cut off, its processes killed, its GPU gone), the run's owner checks a spare with the doctor and
    puts it in that node's place (``recovery``). A SLURM run has none: the scheduler picks the replacement."""
    master_addr: str | None = None
    """Address of node 0 as the other nodes reach it (default: node 0's host)."""
    master_port: int | None = Field(default=None, ge=1024, le=65535)
    """Rendezvous port on node 0 (default 29500, checked free at launch; a run on this machine alone takes
    a free port the system picks at launch, as two runs started at once would both find 29500 free)."""
    slurm: Slurm | None = None
    """Submit to a SLURM cluster through its login node instead of reaching ``hosts`` over SSH."""

    @field_validator("master_addr")
    @classmethod
    def _address(cls, value: str | None) -> str | None:
        if value is not None:
            check_option_value(value, "master_addr")
        return value
    node_pool_id: str | None = None
    """Databricks node pool (older ``air`` files); ignored here."""
    pool_name: str | None = None
    """Databricks node pool by name (older ``air`` files); ignored here."""


class Ssh(_Model):
    """Connection settings on top of ``~/.ssh/config`` (which OpenSSH's ``ssh -G`` reads): each one wins over
    the config only where it is set. Host keys are always verified."""

    user: str | None = None
    """Login user for hosts that do not name one."""
    port: int | None = Field(default=None, ge=1, le=65535)
    """SSH port for hosts that do not name one."""
    identity_file: str | None = None
    """Private key file (``~`` expands)."""
    proxy_jump: str | None = None
    """Jump host, verified like any other host."""
    known_hosts: str | None = None
    """known_hosts file to verify against and ``trust`` writes to (default: the config's
    ``UserKnownHostsFile``, else ``~/.ssh/known_hosts``)."""
    connect_timeout_s: float = Field(default=10.0, gt=0, le=600)
    """Give up connecting to a node after this long (not set: the config's ``ConnectTimeout``, else 10)."""
    keepalive_interval_s: float = Field(default=5.0, gt=0, le=3600)
    """Send an SSH keepalive this often, so dead connections are noticed (not set: the config's
    ``ServerAliveInterval``, else 5)."""
    keepalive_count_max: int = Field(default=3, ge=1, le=100)
    """Unanswered keepalives in a row after which a connection is dead: a host that hangs (its sshd stopped,
    its network gone) is noticed after ``keepalive_interval_s * keepalive_count_max`` (15 s by default) and
    reconnects start; ``lost_after_s`` later the node is lost."""
    lost_after_s: float = Field(default=120.0, gt=0, le=86400)
    """A node whose connection stays away this long is lost: the run fails, naming it."""
    remote_root: str = Field(default="~/.fsdp-tui", min_length=1)
    """Folder on every node for run directories (``runs/``) and dependency venvs (``venvs/``)."""

    @field_validator("user")
    @classmethod
    def _login_name(cls, value: str | None) -> str | None:
        if value is not None:
            check_user(value)
        return value

    @field_validator("proxy_jump")
    @classmethod
    def _jump_hosts(cls, value: str | None) -> str | None:
        if value is not None:
            check_jump(value)
        return value

    @field_validator("identity_file", "known_hosts", "remote_root")
    @classmethod
    def _one_line_path(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None:
            check_option_value(value, (info.field_name or "").replace("_", " "))
        return value

    @model_serializer(mode="wrap")
    def _unset_stays_unset(self, handler):
        """A saved plan read back (a reattach, a relaunch) must leave unset what the workload left unset:
        the config's ``ConnectTimeout``/``ServerAlive*`` apply exactly there."""
        data = handler(self)
        for name in CONFIG_DEFAULTED:
            if name not in self.model_fields_set and isinstance(data, dict):
                data.pop(name, None)
        return data


CONFIG_DEFAULTED = ("connect_timeout_s", "keepalive_interval_s", "keepalive_count_max")
"""``Ssh`` keys the config supplies where the workload does not set them."""
