"""The shapes of the ``air`` workload fields that exist for Databricks' own service or for reproducible
launches (upstream: the Databricks CLI's ``experimental/air`` run config). An ``air`` file validates here
unchanged; what has a meaning outside Databricks is honoured, the rest is accepted with a warning."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from trainer.wire.yaml_words import WordsAsWritten


class _Model(WordsAsWritten):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Permission(_Model):
    """A grant on the Databricks run (``air``): exactly one principal and a level. Ignored here."""

    user_name: str | None = None
    """Grant to this user (an email)."""
    group_name: str | None = None
    """Grant to this group."""
    service_principal_name: str | None = None
    """Grant to this service principal."""
    level: str
    """``CAN_VIEW``, ``CAN_MANAGE``, ..."""


class Schedule(_Model):
    """A recurring launch as Databricks runs it (a Quartz cron expression). fsdp-tui does not schedule:
    validation prints the crontab line that would run the workload on this schedule."""

    quartz_cron_expression: str
    """Quartz cron: seconds, minutes, hours, day of month, month, day of week (1 = Sunday), optional year;
    e.g. ``0 0 9 * * ?`` (daily at 9:00)."""
    timezone_id: str
    """The time zone the expression is read in, e.g. ``UTC`` or ``Europe/Berlin``."""
    pause_status: Literal["PAUSED", "UNPAUSED"] | None = None
    """Whether the schedule starts paused."""


class DockerImage(_Model):
    """The command runs inside this image on every node (docker or podman there); the image pins the
    whole runtime, so ``environment.dependencies`` and ``version`` are not allowed beside it."""

    url: str = Field(min_length=1)
    """Fully qualified image, e.g. ``nvcr.io/nvidia/pytorch:25.01-py3``."""
    tag_policy: Literal["auto", "latest"] | None = None
    """``latest``: pull the tag again before every launch; ``auto`` (default): use the node's copy if it
    has one."""
    credentials_scope: str | None = None
    """Secret scope of the registry credentials (``air``; with ``tag_policy: latest`` only)."""
    credentials_key: str | None = None
    """Secret key of the registry credentials, paired with ``credentials_scope``."""


class GitRef(_Model):
    """Snapshot the folder as committed at this branch or commit instead of as it is on disk."""

    branch: str | None = None
    """A local branch: its newest commit is what ships."""
    commit: str | None = None
    """A commit (hash, tag or any revision git understands)."""
    remote: bool | str = False
    """Take the branch (or commit) from the clone's remote, as ``air`` does: ``true`` (the branch's upstream
    remote, else ``origin``) or a remote's name. It is fetched when the run is launched, and what the remote
    has is what ships (commits not pushed do not)."""
