"""Checks every likelihood family's test file makes (one file per family, this one shared).

- :func:`sup_on_grid`: ``sup |f^{(k+1)}|`` by 30-digit numerical differentiation (mpmath) of
  the family's log-density written in the test file, on a grid, to compare with the package's
  constants (a bound, and nearly attained).
- :func:`check_pairs`: the MHSS bound ``|ξ_i| ≤ c_i M`` on 10⁴ random pairs in the ball of the
  Laplace frame on 2000 random rows, with remainders from the test file's own ``f``, ``f'``,
  ``f''`` (independent of the package); the step's order-2 constants must be the formula's.
- :func:`check_posterior`: MHSS against the stored NUTS reference at N = 2·10⁴
  (``tests/make_glm_references.py``): |z| < 4.5, sd within 10 %, nothing clipped, fallbacks
  below 0.1 %, fewer than 10 rows per iteration.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass

import mpmath
import numpy as np
import pymc as pm

import pymc_subsample as pms
from pymc_subsample.bounds import (
    SharedScaleBound,
    SharedScaleRows,
    family,
    region_radius,
    shared_scale_rows,
)
from pymc_subsample.datasets import glm_data, glm_model
from tests.make_glm_references import reference_path
from tests.pairs import assert_stored_constants, worst_bound_ratio
from tests.posterior import SAMPLE, assert_matches

N_ROWS, DIM, SEED = 20_000, 4, 9
#: The rows the pair tests evaluate (a random tenth: the bound holds row by row).
PAIR_ROWS = np.sort(np.random.default_rng(0).choice(N_ROWS, size=2000, replace=False))


def sup_on_grid(f: Callable, order: int, grid: np.ndarray) -> float:
    """``max |f^{(order+1)}(η)|`` over ``grid``, ``f`` an mpmath function of ``η``."""
    with mpmath.workdps(30):
        return max(abs(float(mpmath.diff(f, mpmath.mpf(float(x)), order + 1))) for x in grid)


def build(data_family: str):
    """``(X, y, model, step)``: the family's data and model, and its MHSS step (order 2)."""
    X, y = glm_data(N_ROWS, DIM, data_family, seed=SEED)
    model = glm_model(X, y, data_family)
    with model:
        step = pms.MHSS(cv_order=2)
    return X, y, model, step


def check_pairs(X, y, step, family_name: str, order: int, params: tuple,
                f: Callable, f1: Callable, f2: Callable) -> float:
    """Worst ``|ξ_i| / (c_i M)`` over 10⁴ pairs; ``f(η, y)`` etc. from the test file."""
    X, y = X[PAIR_ROWS], y[PAIR_ROWS].astype(float)
    frame = step.frame
    fam = family(family_name)
    radius = step.region_radius if fam.region_only else math.inf
    # pairs drawn in the region when there is one, else in a ball twice the region's size
    ball = radius if math.isfinite(radius) else 2.0 * region_radius(DIM)
    xt = frame.whiten_rows(X)
    eta_hat = X @ frame.theta_hat
    consts = fam.row_constants(order, np.linalg.norm(xt, axis=1), y, params,
                               eta_hat=eta_hat, radius=radius)
    if order == 2:  # the step's own constants are the formula's
        assert_stored_constants(step.row_constants[PAIR_ROWS], consts)
    g1, g2 = f1(eta_hat, y)[:, None], f2(eta_hat, y)[:, None]

    def remainders(phi, phi_new):
        u, u_new = xt @ phi.T, xt @ phi_new.T
        exact = f(eta_hat[:, None] + u_new, y[:, None]) - f(eta_hat[:, None] + u, y[:, None])
        taylor = g1 * (u_new - u)
        if order == 2:
            taylor = taylor + 0.5 * g2 * (u_new**2 - u**2)
        return exact - taylor, exact

    worst = worst_bound_ratio(remainders, consts, DIM, ball, order)
    assert worst <= 1.0, f"bound violated: max |ξ|/(c M) = {worst}"
    assert worst > 1e-4, f"the pairs never come near the bound: {worst}"
    return worst


def load_reference(data_family: str, case: tuple[int, int, int] | None = None):
    """The stored NUTS reference of ``data_family`` (``tests/make_glm_references.py``), checked
    to be of the case ``(rows, dim, data seed)``, this module's by default."""
    rows, dim, seed = case or (N_ROWS, DIM, SEED)
    data = np.load(reference_path(data_family, rows, dim), allow_pickle=False)
    settings = json.loads(str(data["settings"]))
    assert (settings["rows"], settings["dim"], settings["data_seed"]) == (rows, dim, seed)
    return data


