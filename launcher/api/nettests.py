"""Interconnect tests: a short torchrun job on exactly a workload's nodes that times the collectives FSDP
uses, names a slow node or link, burns in each GPU and reads its health counters. Every test is kept in the
data dir; here they come back as typed records, decoded once (:meth:`NettestRecord.from_wire`)."""

from __future__ import annotations

import builtins
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from launcher.api._lazy import lazy_names

if TYPE_CHECKING:
    from launcher.nettest.expect import Expectation
    from launcher.nettest.figures import Measured, Verdict, judge_pairs
    from launcher.nettest.health import GpuHealth, LinkState, NodeHealth
    from launcher.nettest.launch import Options, Outcome
    from launcher.nettest.report import rows
    from launcher.nettest.report import to_dict as to_json
    from launcher.workload.plan import RunPlan

__getattr__ = lazy_names(__name__, {
    "launcher.nettest.expect": ("Expectation",),
    "launcher.nettest.figures": ("Measured", "Verdict", "judge_pairs"),
    "launcher.nettest.health": ("GpuHealth", "LinkState", "NodeHealth"),
    "launcher.nettest.launch": ("Options", "Outcome"),
    "launcher.nettest.report": ("rows", "to_json=to_dict"),
})

__all__ = ["Deadlines", "Expectation", "GpuHealth", "Judged", "LinkState", "NodeHealth", "Measured", "NettestNotFound",
           "NettestRecord", "Nettests", "Options", "Outcome", "Verdict", "judge_pairs", "rows", "to_json"]


class NettestNotFound(LookupError):
    """No kept test, or more than one, matches what was asked; ``str()`` says which in one line."""


@dataclass(frozen=True)
class Deadlines:
    """The most each phase of a test may take, in seconds, in the order they run."""

    phases: tuple[tuple[str, float], ...]

    def to_dict(self) -> dict[str, float]:
        return dict(self.phases)


@dataclass(frozen=True)
class NettestRecord:
    """One kept test as its file says, decoded once: its figures (``None`` when there are none, or they do
    not parse), and why not."""

    run_id: str
    started_at: float | None
    state: str | None
    """The test run's last state (``succeeded``, ``failed``, ...); ``None`` in a record without one."""
    workload: str | None
    nodes: tuple[str, ...]
    """Each node's name, by node rank."""
    measured: Measured | None
    problems: tuple[str, ...]
    health: Mapping[int, NodeHealth] = field(default_factory=dict)
    """Each GPU node's health report, by node rank."""
    wall_s: float | None = None

    @classmethod
    def from_wire(cls, data: object) -> NettestRecord | None:
        """A test's kept file; ``None`` for one that is not a test's record."""
        from launcher.nettest.figures import BadResult, decode
        from launcher.nettest.health import health_by_node

        if not isinstance(data, dict) or not isinstance(data.get("run_id"), str):
            return None
        try:
            measured = decode(data.get("result"))
        except BadResult:
            measured = None
        started, wall = data.get("started_at"), data.get("wall_s")
        return cls(data["run_id"], started if isinstance(started, (int, float)) else None,
                   data["state"] if isinstance(data.get("state"), str) else None,
                   data["workload"] if isinstance(data.get("workload"), str) else None,
                   tuple(str(n) for n in data.get("nodes") or []), measured,
                   tuple(str(p) for p in data.get("problems") or []),
                   health_by_node(data.get("health")),
                   wall if isinstance(wall, (int, float)) else None)


@dataclass(frozen=True)
class Judged:
    """A test's figures judged: the slow node or link, the GPU burn-in and health in words, and (with a
    model size and a plan) what FSDP can expect at the measured bandwidth."""

    measured: Measured
    nodes: tuple[str, ...]
    verdict: Verdict
    burnin: tuple[str, ...]
    unhealthy: bool
    """A node's health counters need a look."""
    slow_gpu: bool
    expectation: Expectation | None
    health: Mapping[int, NodeHealth]

    @property
    def failed(self) -> bool:
        """Something is slow or unhealthy (``fsdp-tui nettest`` exits 1)."""
        return bool(self.verdict.findings or self.unhealthy or self.slow_gpu)

    def verdict_lines(self) -> list[str]:
        """The verdict in words, with the rule it applied: the core's, as ``--json`` writes them (its
        ``verdict.text``) and ``show`` says a run's newest test."""
        from launcher.nettest.report import verdict_lines

        return verdict_lines(self.verdict, self.nodes)

    def cut_lines(self) -> list[str]:
        """What ``--quick``'s time budget cut, size by size: the core's words, as ``--json`` writes them (each
        cut's ``text``)."""
        from launcher.nettest.report import cut_lines

        return cut_lines(self.measured, self.nodes)

    def figures_json(self) -> dict[str, Any]:
        """The figures for scripts (``--json``): bandwidths in bytes per second, times in seconds."""
        from launcher.nettest.report import to_dict

        return to_dict(self.measured, self.nodes, self.verdict)

    def extras_json(self) -> dict[str, Any]:
        """The burn-in and the FSDP expectation for scripts, where there are any."""
        data: dict[str, Any] = {}
        if self.burnin:
            data["burn_in"] = {"gemm_tflops": list(self.measured.gemm_tflops), "text": list(self.burnin),
                               "health": {str(k): v.to_dict() for k, v in self.health.items()}}
        if self.expectation is not None:
            e = self.expectation
            data["fsdp"] = {"sharding": e.sharding, "bytes_per_rank": e.bytes_per_rank, "comm_s": e.comm_s,
                            "compute_s": e.compute_s, "text": list(e.lines)}
        return data


