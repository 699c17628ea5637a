r"""Third-order control variates for the moves of one grouping factor's levels
(``docs/methods/mhss.md``, "Third-order terms for the level moves").

A row of level ``k`` has ``a_i = η_i − η̂_i = c_i + t_iδ_k`` with ``c_i = x_{F,i}ᵀδ_F``
(``δ = θ − θ̂``). Its third-order Taylor term ``(1/6)f‴_i a_i³`` (``f‴_i = f‴(η̂_i)``) changes, for
a move ``δ_k → δ'_k`` with ``θ_F`` held, by

.. math::

    \tfrac16\sum_{i\in k} f'''_i(a_i'^3 - a_i^3) = \tfrac16\big(3\,\delta_F^\top W_k\delta_F\,
    (\delta'_k - \delta_k) + 3\,V_k^\top\delta_F\,(\delta_k'^2 - \delta_k^2)
    + T_k(\delta_k'^3 - \delta_k^3)\big)

with the per-level sums ``T_k = Σ f‴_i t_i³``, ``V_k = Σ f‴_i t_i² x_{F,i}`` and
``W_k = Σ f‴_i t_i x_{F,i}x_{F,i}ᵀ`` of one pass over the data at ``θ̂`` (:func:`level_cubic`;
``O(G d_F²)`` numbers). With ``E = Σ_i f‴_i x_{F,i}^{⊗3}`` from the same pass, the cubic of all
rows at any ``δ``,

.. math::

    \sum_i f^{(3)}_i a_i^3 = E[\delta_F]^3 + 3\sum_k \delta_k\,\delta_F^\top W_k\delta_F
    + 3\sum_k \delta_k^2 V_k^\top\delta_F + \sum_k T_k\delta_k^3,

serves any move of the step (the fixed block's and the scale's) in ``O(G d_F²)``. The rows'
remainders after these terms are bounded with ``sup|f⁗|`` (the level bound at order 3,
:mod:`pymc_subsample.bounds.levels`), from the same pass. The logistic family only:
``|f⁗| ≤ 1/8`` on the whole line, so no region.
"""

from __future__ import annotations

import typing

import numpy as np
from scipy.special import expit

from pymc_subsample.bounds import LevelBound, LevelRows, split_level_rows
from pymc_subsample.kernels.gram import weighted_gram, weighted_level_sums
from pymc_subsample.model.frame import LevelFrame
from pymc_subsample.model.glm_pass import GLMPass
from pymc_subsample.model.levels import SplitRows

__all__ = ["LOGIT_FOURTH_SUP", "CubicPass", "LevelCubic", "RecentByDelta", "cubic_moment",
           "level_cubic", "level_cubic_change", "level_cubic_sums", "logit_third",
           "newton_update", "refusal", "summed_pass"]

#: ``sup |f⁗|`` of ``f(η) = yη − log(1 + e^η)``: ``f⁗ = −p(1−p)(1 − 6p + 6p²)``, largest at
#: ``p = 1/2`` (``1/8``), ``p(1−p)|1 − 6p(1−p)| ≤ 1/8`` everywhere.
LOGIT_FOURTH_SUP = 0.125


def logit_third(eta: np.ndarray) -> np.ndarray:
    """``f‴(η) = −p(1 − p)(1 − 2p)``, ``p = σ(η)``, of the logistic log-likelihood."""
    p = expit(eta)
    return -p * (1.0 - p) * (1.0 - 2.0 * p)


