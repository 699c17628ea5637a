"""A per-chain warning for the approximate steps when they read much of the data.

PyMC calls no step hook after sampling, so, like MHSS's full-data fallback warning, each chain
counts the rows its tests read after tuning and warns once, as soon as it has seen
:data:`ROWS_WARN_AFTER` draws and their mean exceeds :data:`ROWS_WARN_SHARE` of the ``N`` rows:
such a chain pays a good part of a full-data pass per iteration, and a knob would lower it.
"""

from __future__ import annotations

import warnings

from pymc.step_methods.state import dataclass_state

from pymc_subsample.steps.base import SubsamplingStepState

__all__ = ["ROWS_WARN_AFTER", "ROWS_WARN_SHARE", "RowsReadCounter", "RowsReadState"]

#: Mean share of the rows per iteration (after tuning) above which a chain warns, and the
#: draws after tuning it waits for before judging.
ROWS_WARN_SHARE, ROWS_WARN_AFTER = 0.10, 500


@dataclass_state
class RowsReadState(SubsamplingStepState):
    rows_draws: int
    rows_read: int
    rows_warned: bool


class RowsReadCounter:
    """Mixin for a :class:`~pymc_subsample.steps.base.SubsamplingStep`: call
    :meth:`_count_rows` with each draw's ``n_data``; :meth:`_rows_advice` names the knob."""

    _state_class = RowsReadState

    def _reset_rows_count(self) -> None:
        self.rows_draws = self.rows_read = 0
        self.rows_warned = False

    def set_rng(self, rng) -> None:
        super().set_rng(rng)
        self._reset_rows_count()

    def _count_rows(self, n_data: int) -> None:
        """Count one draw's rows (after tuning only) and warn once per chain if too many."""
        if self.tune:
            return
        self.rows_draws += 1
        self.rows_read += int(n_data)
        n, total = self.rows_draws, self.n_rows
        if self.rows_warned or n < ROWS_WARN_AFTER or self.rows_read <= ROWS_WARN_SHARE * total * n:
            return
        self.rows_warned = True
        mean = self.rows_read / n
        warnings.warn(
            f"{type(self).__name__} read {mean:.0f} of the N = {total} rows per iteration on "
            f"average ({mean / total:.0%}, more than {ROWS_WARN_SHARE:.0%}) over the first {n} "
            f"draws after tuning: each iteration costs a good part of a pass over the data. "
            f"{self._rows_advice()}",
            UserWarning,
            stacklevel=2,
        )

    def _rows_advice(self) -> str:
        raise NotImplementedError
