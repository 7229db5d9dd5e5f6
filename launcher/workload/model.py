"""The workload file: a superset of the Databricks ``air`` workload YAML.

Field shapes live here; rules that span fields live in :mod:`launcher.checks`, so that one pass
reports every problem at once.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import ConfigDict, Field, ValidationInfo, field_validator, model_serializer

from launcher.workload.air_fields import DockerImage, GitRef, Permission, Schedule
from launcher.workload.hosts import check_jump, check_option_value, check_user, refuse_control
from launcher.workload.idle import IdlePolicy
from launcher.workload.notify import Notify
from trainer.wire.yaml_words import WordsAsWritten

EXPERIMENT_NAME = r"^[A-Za-z0-9_-]{1,100}$"
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
SECRET_REF = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+\Z")
DEFAULT_METRICS_PATTERN = (
    r"(?i)\bstep[=:\s]+(?P<step>\d+)(?:\s*/\s*(?P<max_steps>\d+))?.*?\bloss[=:\s]+(?P<loss>[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|nan|inf))"
)
"""Understands progress lines such as ``step=12/100 loss=1.2345`` (the ``air`` recipe's)."""
# Variables the launcher sets on every node; a workload may not set them itself.
RESERVED_ENV = (
    "NUM_NODES", "NODE_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "CODE_SOURCE_PATH",
    "HYPERPARAMETERS_PATH", "FSDP_TUI_RUN_ID", "FSDP_TUI_METRICS_FILE",
)


MAX_NUM_NODES = 100_000
MAX_GPUS_PER_NODE = 64
MAX_PROCS_PER_NODE = 1024
MAX_TIMEOUT_MINUTES = 366 * 24 * 60
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
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, frozen=True, allow_inf_nan=False)


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


class Environment(_Model):
    """The Python environment on the nodes."""

    version: str | int | None = None
    """``air`` client image version; accepted for compatibility, not used."""
    python: str = "python3"
    """Interpreter on the nodes; its bin dir goes first on PATH."""
    dependencies: list[str] | str = Field(default_factory=list)
    """pip requirement strings installed into a venv on each node, cached by their hash; or the path of a
    requirements file (relative to the workload file), read when the run is planned."""
    docker_image: DockerImage | None = None
    """Run the command inside this container image on every node (needs docker or podman there)."""


class Eject(_Model):
    """What ``fsdp-tui eject`` renders for an engine that starts its own image (Kubeflow, a JobSet,
    SkyPilot): nothing of your machines goes there."""

    python: str = Field(default="python", min_length=1)
    """The interpreter in that image (its ``python`` on PATH by default). ``environment.python`` names one on
    your own nodes and is never carried into an image."""

    @field_validator("python")
    @classmethod
    def _one_line(cls, value: str) -> str:
        refuse_control(value, "an interpreter")
        return value


class Snapshot(_Model):
    root_path: str = "."
    """Folder to upload, relative to the workload file."""
    exclude: list[str] = Field(default_factory=lambda: [".git", "__pycache__", "*.pyc", ".venv"])
    """Glob patterns left out of the upload."""
    include_paths: list[str] | None = None
    """Only these files and folders (relative to ``root_path``, no ``..``) are uploaded."""
    git: GitRef | None = None
    """Upload the folder as committed at ``branch`` or ``commit`` (reproducible from the commit)."""
    remote_volume: str | None = None
    """Databricks volume the archive is uploaded to (``/Volumes/...``); ignored here."""


class CodeSource(_Model):
    """Code uploaded to every node; ``CODE_SOURCE_PATH`` points at it there."""

    type: Literal["snapshot"] = "snapshot"
    """Only ``snapshot`` (upload a local folder) is supported."""
    snapshot: Snapshot = Field(default_factory=Snapshot)


class Mlflow(_Model):
    """Where the launcher logs this launch as one MLflow run."""

    enabled: bool = True
    """Log to MLflow at all."""
    tracking_uri: str | None = None
    """Tracking store (default: a local SQLite database in the data dir)."""
    experiment: str | None = None
    """MLflow experiment (default: ``experiment_name``)."""
    run_name: str | None = None
    """MLflow run name (default: the run id)."""


class Metrics(_Model):
    """How progress is read (from log lines, for scripts that do not use ``trainer.wire.reporter``) and watched."""

    pattern: str = DEFAULT_METRICS_PATTERN
    """Regex for log lines with named groups: ``step`` (required), ``max_steps``, ``loss``, ``lr``,
    ``eval_loss``, ``tokens_per_s``, ``grad_norm``."""
    from_logs: bool = True
    """Turn matching log lines of node 0 into metrics when no reporter file is written."""
    stall_factor: float = Field(default=10.0, gt=1, le=1000)
    """Flag the run as stalled when no step came for this many times its median step time..."""
    stall_min_s: float = Field(default=120.0, gt=0, le=86400)
    """...and at least this long (start-up, evaluation and checkpoints take longer than a step)."""

    idle_policy: IdlePolicy = Field(default_factory=IdlePolicy)
    """When GPUs that sit idle while the run runs are flagged, and whether the run is stopped then."""


class Sweep(_Model):
    """Variants of this workload, each launched as a run of its own (``fsdp-tui sweep FILE``)."""

    grid: dict[str, list[Any]] = Field(default_factory=dict)
    """Dotted key path (as for ``--set``) to the values to try; every combination is a variant."""
    variants: list[dict[str, Any]] = Field(default_factory=list)
    """Override sets (key path to value), one variant each; combined with every ``grid`` point."""
    parallel: int = Field(default=1, ge=1, le=64)
    """Variants running at once (each with its own nodes' worth of processes)."""
    on_failure: Literal["continue", "stop"] = "continue"
    """After a failed variant: go on with the rest, or skip them."""
    share_output_dir: bool = False
    """Let variants with the same fixed ``parameters.output_dir`` share it (each then resumes from the
    newest checkpoint the others left there). Unset, each variant writes to ``<output_dir>/$FSDP_TUI_RUN_ID``
    (a relative ``output_dir`` or one with ``$FSDP_TUI_RUN_ID`` is per run already)."""


