"""The progress bar of the subsampling steps: moving averages of per-draw stats."""

from __future__ import annotations

from rich.progress import Task, TextColumn
from rich.table import Column
from rich.text import Text

__all__ = ["ProgressBar"]


class _StatColumn(TextColumn):
    """A stat's column, as narrow as its title and values: PyMC's own columns share the rest of
    the line by ratio, and at 80 columns a ratio column of ours left theirs too narrow for their
    titles ("Elaps…").

    It also keeps the clock of a chain that has not drawn yet at zero: with ``cores=1`` PyMC
    starts every chain's bar at once and runs the chains one after another, so chain 2's
    elapsed time and draws per second would count chain 1's time.
    """

    def render(self, task: Task) -> Text:
        if task.completed == 0 and task.start_time is not None:
            task.start_time = task.get_time()
        return super().render(task)


class ProgressBar:
    """PyMC's progress-bar hooks for a step whose stats hold ``scaling`` (the proposal's tuned
    parameter, titled by its symbol: ρ for pCN, κ for the random walk, s for the independence
    proposal) and the stats named in :attr:`_progress_averages`."""

    #: Per-draw stats shown as moving averages: (progress field, sampler stat, column title,
    #: format).
    _progress_averages: tuple[tuple[str, str, str, str], ...] = (
        ("accept_rate", "accepted", "Accept", "0.2f"),
        ("rows", "n_data", "Rows", "0.1f"),
    )

    def _progressbar_config(self, n_chains=1):
        columns = [
            _StatColumn(f"{{task.fields[{field}]:{fmt}}}", table_column=Column(title))
            for field, _, title, fmt in self._progress_averages
        ]
        symbol = self.proposal.parameter_symbol
        columns.append(_StatColumn("{task.fields[scaling]:0.2f}", table_column=Column(symbol)))
        stats = {field: [0.0] * n_chains for field, _, _, _ in self._progress_averages}
        stats["scaling"] = [0.0] * n_chains
        return columns, stats

    def _make_progressbar_update_functions(self):
        # Exponential moving averages: a readable, current picture of a noisy per-draw stat.
        averages = self._progress_averages
        ema = {field: None for field, _, _, _ in averages}

        def update_stats(step_stats):
            for field, stat, _, _ in averages:
                value = float(step_stats[stat])
                ema[field] = value if ema[field] is None else 0.99 * ema[field] + 0.01 * value
            return {**ema, "scaling": step_stats["scaling"]}

        return (update_stats,)
