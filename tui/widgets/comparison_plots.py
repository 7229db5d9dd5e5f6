"""Plots of a comparison (``textual-plotext``): every run's loss curve overlaid in one plot, and one
bar per run for throughput and for peak memory per rank. Imported only when a comparison is opened
(plotext is not needed to start the app)."""

from __future__ import annotations

from textual_plotext import PlotextPlot

from launcher.api.runs import RunStats


def short_label(stats: RunStats, width: int = 18) -> str:
    """``sharding=full_shard cpu_offload=true`` -> ``full_shard cpu_offload=true``: the first value
    without its key (the sweep's main axis), the rest as they are."""
    first, _, rest = (stats.label or stats.run_id).partition(" ")
    text = (first.split("=", 1)[-1] + (" " + rest if rest else "")).strip()
    return text if len(text) <= width else text[: width - 1] + "…"


class LossCurves(PlotextPlot):
    """Training loss against step, one line per run (runs without a loss are left out)."""

    def show(self, rows: list[RunStats]) -> None:
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        plt.title("training loss")
        plt.xlabel("step")
        self.labels: list[str] = []
        """The legend of the lines drawn, one per run with a loss."""
        for r in rows:
            if r.losses:
                steps, losses = zip(*r.losses, strict=True)
                self.labels.append(f"{r.run_id[-4:]} {short_label(r)}")
                plt.plot(list(steps), list(losses), label=self.labels[-1], marker="braille")
        if not self.labels:
            plt.title("training loss: no run has reported one yet")
        self.refresh()


class MetricBars(PlotextPlot):
    """One bar per run for one measured number (``tokens_per_s``, ``peak_gib``...)."""

    def __init__(self, key: str, title: str, **kwargs) -> None:
        super().__init__(**kwargs)
        self.key, self.title_text = key, title

    def show(self, rows: list[RunStats]) -> None:
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        measured = [r for r in rows if getattr(r, self.key) is not None]
        plt.title(self.title_text if measured else f"{self.title_text}: nothing measured yet")
        if measured:
            names = [f"{i}:{short_label(r, 12)}" for i, r in enumerate(measured, start=1)]
            plt.bar(names, [float(getattr(r, self.key)) for r in measured], orientation="horizontal", width=0.5)
        self.refresh()