class LevelCubic:
    """The levels' third-order control-variate terms and the order-3 level bound (module
    docstring), built by :func:`level_cubic`.

    Attributes
    ----------
    t_sum : ndarray, shape (G,)
        ``T_k``.
    v_sum : ndarray, shape (G, d_F)
        ``V_k`` on the fixed coordinates in ``layout.fixed`` order.
    w_sum : ndarray, shape (G, d_F, d_F)
        ``W_k``.
    e_sum : ndarray, shape (d_F, d_F, d_F)
        ``E``.
    bound : LevelBound
        The level bound of the order-3 remainders (``κ₃ = 1/24``, ``L₃ = 1/8``).
    """

    #: the control variates' order with these terms
    order = 3

    def __init__(self, glm_pass: GLMPass, frame: LevelFrame, reads: np.ndarray,
                 t_sum: np.ndarray, v_sum: np.ndarray, w_sum: np.ndarray, e_sum: np.ndarray,
                 bound: LevelBound) -> None:
        self._pass, self.layout = glm_pass, frame.layout
        self._theta_hat = frame.theta_hat
        self._temperature = glm_pass.lik.temperature
        self.t_sum, self.v_sum, self.w_sum, self.bound = t_sum, v_sum, w_sum, bound
        self.e_sum = e_sum
        # the fixed coordinates the rows read (not the group scale): the products below need
        # only those, and a move of the others (the scale's) finds its coefficients cached
        read = np.flatnonzero(reads > 0.0)
        self._read = self.layout.fixed[read]
        self._w_read = np.ascontiguousarray(w_sum[:, read][:, :, read])
        self._v_read = np.ascontiguousarray(v_sum[:, read])
        self._read_pos = read
        #: the two most recent :meth:`level_coefficients`, by their ``δ`` on the read coordinates
        self._recent = RecentByDelta(self._cubic_coefficients)

    def _fixed_delta(self, theta: np.ndarray) -> np.ndarray:
        fixed = self.layout.fixed
        return theta[fixed] - self._theta_hat[fixed]

    def read_delta(self, theta: np.ndarray) -> np.ndarray:
        """``δ`` on the fixed coordinates the rows read."""
        return theta[self._read] - self._theta_hat[self._read]

    def level_coefficients(self, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(δ_FᵀW_kδ_F, V_kᵀδ_F)`` per level at ``θ``'s fixed coordinates (``O(G d_F²)``;
        a move asks at both ends, the next move at one of them again)."""
        return self._recent(self.read_delta(theta))

    def _cubic_coefficients(self, d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        g, d_r = self._v_read.shape
        return (self._w_read.reshape(g * d_r, d_r) @ d).reshape(g, d_r) @ d, self._v_read @ d

    def level_terms(self, theta: np.ndarray, x_new: np.ndarray) -> np.ndarray:
        """``(1/6)Σ_{i∈k} f‴_i(a'_i³ − a_i³)`` of the moves ``u_k → x_new[k]`` of every level,
        ``θ_F`` held: what stage 1 adds to the order-2 control variates."""
        w, v = self.level_coefficients(theta)
        lv = slice(self.layout.start, self.layout.stop)
        return level_cubic_change(w, v, self.t_sum, theta[lv] - self._theta_hat[lv],
                                  x_new - self._theta_hat[lv])

    def cubic(self, theta: np.ndarray) -> float:
        """``Σ_i f‴_i a_i³`` over all rows at ``θ`` (module docstring; ``O(G d_F²)``)."""
        d = self._fixed_delta(theta)
        lv = slice(self.layout.start, self.layout.stop)
        dk = theta[lv] - self._theta_hat[lv]
        w, v = self.level_coefficients(theta)
        return float(((self.e_sum @ d) @ d) @ d + 3.0 * (dk @ w)
                     + 3.0 * ((dk * dk) @ v) + self.t_sum @ (dk * dk * dk))

    def total_terms(self, theta: np.ndarray, theta_new: np.ndarray) -> float:
        """``(1/6)Σ_i f‴_i(a'_i³ − a_i³)`` over all rows, for any move ``θ → θ'``."""
        before = self.cubic(theta)  # first: the current point, which the next move asks again
        return (self.cubic(theta_new) - before) / 6.0

    def newton(self, theta: np.ndarray, mean: np.ndarray, precision: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
        """One Newton step from the level's conditional Gaussian ``(mean, precision)`` on the
        cubic terms given ``θ_F`` (a function of ``θ_F`` only, so still one fixed proposal
        density per level); levels where the precision would not stay positive keep theirs."""
        lv = slice(self.layout.start, self.layout.stop)
        return newton_update(mean, precision,
                             *self.level_slope_curve(theta, mean - self._theta_hat[lv]))

    def level_slope_curve(self, theta: np.ndarray, d: np.ndarray
                          ) -> tuple[np.ndarray, np.ndarray]:
        """The first and second derivatives in ``δ_k`` at ``δ_k = d`` of each level's terms
        (:meth:`level_terms`' function of ``δ'_k``), ``θ_F`` at ``θ``'s."""
        w, v = self.level_coefficients(theta)
        return 0.5 * w + v * d + 0.5 * self.t_sum * d * d, v + self.t_sum * d

    def row_terms(self, theta: np.ndarray, theta_new: np.ndarray,
                  idx: np.ndarray) -> np.ndarray:
        """``(1/6)f‴_i(a'_i³ − a_i³)`` of the rows ``idx`` (tempered as the rows' terms), from
        their pieces at ``θ̂`` (one call of the pass's compiled function on those rows)."""
        idx = np.asarray(idx, dtype=np.int64)
        if idx.size == 0:
            return np.zeros(0)
        _, pieces = self._pass.rows(self._theta_hat, idx, check=False)
        x, _, _, _, eta_hat, _, _ = pieces[0]
        xf = x.fixed_block()
        start = self.layout.start
        a = xf @ self._fixed_delta(theta) + x.value * (
            theta[start + x.level] - self._theta_hat[start + x.level])
        a_new = xf @ self._fixed_delta(theta_new) + x.value * (
            theta_new[start + x.level] - self._theta_hat[start + x.level])
        return self._row_polynomial(eta_hat, a, a_new) / self._temperature

    def _row_polynomial(self, eta_hat: np.ndarray, a: np.ndarray, a_new: np.ndarray
                        ) -> np.ndarray:
        """The rows' terms of order 3 and up from their ``η̂_i``, ``a_i``, ``a'_i``, untempered."""
        return logit_third(eta_hat) * (a_new * a_new * a_new - a * a * a) / 6.0


def level_cubic_change(w: np.ndarray, v: np.ndarray, t: np.ndarray, d0: np.ndarray,
                       d1: np.ndarray) -> np.ndarray:
    """``(3w(d₁ − d₀) + 3v(d₁² − d₀²) + t(d₁³ − d₀³))/6`` per level: the cubic terms' change
    of a level's move ``d₀ → d₁`` with coefficients ``(w, v)`` and ``T = t``."""
    return (3.0 * w * (d1 - d0) + 3.0 * v * (d1 * d1 - d0 * d0)
            + t * (d1 * d1 * d1 - d0 * d0 * d0)) / 6.0


def newton_update(mean: np.ndarray, precision: np.ndarray, slope: np.ndarray,
                  curve: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A Gaussian proposal's ``(mean, precision)`` after one Newton step on terms of slope
    ``slope`` and second derivative ``curve`` at ``mean``; levels where the precision would not
    stay positive keep theirs."""
    new_precision = precision - curve
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        ok = (new_precision > 0.0) & np.isfinite(new_precision) & np.isfinite(slope)
        new_mean = np.where(ok, mean + slope / new_precision, mean)
    return new_mean, np.where(ok, new_precision, precision)


def refusal(data_pass, *, crossed: bool = False) -> str | None:
    """Why the rows have no level terms of order 3 and up (``None``: they have); ``crossed``:
    the terms of rows on two crossed factors (:mod:`pymc_subsample.model.crossed_cubic`)."""
    if not isinstance(data_pass, GLMPass) or data_pass.levels is None:
        return "the rows are not one GLM predictor split by level"
    if len(data_pass.terms) != 1:
        return "more than one observed variable"
    term = data_pass.terms[0]
    if term.family.name != "bernoulli_logit":
        return (f"observed variable '{term.name}' is {term.family.name}: the higher-derivative "
                "bounds are the logistic family's (bernoulli_logit) only")
    if term.curvature is not None:
        return f"observed variable '{term.name}' has a quadratic predictor"
    if not crossed and term.split.second_columns is not None:
        return f"observed variable '{term.name}' has a second, crossed factor"
    return None


def summed_pass(data_pass: GLMPass, frame: LevelFrame, block_pass: CubicPass
                ) -> tuple[list[np.ndarray], LevelBound]:
    """``block_pass``'s per-level sums over all rows and its level bound."""
    lik = data_pass.lik
    totals: list[np.ndarray] | None = None
    rows = LevelRows.empty(lik.n_rows, frame.layout.n_levels, block_pass.order)
    # the likelihood's blocks (threads, read-ahead, the build's bar), summed in block order
    for chunk, (sums, level_rows) in lik.map_row_blocks(block_pass):
        if totals is None:
            totals = list(sums)  # the block's own new arrays
        else:
            for total, part in zip(totals, sums, strict=True):
                total += part
        rows.fill(chunk, level_rows)
    assert totals is not None
    return totals, LevelBound(rows, frame.layout.dim)


def level_cubic(data_pass, frame: LevelFrame) -> LevelCubic | str:
    """The third-order terms and their bound from one pass over all rows at ``θ̂``, or why
    there are none (a string naming what is missing)."""
    why = refusal(data_pass)
    if why is not None:
        return why
    sums, bound = summed_pass(data_pass, frame, CubicPass(data_pass, frame))
    return LevelCubic(data_pass, frame, *sums, bound)


class CubicPass:
    """The blocks of :func:`level_cubic`'s pass, for
    :meth:`~pymc_subsample.model.likelihood.SubsampledLikelihood.map_row_blocks`: per block,
    ``T_k``, ``V_k``, ``W_k``, ``E`` and the rows' order-3 level-bound pieces, at ``θ̂``."""

    #: the level bound's order and its ``L_k ≥ sup|f^(k+1)|``
    order, remainder_sup = 3, LOGIT_FOURTH_SUP

    def __init__(self, glm_pass: GLMPass, frame: LevelFrame) -> None:
        self._pass, self._frame = glm_pass, frame

    def thread_copy(self) -> CubicPass:
        return CubicPass(self._pass.thread_copy(), self._frame)

    def block(self, chunk: np.ndarray) -> tuple:
        frame = self._frame
        g = frame.layout.n_levels
        _, pieces = self._pass.rows(frame.theta_hat, chunk, check=False)
        x, _, _, _, eta_hat, _, _ = pieces[0]
        assert isinstance(x, SplitRows)
        temperature = self._pass.lik.temperature
        xt = frame.whiten_rows(x)
        sup = np.full(chunk.size, self.remainder_sup / temperature)
        return (self.sums(x, eta_hat, temperature),
                split_level_rows(self.order, sup, xt.fixed, xt.level, xt.value, g))

    def sums(self, x: SplitRows, eta_hat: np.ndarray, temperature: float
             ) -> tuple[np.ndarray, ...]:
        """``(Σ_i |x_{F,i}|, T_k, V_k, W_k, E)`` of the block's rows (the first: which fixed
        coordinates the rows read)."""
        f3 = logit_third(eta_hat) / temperature
        xf = x.fixed_block()
        return (np.abs(xf).sum(axis=0),
                *level_cubic_sums(x.level, x.value, f3, xf, self._frame.layout.n_levels),
                cubic_moment(xf, f3))


def level_cubic_sums(level: np.ndarray, s: np.ndarray, f3: np.ndarray, x: np.ndarray,
                     n_levels: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(T_k, V_k, W_k) = (Σ f‴s³, Σ f‴s²x, Σ f‴s x xᵀ)`` over each level's rows (``s`` the
    rows' value on their level): shapes ``(G,)``, ``(G, d)``, ``(G, d, d)``."""
    d = x.shape[1]
    w = np.empty((n_levels, d, d))
    for j in range(d):
        w[:, j, :] = weighted_level_sums(level, f3 * s * x[:, j], x, n_levels)
    return (np.bincount(level, f3 * s * s * s, minlength=n_levels),
            weighted_level_sums(level, f3 * s * s, x, n_levels), w)


def cubic_moment(x: np.ndarray, f3: np.ndarray) -> np.ndarray:
    """``E = Σ_i f‴_i x_i^{⊗3}``, shape ``(d, d, d)``."""
    d = x.shape[1]
    e = np.empty((d, d, d))
    for j in range(d):
        e[j] = weighted_gram(x, f3 * x[:, j])
    return e


class RecentByDelta:
    """``compute(δ)`` remembered for the two ``δ`` asked most recently (a move asks at both of
    its ends, the next move at one of them again: the current point, whichever it was)."""

    def __init__(self, compute) -> None:
        self._compute = compute
        self._recent: dict[bytes, typing.Any] = {}

    def __call__(self, d: np.ndarray):
        key = d.tobytes()
        found = self._recent.pop(key, None)  # reinserted below: the least recent goes first
        if found is None:
            found = self._compute(d)
            if len(self._recent) >= 2:
                del self._recent[next(iter(self._recent))]
        self._recent[key] = found
        return found
