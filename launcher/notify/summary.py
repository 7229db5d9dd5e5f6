"""The summary every sink sends: one screen a user can act on, from facts the run's owner gathers.

Pure: :func:`build_summary` takes typed facts, the formatters turn the summary into a title, a text body
and the JSON payloads of Slack, Discord and ntfy. Nothing secret is in a summary (it holds no URL)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from launcher.words import fmt_age, fmt_span


@dataclass(frozen=True)
class CheckpointFact:
    """The newest complete checkpoint: the step a relaunch resumes from, and how old it is."""

    name: str
    step: int
    age_s: float | None


@dataclass(frozen=True)
class RunFacts:
    """What the owner knows when it notifies (store summary, triage, usage, checkpoint)."""

    run_id: str
    experiment: str
    event: str
    """The state notified (``succeeded``, ``failed``, ``stalled``, ``timed_out``, ``cancelled``, ``idle``)."""
    detail: str = ""
    attempt: int = 1
    duration_s: float | None = None
    step: int | None = None
    max_steps: int | None = None
    last_loss: float | None = None
    best_eval_loss: float | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    """``{"kind": "gpu"|"cpu", "hours": float, "cost": float|None, "currency": str}``."""
    checkpoint: CheckpointFact | None = None
    triage: dict[str, Any] | None = None
    machine: str = ""
    """Where the run's records are (the host of the owner), so the user knows where to run ``show``."""
    recovery: tuple[str, ...] = ()
    """The run's swaps, one line each (``node 3 (gpu-07) lost at step 1,840; replaced by gpu-11; ...``)."""


_TRIAGE_KEYS = ("node_rank", "rank", "exit_code", "signature", "line_no", "excerpt", "summary")


def build_summary(facts: RunFacts) -> dict[str, Any]:
    """The summary as a JSON-ready dict (what the command sink reads, what webhooks carry)."""
    out = asdict(facts)
    out["duration"] = fmt_span(facts.duration_s)
    out["recovery"] = list(facts.recovery)
    out["triage"] = ({k: facts.triage.get(k) for k in _TRIAGE_KEYS} if facts.triage else None)
    out["open"] = f"fsdp-tui show {facts.run_id}"
    out["logs"] = f"fsdp-tui logs {facts.run_id} --tail 50"
    out["title"] = title(facts)
    return out


def title(facts: RunFacts) -> str:
    said = {"succeeded": "succeeded", "failed": "FAILED", "stalled": "is STALLED", "timed_out": "TIMED OUT",
            "cancelled": "was cancelled", "idle": "has IDLE GPUs", "test": "test notification",
            "recovered": "replaced a failed node and goes on"}
    return f"fsdp-tui: {facts.experiment} {said.get(facts.event, facts.event)} ({facts.run_id})"


def usage_text(usage: dict[str, Any]) -> str:
    if not usage or usage.get("hours") is None:
        return ""
    text = f"{usage['kind'].upper()}-hours {usage['hours']:.2f}"
    if usage.get("cost") is not None:
        text += f" (~{usage['cost']:.2f} {usage.get('currency', '')})".replace(" )", ")")
    return text


def body(summary: dict[str, Any]) -> str:
    """The text every sink shows: a few lines, the most useful first."""
    lines = [f"{summary['event']} after {summary['duration']} (attempt {summary['attempt']})"]
    swaps = summary.get("recovery") or ()
    if summary["event"] == "recovered" and swaps:
        lines = [swaps[-1], *lines]
    elif swaps:
        lines += [f"recovered: {s}" for s in swaps]
    if summary["detail"]:
        lines.append(f"why: {summary['detail']}")
    t = summary["triage"]
    if t:
        where = f"node {t['node_rank']}" + (f" rank {t['rank']}" if t.get("rank") is not None else "")
        lines.append(f"root cause: {where}: {t.get('signature') or 'exited'}"
                     + (f" (exit code {t['exit_code']})" if t.get("exit_code") is not None else ""))
        if t.get("excerpt"):
            line = f" (log line {t['line_no']})" if t.get("line_no") else ""
            lines.append(f"first error{line}: {t['excerpt'][:300]}")
    if summary["step"] is not None:
        steps = f"{summary['step']}" + (f"/{summary['max_steps']}" if summary["max_steps"] else "")
        loss = f"  loss {summary['last_loss']:.4f}" if summary["last_loss"] is not None else ""
        best = f"  best eval {summary['best_eval_loss']:.4f}" if summary["best_eval_loss"] is not None else ""
        lines.append(f"step {steps}{loss}{best}")
    if usage_text(summary["usage"]):
        lines.append(usage_text(summary["usage"]))
    c = summary["checkpoint"]
    if c:
        lines.append(f"last safe step {c['step']}: checkpoint {c['name']}, written {fmt_age(c['age_s'])}")
    where = f" (on {summary['machine']})" if summary["machine"] else ""
    lines.append(f"open it: {summary['open']}{where}")
    return "\n".join(lines)


def webhook_payload(summary: dict[str, Any], url: str) -> dict[str, Any]:
    """Slack reads ``text``, Discord ``content`` (at most 2000 characters); any other receiver gets both
    and the whole summary under ``fsdp_tui``. Slack and Discord get only their own keys."""
    text = f"*{summary['title']}*\n{body(summary)}"
    if "hooks.slack.com" in url:
        return {"text": text}
    if "discord.com/api/webhooks" in url or "discordapp.com/api/webhooks" in url:
        return {"content": text[:2000], "username": "fsdp-tui"}
    return {"text": text, "content": text[:2000], "fsdp_tui": summary}


def ntfy_headers(summary: dict[str, Any]) -> dict[str, str]:
    bad = summary["event"] in ("failed", "timed_out", "stalled", "idle")
    return {"Title": summary["title"].encode("ascii", "replace").decode(),
            "Priority": "high" if bad else "default",
            "Tags": "warning" if bad else ("white_check_mark" if summary["event"] == "succeeded" else "bell")}
