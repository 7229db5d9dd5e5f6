"""The workload file: a superset of the Databricks ``air`` workload YAML.

Field shapes live here (where the job runs, :class:`Compute`, :class:`Slurm` and :class:`Ssh`, in
:mod:`launcher.workload.machines`); rules that span fields live in :mod:`launcher.workload.checks`, so that
one pass reports every problem at once.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import ConfigDict, Field, field_validator

from launcher.workload.air_fields import DockerImage, GitRef, Permission, Schedule
from launcher.workload.hosts import refuse_control
from launcher.workload.idle import IdlePolicy
from launcher.workload.machines import Compute, Ssh
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


MAX_TIMEOUT_MINUTES = 366 * 24 * 60
"""The longest ``timeout_minutes``: far past any run, short of what a launch could not hold (the counts'
ranges are :mod:`launcher.workload.machines`')."""


class _Model(WordsAsWritten):
    # No infinity or NaN in any number: no key has a use for one, and a node would refuse it late.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


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