DEFAULT_SWAPS = 2
"""Swaps a run on SSH hosts may make when ``recovery.max_swaps`` is not set."""


class Recovery(_Model):
    """What the run's owner does, unattended, when a node fails: a spare in its place, or the run goes on
    without it (``shrink``). A failure that names no node (the code, a value, NaN) keeps ``max_retries``."""

    max_swaps: int | None = Field(default=None, ge=0, le=100)
    """Nodes replaced at most in one run (by a spare, an excluded SLURM node, or a node dropped with
    ``shrink``); not counted as retries. Default: 2 on SSH hosts (where spares are listed, or ``shrink`` is
    on); a SLURM run replaces a failed node only when it is set. 0: a failed node fails the run as before."""
    quarantine_after: int = Field(default=2, ge=1, le=100)
    """A host named as the failed node (or failing the doctor as a spare) this many times, over the runs of
    this data dir, is quarantined: no run takes it as a spare and a launch on it is refused until
    ``fsdp-tui quarantine lift HOST``."""
    shrink: bool = False
    """With no spare left, go on without the failed node: the run resumes resharded on the nodes left, its
    global batch kept by gradient accumulation (so the loss curve stays comparable)."""

    def allowed(self, slurm: bool) -> int:
        """Swaps allowed in one run: ``max_swaps`` as set, else :data:`DEFAULT_SWAPS` (none on SLURM)."""
        if self.max_swaps is not None:
            return self.max_swaps
        return 0 if slurm else DEFAULT_SWAPS


class Workload(_Model):
    """One workload file."""

    experiment_name: str = Field(pattern=EXPERIMENT_NAME)
    """Name of the experiment (also the MLflow experiment): letters, digits, ``_`` and ``-``."""
    compute: Compute = Field(default_factory=Compute)
    ssh: Ssh = Field(default_factory=Ssh)
    environment: Environment = Field(default_factory=Environment)
    code_source: CodeSource | None = None
    command: str | None = None
    """Shell text run once per node; omitted: the built-in trainer runs under ``torchrun``."""
    env_variables: dict[str, str] = Field(
        default_factory=dict,
        json_schema_extra={"additionalProperties": {"type": ["string", "number"]}},
    )
    """Extra environment on every node (numbers are written as text)."""
    secrets: dict[str, str] = Field(default_factory=dict)
    """``NAME: scope/key``; values come from the local secret store, never from this file."""
    max_retries: int = Field(default=0, ge=0, le=100)
    """Relaunches after a failure (ours defaults to 0; ``air``'s to 3)."""
    recovery: Recovery = Field(default_factory=Recovery)
    """When a node fails: spares (``compute.spares``) swapped in, or the run shrunk, unattended."""
    timeout_minutes: float | None = Field(default=None, gt=0, le=MAX_TIMEOUT_MINUTES)
    """Stop the run after this long."""
    parameters: dict[str, Any] = Field(default_factory=dict)
    """Written to a YAML file on each node (``HYPERPARAMETERS_PATH``); the built-in trainer's schema
    applies when ``command`` is omitted."""
    mlflow: Mlflow = Field(default_factory=Mlflow)
    metrics: Metrics = Field(default_factory=Metrics)
    sweep: Sweep | None = None
    """Variants to compare (``fsdp-tui sweep``); ``fsdp-tui run`` launches the workload as written."""
    idempotency_token: str | None = None
    """A second launch with the same token (up to 64 characters) answers with the first run instead of
    launching again."""
    mlflow_run_name: str | None = None
    """The MLflow run's name (``air``'s spelling of ``mlflow.run_name``)."""
    mlflow_experiment_directory: str | None = None
    """Databricks workspace folder of the MLflow experiment (``/Workspace/...``); ignored here."""
    mlflow_artifact_location: str | None = None
    """Databricks location of MLflow artifacts (``dbfs:/...``); ignored here."""
    permissions: list[Permission] | None = None
    """Who may view or manage the Databricks run; ignored here."""
    usage_policy_name: str | None = None
    """Databricks usage policy to bill, by name; ignored here."""
    usage_policy_id: str | None = None
    """Databricks usage policy to bill, by id (a UUID); ignored here."""
    schedule: Schedule | None = None
    """A recurring launch as Databricks runs it; here validation prints the crontab line that would."""

    notify: Notify | None = None
    """Who is told when the run ends, stalls or idles (default: the ``notify`` of the user settings)."""
    eject: Eject = Field(default_factory=Eject)
    """How ``fsdp-tui eject`` renders the workload for another engine (it changes nothing of a run)."""

    @field_validator("env_variables", mode="before")
    @classmethod
    def _scalars_as_text(cls, value: Any) -> Any:
        # `OMP_NUM_THREADS: 4` is what people write; environment values are text.
        if isinstance(value, dict):
            return {k: (str(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v)
                    for k, v in value.items()}
        return value

    @property
    def uses_builtin_trainer(self) -> bool:
        return self.command is None

    @property
    def swaps_allowed(self) -> int:
        """Failed nodes the run's owner may replace (``recovery.max_swaps``, or its default here)."""
        return self.recovery.allowed(self.compute.slurm is not None)

    @property
    def mlflow_name(self) -> str | None:
        """The MLflow run's name as written (``mlflow.run_name`` or ``air``'s ``mlflow_run_name``)."""
        return self.mlflow.run_name or self.mlflow_run_name
