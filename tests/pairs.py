"""Random pairs of points in a ball of the Laplace frame, for the region-bound property tests,
and random points of random boxes, for the interval rules' tests."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from pymc_subsample.bounds import remainder_scale


def ball(rng: np.random.Generator, n_pairs: int, dim: int, radius: float) -> np.ndarray:
    """Points in ``‖φ‖ ≤ radius``: uniform directions, radii from the centre to the rim."""
    u = rng.standard_normal((n_pairs, dim))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    return u * (radius * rng.uniform(0.0, 1.0, size=(n_pairs, 1)) ** (1.0 / dim))


def worst_bound_ratio(
    remainders: Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]],
    consts: np.ndarray,
    dim: int,
    radius: float,
    order: int,
    *,
    sharp: bool = True,
    seed: int = 1,
    batches: int = 20,
    pairs_per_batch: int = 500,
    rates: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None,
) -> float:
    """``max (|ξ_i| − rounding) / (c_i M)`` over ``batches × pairs_per_batch`` pairs in the ball.

    Odd batches pair independent points, even ones close pairs (``φ' = φ + 0.01 z``, pulled
    back into the ball). ``remainders(φ, φ')`` returns ``(ξ, exact)`` of shape
    ``(rows, pairs)``: the remainders and the exact differences ``ℓ_i(φ') − ℓ_i(φ)`` (whose
    size sets the rounding allowed). ``rates(φ, φ')``, when given, is a bound's per-row rates
    ``B_i`` of one pair, in place of ``c_i M`` (``consts`` is then not read).
    """
    rng = np.random.default_rng(seed)
    worst = 0.0
    for batch in range(batches):
        phi = ball(rng, pairs_per_batch, dim, radius)
        phi_new = ball(rng, pairs_per_batch, dim, radius) if batch % 2 else (
            phi + 0.01 * rng.normal(size=phi.shape))
        phi_new *= np.minimum(1.0, radius / np.linalg.norm(phi_new, axis=1, keepdims=True))
        xi, exact = remainders(phi, phi_new)
        if rates is None:
            m = np.array([remainder_scale(a, b, np.zeros(dim), order, sharp=sharp)
                          for a, b in zip(phi, phi_new, strict=True)])
            bound = consts[:, None] * m[None, :]
        else:
            bound = np.column_stack([rates(a, b) for a, b in zip(phi, phi_new, strict=True)])
        slack = 1e-9 * np.abs(exact).max() + 1e-12
        worst = max(worst, float(((np.abs(xi) - slack) / bound).max()))
    return worst


def assert_stored_constants(stored: np.ndarray, exact: np.ndarray, rtol: float = 1e-8) -> None:
    """MHSS row constants as stored (float32 rounded up) against their float64 formula.

    Each stored ``c_i`` is a bound on the exact one (never below it, beyond the formula's own
    rounding ``rtol``) and at most one float32 step above it (relative ``2⁻²³``, checked as
    ``2⁻²²``).
    """
    stored = np.asarray(stored)
    assert stored.dtype == np.float32
    value = stored.astype(np.float64)
    exact = np.asarray(exact, dtype=np.float64)
    assert np.all(value >= exact * (1.0 - rtol)), "a stored constant is below its formula"
    np.testing.assert_allclose(value, exact, rtol=2.0**-22 + rtol)


def poisson_process_counts(rates, n_rows: int, rng: np.random.Generator, *,
                           reps: int = 20_000, draws: float = 50.0):
    """Counts of each row over ``reps`` calls of a rate bound's ``draw`` (``bounds.rates``),
    each with ``Poisson(envelope · s)`` index draws, ``s`` set for about ``draws`` of them,
    and the counts a Poisson process of rates ``B_i`` would give in expectation,
    ``B_i · reps · s``. Checks on the way that the rates ``draw`` returns are ``row_rates``'s.
    """
    scale = draws / rates.envelope
    counts = np.zeros(n_rows)
    for _ in range(reps):
        idx, kept = rates.draw(rng, int(rng.poisson(rates.envelope * scale)))
        np.testing.assert_allclose(kept, rates.row_rates(idx))
        counts += np.bincount(idx, minlength=n_rows)
    return counts, rates.row_rates(np.arange(n_rows)) * reps * scale


def assert_poisson_counts(observed: np.ndarray, mean: np.ndarray, least: int) -> None:
    """|z| < 4.5 for every count expected at least 25 times (and at least ``least`` of them),
    and for the rest pooled."""
    enough = mean >= 25
    assert enough.sum() >= least
    z = (observed[enough] - mean[enough]) / np.sqrt(mean[enough])
    assert np.max(np.abs(z)) < 4.5
    rest = ~enough
    if rest.any():
        pooled = (observed[rest].sum() - mean[rest].sum()) / np.sqrt(mean[rest].sum())
        assert abs(pooled) < 4.5


def points_inside(rng, lo, hi):
    """Random points of the boxes ``[lo, hi]`` (along the last axis), the first 50 at ``lo``
    and the next 50 at ``hi``: the ends themselves, where a rule's enclosure is tight."""
    t = rng.uniform(0.0, 1.0, lo.shape)
    t[..., :50] = 0.0
    t[..., 50:100] = 1.0
    return np.clip(lo + t * (hi - lo), lo, hi)


def step_remainder_shares(step, rng: np.random.Generator, n_pairs: int = 20) -> list[float]:
    """An MHSS step's bound on random pairs inside its region: ``|ξ_i| ≤ c_i M`` on every
    row and ``M`` the same both ways (asserted), or, for a step with a rate bound (the
    shared-scale bound of a sampled σ), ``|ξ_i|`` under its per-row rates, the same both ways;
    returns each pair's ``Σ|ξ_i| / Σ(bound)``, so that a test can check the pairs reach where
    the remainder is a visible share."""
    lik, frame, cv = step.likelihood, step.frame, step.control_variate
    every = np.arange(lik.n_rows, dtype=np.int64)
    consts = np.asarray(step.row_constants, dtype=np.float64)
    shares = []
    for _ in range(n_pairs):
        u, v = rng.standard_normal((2, lik.dim))
        phi = u / np.linalg.norm(u) * rng.uniform(0.0, step.region_radius)
        phi_new = v / np.linalg.norm(v) * rng.uniform(0.0, step.region_radius)
        theta, theta_new = frame.unwhiten(phi), frame.unwhiten(phi_new)
        if step.rate_bound is None:
            m = step._remainder_scale(theta, theta_new, phi, phi_new)
            back = step._remainder_scale(theta_new, theta, phi_new, phi)
            assert np.isclose(m, back, rtol=1e-12, atol=0.0), (m, back)
            bound = consts * m
        else:
            bound = step.rate_bound.rates(phi, phi_new).row_rates(every)
            back = step.rate_bound.rates(phi_new, phi).row_rates(every)
            np.testing.assert_allclose(bound, back, rtol=1e-12, atol=0.0)
        xi = np.abs(cv.remainder(theta, theta_new, every))
        assert np.all(xi <= bound)
        shares.append(xi.sum() / bound.sum())
    return shares


def synthetic_level_rows(rng: np.random.Generator, n_rows: int, n_levels: int, n_dense: int
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Whitened logistic rows of a level model: ``(x̃, η̂, y)``, 90 % of the rows on one level
    (scale 10^−1.5 … 10^−0.5), the rest on none, ``n_dense`` fixed coordinates (10^−3 …
    10^−1)."""
    xt = np.zeros((n_rows, n_levels + n_dense))
    xt[:, n_levels:] = (rng.normal(size=(n_rows, n_dense))
                        * 10 ** rng.uniform(-3, -1, size=(n_rows, 1)))
    one = rng.uniform(size=n_rows) < 0.9
    xt[one, rng.integers(0, n_levels, one.sum())] = 10 ** rng.uniform(-1.5, -0.5, one.sum())
    eta_hat = rng.normal(size=n_rows)
    y = rng.binomial(1, 1.0 / (1.0 + np.exp(-eta_hat))).astype(float)
    return xt, eta_hat, y


def assert_level_rates_consistent(bound, rates, phi: np.ndarray, phi_new: np.ndarray,
                                  b: np.ndarray, n_levels: int, *, totals: bool) -> None:
    """A level bound's per-row rates ``b`` of the move ``φ → φ'``: zero on rows of no level,
    under each category's envelope (over its own rows' shares), and with ``totals`` each
    level's ``Λ_k`` (``rates.expected``) their sum."""
    none = bound.category == n_levels
    assert np.all(b[none] == 0.0)
    _, envelope = bound.coefficients(phi, phi_new, by_category=True)
    top = np.zeros(n_levels + 2)
    np.maximum.at(top, bound.category, bound.sampler.weights.astype(np.float64))
    assert np.all(b <= top[bound.category] * envelope[bound.category] * (1 + 1e-12))
    if totals:
        np.testing.assert_allclose(
            rates.expected, np.bincount(bound.category[~none], b[~none], n_levels), rtol=1e-8)