def check_posterior(model, step, data_family: str, *, others: tuple[str, ...] = (),
                    max_rows: float | None = 10, case: tuple[int, int, int] | None = None,
                    draws: int = 3000) -> None:
    """MHSS's posterior of ``b`` (and of ``others``) against the stored NUTS reference: |z| <
    4.5, sd within 10 %, nothing clipped, fallbacks below 0.1 %, rows per iteration below
    ``max_rows``. ``case`` is ``(rows, dim, data seed)`` of the reference."""
    data = load_reference(data_family, case)
    with model:
        idata = pm.sample(draws, tune=1000, chains=2, step=step, random_seed=13, **SAMPLE)
    assert_matches(idata, data["mean"], data["sd"], data["mcse"])
    for var in others:
        assert_matches(idata, data[f"{var}_mean"], data[f"{var}_sd"], data[f"{var}_mcse"],
                       var=var)
    stats = idata.sample_stats
    assert int(stats["clipped"].sum()) == 0
    assert float(stats["full_data_fallback"].mean()) < 1e-3
    if max_rows is not None:
        assert float(stats["n_data"].mean()) < max_rows


def check_reference_derivatives(f: Callable, f1: Callable, f2: Callable, eta: np.ndarray,
                                y: np.ndarray) -> None:
    """The test file's ``f'`` and ``f''`` are central differences of its ``f`` (and of ``f'``)."""
    h = 1e-5
    for lower, upper in ((f, f1), (f1, f2)):
        np.testing.assert_allclose(upper(eta, y), (lower(eta + h, y) - lower(eta - h, y)) / (2 * h),
                                   rtol=1e-5, atol=1e-6)


def check_sup_on_intervals(family_name: str, row: Callable, draw_y: Callable, order: int,
                           params: tuple = ()) -> None:
    """``derivative_sup`` on 200 random η-intervals bounds ``|f^{(k+1)}|`` (30-digit numerical
    derivatives of ``row(y)``, an mpmath function of η) at a random point inside each."""
    rng = np.random.default_rng(order)
    fam = family(family_name)
    for _ in range(200):
        y = float(draw_y(rng))
        lo = float(rng.normal(0.0, 3.0))
        hi = lo + float(rng.exponential(1.0))
        eta = float(rng.uniform(lo, hi))
        with mpmath.workdps(30):
            d = abs(float(mpmath.diff(row(y), eta, order + 1)))
        sup = fam.derivative_sup(order, np.array([y]), *params, lower=np.array([lo]),
                                 upper=np.array([hi]))[0]
        assert d <= sup * (1 + 1e-12)


@dataclass(frozen=True)
class TwoPredictors:
    """The two predictors of the pair-test rows when ``θ = (b, λ)``, ``λ`` a scalar last.

    ``first`` (rows × d) and ``second`` (d,) are their derivatives in θ, ``first_hat`` and
    ``second_hat`` their values at θ̂, ``xt_first``/``xt_second`` the whitened derivatives,
    ``s_first``/``s_second`` their lengths per row and ``cos`` the cosine of their angle.
    """

    first: np.ndarray
    second: np.ndarray
    first_hat: np.ndarray
    second_hat: float
    xt_first: np.ndarray
    xt_second: np.ndarray
    s_first: np.ndarray
    s_second: np.ndarray
    cos: np.ndarray


def two_predictors(X: np.ndarray, step, last_in_first: float = 0.0) -> TwoPredictors:
    """The pair-test rows' two predictors: ``X b + last_in_first · λ`` and ``λ``."""
    frame, dim = step.frame, step.likelihood.dim
    first = np.hstack([X, np.full((len(X), 1), last_in_first)])
    second = np.zeros(dim)
    second[-1] = 1.0
    xt_first, xt_second = frame.whiten_rows(first), frame.whiten_rows(second[None, :])[0]
    s_first, s_second = np.linalg.norm(xt_first, axis=1), np.linalg.norm(xt_second)
    return TwoPredictors(first, second, first @ frame.theta_hat, float(frame.theta_hat[-1]),
                         xt_first, xt_second, s_first, np.full(len(X), s_second),
                         xt_first @ xt_second / (s_first * s_second))


def check_written_derivatives(f: Callable, rows: TwoPredictors, grad: tuple,
                              h22: np.ndarray | None = None) -> None:
    """A test file's gradient ``(g1, g2)`` at θ̂ (and ``∂²f/∂p2²`` when given) against central
    differences of its own ``f(p1, p2)``."""
    p1, p2, eps = rows.first_hat[:, None], rows.second_hat, 1e-5
    for g, (d1, d2) in zip(grad, ((eps, 0.0), (0.0, eps)), strict=True):
        fd = (f(p1 + d1, p2 + d2) - f(p1 - d1, p2 - d2)) / (2 * eps)
        np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-6)
    if h22 is not None:
        fd = (f(p1, p2 + eps) - 2 * f(p1, p2) + f(p1, p2 - eps)) / eps**2
        np.testing.assert_allclose(h22, fd, rtol=1e-3, atol=1e-3)


