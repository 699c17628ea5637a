"""The progress bar of the subsampling steps: moving averages of per-draw stats."""

from __future__ import annotations

from rich.progress import TextColumn
from rich.table import Column

__all__ = ["ProgressBar"]


class ProgressBar:
    """PyMC's progress-bar hooks for a step whose stats hold ``scaling`` and the stats named
    in :attr:`_progress_averages`."""

    #: Per-draw stats shown as moving averages: (progress field, sampler stat, column title).
    _progress_averages: tuple[tuple[str, str, str], ...] = (
        ("accept_rate", "accepted", "Accept"),
        ("rows", "n_data", "Rows/draw"),
    )

    @classmethod
    def _progressbar_config(cls, n_chains=1):
        columns = [
            TextColumn(f"{{task.fields[{field}]:0.{2 if field != 'rows' else 1}f}}",
                       table_column=Column(title, ratio=1))
            for field, _, title in cls._progress_averages
        ]
        columns.append(
            TextColumn("{task.fields[scaling]:0.2f}", table_column=Column("Scaling", ratio=1))
        )
        stats = {field: [0.0] * n_chains for field, _, _ in cls._progress_averages}
        stats["scaling"] = [0.0] * n_chains
        return columns, stats

    @classmethod
    def _make_progressbar_update_functions(cls):
        # Exponential moving averages: a readable, current picture of a noisy per-draw stat.
        averages = cls._progress_averages
        ema = {field: None for field, _, _ in averages}

        def update_stats(step_stats):
            for field, stat, _ in averages:
                value = float(step_stats[stat])
                ema[field] = value if ema[field] is None else 0.99 * ema[field] + 0.01 * value
            return {**ema, "scaling": step_stats["scaling"]}

        return (update_stats,)
