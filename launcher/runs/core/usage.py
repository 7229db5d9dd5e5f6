"""What a run used: GPU-hours (CPU-hours for CPU runs) per attempt and in all, and their price.

Counted from what the run's record says, never measured on a GPU: nodes x processes per node x wall
time of each attempt while it ran (from its first ``running`` to the next attempt, or the run's end). Pure."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from launcher.runs.core.layout import RecordedPlan
    from launcher.runs.core.user_settings import Prices


@dataclass(frozen=True)
class Usage:
    kind: str
    """``gpu`` or ``cpu``: what an hour counts."""
    hours: float
    per_attempt: tuple[float, ...]
    cost: float | None = None
    currency: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "per_attempt": list(self.per_attempt)}

    def text(self) -> str:
        money = f" ~{self.cost:.2f} {self.currency}" if self.cost is not None else ""
        return f"{self.hours:.2f} {self.kind.upper()}-h{money}"


def attempt_spans(transitions: list[tuple[float, Any, int, str]], ended_at: float | None,
                  now: float) -> list[float]:
    """Wall seconds of each attempt while it held its nodes: from its first ``running`` to the next
    attempt's first state change, the last one to the run's end (or ``now`` while it runs). An attempt
    that never ran counts 0."""
    firsts: dict[int, float] = {}
    running: dict[int, float] = {}
    for at, state, attempt, _detail in transitions:
        firsts.setdefault(attempt, at)
        if getattr(state, "value", state) == "running":
            running.setdefault(attempt, at)
    order = sorted(firsts)
    end = ended_at if ended_at is not None else now
    spans = []
    for i, attempt in enumerate(order):
        stop = firsts[order[i + 1]] if i + 1 < len(order) else end
        spans.append(max(0.0, stop - running[attempt]) if attempt in running else 0.0)
    return spans


def price_per_hour(prices: Prices | None, kind: str, gpu_model: str | None, host: str | None) -> float | None:
    if prices is None:
        return None
    if host is not None and host in prices.by_host:
        return prices.by_host[host]
    if kind == "gpu":
        if gpu_model and gpu_model in prices.by_accelerator:
            return prices.by_accelerator[gpu_model]
        return prices.gpu_hour
    return prices.cpu_hour


def run_usage(*, kind: str, procs_per_node: int, hosts: list[str], num_nodes: int, gpu_model: str | None,
              spans_s: list[float], prices: Prices | None) -> Usage:
    """Hours = nodes x processes per node x wall hours; the cost sums each node at its own price (none
    when a node has no price)."""
    per_attempt = tuple(num_nodes * procs_per_node * s / 3600 for s in spans_s)
    hours = sum(per_attempt)
    node_hosts = hosts if len(hosts) == num_nodes else [None] * num_nodes
    rates = [price_per_hour(prices, kind, gpu_model, h) for h in node_hosts]
    cost = None
    known = [r for r in rates if r is not None]
    if rates and len(known) == len(rates):
        cost = sum(known) / num_nodes * hours
    return Usage(kind, hours, per_attempt, cost, prices.currency if prices and cost is not None else "")


def usage_of_record(record, plan: RecordedPlan | None, prices: Prices | None, now: float) -> Usage | None:
    """A stored run's usage (``record`` a :class:`~launcher.runs.core.store.RunRecord`, ``plan`` its plan as
    recorded: its shape); ``None`` for a run that never started or whose plan is not recorded."""
    topo = plan.usage_shape() if plan is not None else None
    if topo is None:
        return None
    s = record.summary
    spans = attempt_spans(record.transitions, s.ended_at, now)
    if not any(spans):
        return None
    return run_usage(kind=topo.kind, procs_per_node=topo.procs_per_node, hosts=list(s.hosts),
                     num_nodes=s.num_nodes, gpu_model=topo.gpu_model, spans_s=spans, prices=prices)


def usage_totals(home, run_id: str) -> dict[str, float]:
    """The MLflow metrics of a run's usage so far (``gpu_hours`` or ``cpu_hours``, and ``cost`` with a
    price): what its owner logs as the run ends."""
    import time

    from launcher.runs.core.layout import read_plan
    from launcher.runs.core.settings_prices import prices_set
    from launcher.runs.core.store import RunStore

    record = RunStore(home).get_run(run_id)
    if record is None:
        return {}
    usage = usage_of_record(record, read_plan(record.directory), prices_set(), time.time())
    if usage is None:
        return {}
    out = {f"{usage.kind}_hours": usage.hours}
    if usage.cost is not None:
        out["cost"] = usage.cost
    return out
