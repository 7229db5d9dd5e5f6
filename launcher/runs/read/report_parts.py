"""The typed parts of a run's report (:class:`~launcher.runs.read.report.RunReport`) that are not the core's
own types already: where its MLflow run is, the checkpoint it started from, the newest interconnect test
of its nodes, what it trained on. Each writes the JSON ``fsdp-tui show --json`` prints (``to_dict``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from trainer.wire.protocol import DataSummary, mix_words


@dataclass(frozen=True)
class MlflowLink:
    """The run's MLflow run and how to see it; ``unsent``: what is not sent yet and how to send it now."""

    run_id: str | None
    """``None`` while its owner has opened none (something is unsent)."""
    experiment: str
    tracking_uri: str
    ui_command: str
    """``mlflow ui --backend-store-uri URI``."""
    unsent: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ResumedFrom:
    """The checkpoint a run started from (``parameters.checkpoint.resume``, or the one ``resume: auto`` found)
    and, when known, the run that wrote it."""

    path: str
    step: int | None
    run_id: str | None
    auto: bool | None = None
    """``resume: auto`` found it (``None``: the launch recorded no continuation, only the path)."""

    def words(self) -> str:
        """``step 4 of run R: PATH`` (and how it was found), as ``show`` says it."""
        step = f"step {self.step} of " if self.step is not None else ""
        source = f"{step}run {self.run_id}" if self.run_id else f"{step}a checkpoint"
        how = " (parameters.checkpoint.resume: auto found it)" if self.auto else ""
        return f"from {source}: {self.path}{how}"

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        if self.auto is None:
            del data["auto"]
        return data


@dataclass(frozen=True)
class NettestSeen:
    """The newest kept interconnect test of a run's nodes, in one line."""

    run_id: str
    started_at: float | None
    verdict: str
    """The verdict's first line."""
    all_gather_busbw: float | None
    """The whole world's all-gather bus bandwidth (bytes/s) at its largest size."""
    summary: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class DataSeen:
    """What a run trained on: its trainer's ``data`` record and, for a mixture, the rows each source gave
    up to the newest step that said (in the order of ``summary.sources``)."""

    summary: DataSummary
    mix_rows: tuple[int, ...] = ()

    def words(self) -> str:
        """``1200 examples (alpaca), 37 cut at max_seq_len 512 (5,120 tokens lost)``."""
        return self.summary.words()

    @property
    def mix(self) -> str:
        """A mixture's realised share of each source against its weight, in words (empty: one source)."""
        return mix_words(self.summary.sources, self.mix_rows) if self.summary.sources else ""

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self.summary), "sources": [asdict(s) for s in self.summary.sources], "text": self.words(),
                "mix": self.mix, "mix_rows": list(self.mix_rows)}