def check_two_predictor_pairs(step, rows: TwoPredictors, f: Callable, grad: tuple, hess: tuple,
                              consts: np.ndarray, order: int) -> float:
    """The bounds of a two-predictor row on 10⁴ pairs in the ball, 2000 random rows:
    Corollary 2's with the package's constants ``consts`` for these rows, and the shared-scale
    bound (``bounds.shared_scale``) from the family's suprema on the same rows.

    ``f(p1, p2)`` is the rows' log-density, ``grad = (g1, g2)`` and ``hess = (h11, h12, h22)``
    its derivatives at θ̂ (columns). For order 2 the step's own stored pieces are compared with
    the formulas: Corollary 2's constants, or the shared-scale weights when the step kept that
    bound (every test family has one σ, dispersion or shape for all rows).
    """
    pass_, dim = step._reference_pass, step.likelihood.dim
    (term,) = pass_.terms
    _, (piece,) = pass_.rows(step.theta_hat, PAIR_ROWS, check=False)
    *_, y, params = piece
    suprema = term.family.suprema(order, rows.s_first, rows.s_second, y, rows.first_hat,
                                  np.full(len(y), rows.second_hat), step.region_radius, *params)
    weights = shared_scale_rows(order, suprema, rows.s_first)
    shared = SharedScaleBound(SharedScaleRows(weights, consts.astype(np.float32), order,
                                              rows.xt_second), dim)
    if order == 2 and isinstance(step.rate_bound, SharedScaleBound):
        exact = np.stack([suprema[(m, 3 - m)] * rows.s_first**m for m in range(4)], axis=1)
        assert_stored_constants(step.rate_bound.weights[PAIR_ROWS].ravel(), exact.ravel())
        np.testing.assert_allclose(step.rate_bound.shared_row, rows.xt_second, rtol=1e-12)
    elif order == 2:
        assert_stored_constants(step.row_constants[PAIR_ROWS], consts)
    xt1, xt2, p1_hat, p2_hat = rows.xt_first, rows.xt_second, rows.first_hat, rows.second_hat
    (g1, g2), (h11, h12, h22) = grad, hess

    def quad(du, dv):
        return h11 * du**2 + 2.0 * h12 * du * dv + h22 * dv**2

    def remainders(phi, phi_new):
        u, u_new = xt1 @ phi.T, xt1 @ phi_new.T
        v, v_new = phi @ xt2, phi_new @ xt2
        exact = f(p1_hat[:, None] + u_new, p2_hat + v_new) - f(p1_hat[:, None] + u, p2_hat + v)
        taylor = g1 * (u_new - u) + g2 * (v_new - v)
        if order == 2:
            taylor = taylor + 0.5 * (quad(u_new, v_new) - quad(u, v))
        return exact - taylor, exact

    every_row = np.arange(len(PAIR_ROWS))
    worst = 0.0
    for rates in (None, lambda a, b: shared.rates(a, b).row_rates(every_row)):
        ratio = worst_bound_ratio(remainders, consts, dim, step.region_radius, order,
                                  sharp=False, seed=2, rates=rates)
        assert ratio <= 1.0, f"bound violated: max |ξ|/bound = {ratio}"
        assert ratio > 1e-3  # the pairs reach where the bound matters
        worst = max(worst, ratio)
    return worst


def check_two_predictor_family(data_family: str, pair_check: Callable, **posterior):
    """One build of the family's step (compiling it is most of the time), then every check on
    it: two predictors and a region, ``pair_check(X, y, step, order)`` on the pair-test rows
    for both orders, and :func:`check_posterior` (``posterior`` its keywords). Returns the step.
    """
    X, y, model, step = build(data_family)
    assert not step.sharp_angles and math.isfinite(step.region_radius)
    for order in (1, 2):
        pair_check(X[PAIR_ROWS], y[PAIR_ROWS].astype(float), step, order)
    check_posterior(model, step, data_family, **posterior)
    return step


def worst_on_random_boxes(row: Callable, draw_case: Callable, cases: int, seed: int) -> float:
    """Each bound ``S_α`` of a family of several predictors against 30-digit numerical
    derivatives.

    ``draw_case(rng)`` returns ``(y, point, suprema)``: a row's observation, a point of a
    random box and the package's ``{α: S_α}`` on that box (``α = (a, b)`` or ``(a, b, c)``);
    ``row(y)`` is the row's log-density as an mpmath function of the predictors. Asserts
    ``|∂^α f(point)| ≤ S_α`` in every case and returns the largest ratio.
    """
    rng = np.random.default_rng(seed)
    worst = 0.0
    with mpmath.workdps(30):
        for _ in range(cases):
            y, point, suprema = draw_case(rng)
            for alpha, bound in suprema.items():
                bound = float(np.asarray(bound).ravel()[0])
                d = abs(float(mpmath.diff(row(y), tuple(mpmath.mpf(float(v)) for v in point),
                                          alpha)))
                assert d <= bound * (1 + 1e-9) + 1e-12, (alpha, y, point)
                worst = max(worst, d / bound if bound > 0 else 0.0)
    return worst
