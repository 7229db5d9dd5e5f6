"""The two lines above the run monitor's figures: the summary line (state, attempt, the resume check, a
swap of a failed node, elapsed, ETA, step, throughput, whether the panes follow, the last safe step) and the why-line (what
holds the run up, or why it failed). What they say is the :class:`RunView`'s; this only words it."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from textual.screen import Screen
from textual.widgets import Label, Static

from launcher.api.runs import RunView
from launcher.words import fmt_duration

if TYPE_CHECKING:
    from launcher.api.runs import Runs, SafeStep


def summary_line(view: RunView, follow: bool, safe_text: str) -> str:
    """The summary line as it reads now."""
    v = view
    step = f"{v.step}/{v.max_steps}" if v.max_steps else str(v.step)
    if v.first_step_at is None and not v.state.is_final:
        quiet = not any(n.lines for n in v.nodes.values())
        step = "- (starting: no line yet)" if quiet else "- (no step reported yet)"
    tps = f"{v.tokens_per_s:,.0f} tok/s" if v.tokens_per_s else "- tok/s"
    mfu = f"  MFU {v.mfu:.1%}" if v.mfu is not None else ""
    state = "STALLED" if v.stalled else v.state.value.upper()
    resume = f"  {v.resume_badge()}" if v.resume_badge() else ""
    swaps = f"  {v.swap_badge()}" if v.swap_badge() else ""
    return (f"{state}  attempt {v.attempt}{resume}{swaps}  elapsed {fmt_duration(v.elapsed_s())}  "
            f"ETA {fmt_duration(v.eta_s())}  step {step}  {tps}{mfu}  follow {'on' if follow else 'off'} (f)"
            f"{safe_text}")


class SummaryLines:
    """Owns what the summary line and the why-line show (each redrawn only when it reads differently) and
    the last safe step on the summary line, asked of rank 0's node (final once asked after the run's end)."""

    def __init__(self, screen: Screen, view: RunView) -> None:
        self.screen, self.view = screen, view
        self.summary_shown = ""
        self.why_shown = ""
        """What the why-line says (it is redrawn only when that changes)."""
        self.safe: SafeStep | None = None
        """The run's safe step as last found (its age is counted at each draw, never frozen)."""
        self.safe_final = False
        """The safe step was asked once more after the run ended (its last saves gathered): it is final."""

    def draw(self, follow: bool) -> None:
        self.draw_summary(follow)
        said = self.view.why()
        if said != self.why_shown:
            self.why_shown = said
            why = self.screen.query_one("#why", Static)
            why.update(said)
            why.set_class(bool(said), "-shown")

    def draw_summary(self, follow: bool) -> None:
        text = summary_line(self.view, follow, self.safe_text())
        if text != self.summary_shown:  # only when it reads differently; a fixed size: a repaint, no layout
            self.summary_shown = text
            self.screen.query_one("#summary", Label).update(text, layout=False)

    def safe_text(self) -> str:
        """``  safe step N (NAME, written 12s ago)``, its age as of now."""
        return "" if self.safe is None else f"  safe {self.safe.text(time.time())}"

    async def refresh_safe_step(self, runs: Runs, run_id: str, *, ask_node: bool = True) -> None:
        """The run's safe step again (until the answer is final): what its owner recorded (each gathered
        save as it comes), and with ``ask_node`` the node that holds the checkpoints where nothing is."""
        if self.safe_final:
            return  # an ended run's checkpoints do not change by themselves
        ended = self.view.state.is_final  # asked after the end: its final save and gathers are in
        safe = await asyncio.to_thread(runs.last_safe_step, run_id, ask_node=ask_node)
        if safe is not None or ask_node:
            self.safe = safe
        self.safe_final = ended and ask_node