class Nettests:
    """The interconnect tests of one data dir: run one, list and find the kept ones, judge figures."""

    def __init__(self, home: Path) -> None:
        self.home = Path(home)

    @staticmethod
    def deadlines(plan: RunPlan, options: Options) -> Deadlines:
        """How long each phase of a test of ``plan`` with ``options`` may take."""
        from launcher.nettest.launch import deadlines

        return Deadlines(tuple(deadlines(plan, options).items()))

    def run(self, plan: RunPlan, options: Options,
            on_state: Callable[[str, str], None] | None = None) -> Outcome:
        """Run a test on ``plan``'s nodes and wait for it (minutes; blocking): its figures, or why there are
        none; the nodes that did not answer are named and left out. ``on_state`` hears each change of the
        test run's state. The test is kept (:meth:`list`)."""
        from launcher.nettest.launch import run_nettest

        return run_nettest(plan, options, self.home, on_state=on_state)

    def find(self, prefix: str) -> NettestRecord:
        """The kept test whose id starts with ``prefix``; :class:`NettestNotFound` in one line otherwise."""
        found = [r for r in self.list() if r.run_id.startswith(prefix)]
        if len(found) != 1:
            raise NettestNotFound(f"{'no' if not found else 'more than one'} test matches '{prefix}' "
                                  "(fsdp-tui nettests lists them)")
        return found[0]

    @staticmethod
    def judge(measured: Measured, nodes: tuple[str, ...], *, health: Mapping[int, NodeHealth] | None = None,
              plan: RunPlan | None = None, params: float | None = None, peak_tflops: float | None = None,
              mfu: float = 0.4) -> Judged:
        """Judge ``measured``: slow pairs, slow GPUs, health problems; with ``plan`` and a model size
        (``params``, else the one the nodes read), what FSDP can expect. ``peak_tflops`` defaults to the
        plan's ``accelerator_type``'s."""
        from launcher.nettest.burnin import burnin_lines, health_problems, slow_gpus
        from launcher.nettest.expect import expect, inputs_for, peak_for
        from launcher.nettest.figures import judge_pairs

        health = dict(health or {})
        peak = peak_tflops or ((peak_for(plan.topology.gpu_model) or 0) / 1e12 if plan is not None else None) or None
        burnin = burnin_lines(list(measured.gemm_tflops), measured.local_world_size, health, nodes, peak)
        expectation = None
        params = params or measured.model_params
        if params and plan is not None:
            expectation = expect(inputs_for(plan, int(params), peak_tflops=peak_tflops, mfu=mfu), measured)
        return Judged(measured, nodes, judge_pairs(measured.pairs), tuple(burnin),
                      any(health_problems(h) for h in health.values()),
                      bool(slow_gpus(list(measured.gemm_tflops), measured.local_world_size)), expectation, health)

    def newest_for(self, hosts: tuple[str, ...] | list[str], *, besides: str = "") -> NettestRecord | None:
        """The newest kept test with figures on exactly these nodes (in rank order), other than ``besides``
        (:func:`launcher.present.nettest.summary` says it in one line, judged)."""
        return next((r for r in self.list() if r.run_id != besides and r.nodes == tuple(hosts)
                     and r.measured is not None), None)

    # Last in the class: inside its body ``list`` names this method, not the builtin.
    def list(self) -> builtins.list[NettestRecord]:
        """Every kept test, newest first; a file that is not a test's record is skipped."""
        from launcher.nettest.records import list_records

        return [r for r in map(NettestRecord.from_wire, list_records(self.home)) if r is not None]
