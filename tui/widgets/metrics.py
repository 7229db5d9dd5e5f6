"""Loss and friends as sparklines, memory gauges per rank: redrawn a few times a second, not per event."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Grid, Horizontal, Vertical
from textual.widgets import Label, ProgressBar, Sparkline

from launcher.api.runs import RunView

WARN_AT = 0.85
CRIT_AT = 0.95


class MetricSpark(Vertical):
    DEFAULT_CSS = """
    MetricSpark { height: 4; border: round $panel; padding: 0 1; }
    MetricSpark Sparkline { height: 1fr; }
    MetricSpark Sparkline.-empty { visibility: hidden; }
    MetricSpark .title { height: 1; width: 1fr; color: $text-muted; }
    """

    def __init__(self, title: str, waiting: str = "waiting for the first step", **kwargs) -> None:
        super().__init__(**kwargs)
        self.title_text = title
        self.waiting = waiting
        """What the box says before its first figure (an empty sparkline is a flat line that says nothing)."""
        self.shown: tuple[float, ...] = ()

    def compose(self) -> ComposeResult:
        yield Label(f"{self.title_text}  ({self.waiting})", classes="title")
        yield Sparkline([], classes="-empty")

    def show(self, values, fmt: str = ".4f", beside: str = "") -> None:
        """The series, and its last and smallest values in the title (``beside`` after the last one)."""
        data = tuple(values)
        if data == self.shown:
            return
        self.shown = data
        spark = self.query_one(Sparkline)
        spark.data = list(data)  # a new list: Sparkline redraws on a new object
        # One figure has no line: a sparkline would draw it as a solid bar the whole width.
        spark.set_class(len(data) < 2, "-empty")
        text = f"{self.title_text}  ({self.waiting})"
        if len(data) == 1:
            text = f"{self.title_text}  {format(data[0], fmt)}{beside}  (one so far: the line starts at the second)"
        elif data:
            text = f"{self.title_text}  last {format(data[-1], fmt)}{beside}  min {format(min(data), fmt)}"
        self.query_one(".title", Label).update(text, layout=False)  # a fixed size: a repaint is enough


class MemoryGauge(Horizontal):
    """One rank's memory against its device total: the card's on GPU, resident memory against the node's RAM
    on CPU (a record without a total, from an older trainer, is shown as a figure alone)."""

    DEFAULT_CSS = """
    MemoryGauge { height: 1; }
    MemoryGauge Label { width: 22; }
    MemoryGauge ProgressBar { width: 1fr; }
    MemoryGauge.-warn Bar > .bar--bar { color: $warning; }
    MemoryGauge.-crit Bar > .bar--bar { color: $error; }
    """

    def __init__(self, rank: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.rank = rank

    def compose(self) -> ComposeResult:
        yield Label(f"rank {self.rank}")
        yield ProgressBar(total=100, show_eta=False, show_percentage=True)

    def show(self, used_gib: float | None, total_gib: float | None, rss: bool) -> None:
        label = self.query_one(Label)
        bar = self.query_one(ProgressBar)
        if used_gib is None:
            return
        if total_gib:
            frac = used_gib / total_gib
            bar.update(total=100, progress=min(100.0, 100 * frac))
            # Resident memory against the node's RAM on CPU; the card's memory on GPU. Width 22.
            used = f"RSS {used_gib:.1f}" if rss else f"{used_gib:5.1f}"
            label.update(f"rank {self.rank} {used}/{total_gib:.0f}G", layout=False)
            self.set_class(WARN_AT <= frac < CRIT_AT, "-warn")
            self.set_class(frac >= CRIT_AT, "-crit")
        else:  # resident memory on CPU: no limit to measure it against, so no bar that would read 0%
            bar.display = False
            label.styles.width = "1fr"
            label.update(f"rank {self.rank}  {'resident ' if rss else ''}{used_gib:.2f} GiB", layout=False)


class MetricsPanel(Vertical):
    DEFAULT_CSS = """
    MetricsPanel { height: auto; }
    MetricsPanel Grid { grid-size: 2; grid-gutter: 0 1; height: 8; }
    MetricsPanel #gauges { height: auto; max-height: 8; }
    MetricsPanel #fit { height: 1; display: none; }
    MetricsPanel #fit.-known { display: block; }
    MetricsPanel.-short Grid { grid-size: 4; height: 4; }
    MetricsPanel.-short #gauges { max-height: 2; }
    MetricsPanel #mix { height: 1; padding: 0 1; color: $text-muted; display: none; }
    MetricsPanel #mix.-shown { display: block; }
    """

    mix_shown = ""
    """What the mixture line says (redrawn only when that changes)."""

    def compose(self) -> ComposeResult:
        with Grid():
            yield MetricSpark("loss", id="spark-loss")
            yield MetricSpark("eval loss", "waiting for the first evaluation", id="spark-eval")
            yield MetricSpark("learning rate", id="spark-lr")
            yield MetricSpark("tokens/s", id="spark-tps")
        yield Label("", id="fit")
        yield Label("", id="mix")
        yield Vertical(id="gauges")

    def refresh_from(self, view: RunView) -> None:
        router = f" (router aux {view.router_aux_loss:.4f})" if view.router_aux_loss is not None else ""
        self.query_one("#spark-loss", MetricSpark).show(view.loss, beside=router)
        self.query_one("#spark-eval", MetricSpark).show(view.eval_loss)
        self.query_one("#spark-lr", MetricSpark).show(view.lr, ".2e")
        self.query_one("#spark-tps", MetricSpark).show(view.throughput, ".0f")
        words = view.memory_words()  # the prediction beside the measured peak, once the trainer said one
        fit = self.query_one("#fit", Label)
        fit.set_class(bool(words), "-known")
        if words:
            fit.update(words, layout=False)
        mix = view.mix_words()
        if mix and mix != self.mix_shown:  # a mixture: each source's share so far (and its weight's)
            self.mix_shown = mix
            label = self.query_one("#mix", Label)
            label.update(f"mix: {mix}")
            label.set_class(True, "-shown")
        gauges = self.query_one("#gauges", Vertical)
        existing = {g.rank: g for g in gauges.query(MemoryGauge)}
        for rank, mem in sorted(view.memory.items()):
            if rank not in existing:
                existing[rank] = MemoryGauge(rank)
                gauges.mount(existing[rank])
            if existing[rank].is_mounted:
                existing[rank].show(mem.used_gib, mem.total_gib, rss=mem.peak_gib is None)
                if mem.device_used_gib is not None:  # the card's use on the bar; the tensors' part here
                    existing[rank].tooltip = (f"in use on the card {mem.device_used_gib:.1f} GiB; tensors: peak "
                                              f"{mem.peak_gib or 0:.1f}, reserved {mem.reserved_gib or 0:.1f} GiB")
