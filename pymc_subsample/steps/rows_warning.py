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

__all__ = ["ROWS_WARN_AFTER", "ROWS_WARN_SHARE", "RowsReadCounter", "RowsReadState",
           "austerity_rows_advice", "barker_rows_advice"]

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


def austerity_rows_advice(self) -> str:
    """AusterityMH's knobs that would read fewer rows."""
    tips = []
    if self.batch_size > ROWS_WARN_SHARE * self.n_rows:
        tips.append(f"a smaller batch_size (now {self.batch_size}) lets a test stop after "
                    "fewer rows")
    if self.cv_order != 2:
        tips.append("cv_order=2 (the default) shrinks the spread of the per-row differences "
                    "by orders of magnitude near the mode")
    if self.proposal_kind not in ("pcn", "independence"):
        tips.append("proposal='pcn' (the default) with cv_order=2 decides most tests on "
                    "the first batch")
    tips.append(f"a larger epsilon (now {self.epsilon:g}) stops the tests earlier, at the "
                "price of more bias: measure it against an exact run (docs/choosing.md)")
    return "To read fewer: " + "; ".join(tips) + "."


def barker_rows_advice(self) -> str:
    """BarkerMinibatch's knobs that would read fewer rows."""
    if self.batch_size > ROWS_WARN_SHARE * self.n_rows:
        return (f"To read fewer: a smaller batch_size (now {self.batch_size}); every test "
                "reads at least one batch.")
    tips = []
    if self.delta is not None:
        tips.append(f"delta=None (delta={self.delta:g} forces at least "
                    f"{(8.4 / self.delta) ** 2:.0f} rows per test)")
    if self.cv_order != 2:
        tips.append("cv_order=2 (the default), which shrinks the variance s² of the "
                    "estimate by orders of magnitude near the mode")
    tips.append("smaller moves (proposal='random_walk' with a smaller scaling and "
                "tune=False), whose per-row differences spread less")
    tips.append(f"a higher temperature (now {self.likelihood.temperature:g}; it changes "
                "the target)")
    return ("The batches grew because the variance estimate s² stayed above σ². To read "
            "fewer: " + "; ".join(tips) + ".")
