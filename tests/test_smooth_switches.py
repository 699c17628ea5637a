"""Switches between formulas in an automatic bound's row term (issue 26: Tobit).

- PyMC's stabilised normal log-CDFs (``normal_lcdf``, ``normal_lccdf``,
  ``log_diff_normal_cdf``) are found by rebuilding them with PyMC's code and written as the
  one-op functions of ``bounds/normal_cdf_ops.py`` (their branches are formulas of one
  analytic function); a look-alike switch of the user's is not; the rewritten graph has the
  same values and gradients;
- a comparison of a predictor left undecided by a row's box counts only where the row reads
  it: a switch on the row's data (a censored row's ``y = c``) masks its other branch;
- a Tobit row (mean, log σ) has no switch on its predictors left, and its suprema bound
  PyTensor's own derivatives at random points of random boxes, many of which straddle the
  switch point ``z = −1`` of PyMC's ``normal_lcdf`` formulas.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest
from pymc.distributions.dist_math import log_diff_normal_cdf, normal_lccdf, normal_lcdf
from pytensor.graph.rewriting.basic import in2out
from pytensor.graph.rewriting.utils import rewrite_graph
from pytensor.graph.traversal import io_toposort

import pymc_subsample as pms
from pymc_subsample.bounds.automatic import AutomaticFamily
from pymc_subsample.bounds.interval import undecided_comparisons
from pymc_subsample.bounds.normal_cdf_ops import LogNormalCDF, LogNormalCDFDiff
from pymc_subsample.model.predictor_forms import drop_check
from pymc_subsample.model.predictors import _simplify
from pymc_subsample.model.smooth_switches import rewrite_normal_log_cdfs

RNG_SEED = 20261127


def _ops(graph) -> list[str]:
    return [type(node.op.scalar_op).__name__ for node in io_toposort([], [graph])
            if isinstance(getattr(node.op, "scalar_op", None), LogNormalCDF | LogNormalCDFDiff)]


@pytest.mark.parametrize("build, ops", [
    (lambda m, s, x, y: normal_lcdf(m, s, x), ["LogNormalCDF"]),
    (lambda m, s, x, y: normal_lccdf(m, s, x), ["LogNormalCDF"]),
    (lambda m, s, x, y: log_diff_normal_cdf(m, s, x, y), ["LogNormalCDFDiff"]),
    # a user's switch at the same point between two different functions: a kink, left as is
    (lambda m, s, x, y: pt.switch(pt.lt((x - m) / s, -1.0), (x - m) / s, 0.0), []),
    (lambda m, s, x, y: pt.switch(pt.lt((x - m) / s, -1.0), -(x - m) / s, 1.0) +
     normal_lcdf(m, s, x), ["LogNormalCDF"]),
])
def test_pymc_normal_log_cdfs_are_rewritten_and_look_alikes_are_not(build, ops):
    m, s, x, y = (pt.vector(n, dtype="float64") for n in "msxy")
    graph = build(m, s, x, y)
    rewritten = rewrite_normal_log_cdfs(graph)
    assert _ops(rewritten) == ops
    rng = np.random.default_rng(RNG_SEED)
    values = [rng.normal(size=50), np.exp(rng.normal(size=50)), rng.normal(0, 3, 50)]
    values.append(values[2] - np.exp(rng.normal(size=50)))  # y < x
    for g in (lambda v: v, lambda v: pytensor.grad(v.sum(), [m, s, x])):
        before, after = (pytensor.function([m, s, x, y], g(v), mode="FAST_COMPILE",
                                           on_unused_input="ignore")(*values)
                         for v in (graph, rewritten))
        # PyMC's graphs take √2 as a float32 constant (``pt.sqrt(2.0)``): z is off by a
        # relative 2·10⁻⁸ there, log Φ(z) by up to z² times that in the upper tail
        np.testing.assert_allclose(after, before, rtol=1e-5, atol=1e-12)


def test_an_undecided_comparison_counts_only_where_the_row_reads_it():
    """``switch(d, switch(p < 0, p, p²), log(p + 2))`` with ``d`` data: a box across 0 is
    undecided where ``d`` picks the inner switch, not where it picks the other branch."""
    p, d = pt.vector("p", dtype="float64"), pt.vector("d", dtype="bool")
    cond = pt.lt(p, 0.0)
    f = pt.switch(d, pt.switch(cond, p, p**2), pt.log(p + 2.0))
    lo = np.array([-0.1, -0.1, 0.1, 0.1])
    hi = np.array([0.1, 0.1, 0.2, 0.2])
    flags = np.array([True, False, True, False])
    live = undecided_comparisons(f, {p: (lo, hi), d: flags}, [cond])
    np.testing.assert_array_equal(live, [True, False, False, False])
    # a comparison cast to a number is a jump too
    g = pt.switch(d, pt.cast(cond, "float64") * p, p)
    live = undecided_comparisons(g, {p: (lo, hi), d: flags}, [cond])
    np.testing.assert_array_equal(live, [True, False, False, False])


N_ROWS = 1500


def test_tobit_row_suprema_hold_across_the_switch_point():
    rng = np.random.default_rng([RNG_SEED, 1])
    p0, p1 = pt.vector("p0", dtype="float64"), pt.vector("p1", dtype="float64")
    yv, cv = pt.vector("y", dtype="float64"), pt.vector("c", dtype="float64")
    dist = pm.Censored.dist(pm.Normal.dist(mu=p0, sigma=pt.exp(p1)), lower=cv, upper=None)
    f = rewrite_graph(rewrite_normal_log_cdfs(pm.logp(dist, yv)), include=("canonicalize",),
                      custom_rewrite=in2out(drop_check))
    auto = AutomaticFamily(_simplify(f), [p0, p1], [yv, cv], "tobit", "tobit")
    assert _ops(auto._f) == ["LogNormalCDF"] and not auto.inequality_switches
    # μ̂, log σ̂; the bound at z = (c − μ)/σ, half the rows within 0.3 of z = −1
    hats = [rng.uniform(-2, 2, N_ROWS), rng.uniform(-1, 1, N_ROWS)]
    sigma = np.exp(hats[1])
    z = np.where(rng.uniform(size=N_ROWS) < 0.5, rng.uniform(-1.3, -0.7, N_ROWS),
                 rng.uniform(-3.0, 3.0, N_ROWS))
    c = hats[0] + z * sigma
    y = np.where(rng.uniform(size=N_ROWS) < 0.5, c,
                 np.maximum(c, hats[0] + sigma * rng.normal(size=N_ROWS)))
    norms = [10.0 ** rng.uniform(-3.5, -1.5, N_ROWS) for _ in range(2)]
    radius, order = 5.0, 1
    sup = auto.all_suprema(order, tuple(norms), y, tuple(hats), radius, (y, c))
    assert all(np.isfinite(s).all() for s in sup.values())
    # boxes whose z-range holds −1 (PyMC's switch point) on censored rows
    w = [radius * s for s in norms]
    z_ends = [(c - (hats[0] + a * w[0])) * np.exp(-(hats[1] + b * w[1]))
              for a in (-1, 1) for b in (-1, 1)]
    straddle = (np.min(z_ends, axis=0) < -1) & (np.max(z_ends, axis=0) > -1) & (y == c)
    assert straddle.sum() > 100
    alphas, graphs = auto.derivatives(order)
    point_fn = pytensor.function([p0, p1, yv, cv], graphs[: len(sup)], mode="FAST_COMPILE",
                                 on_unused_input="ignore")
    for _ in range(4):
        points = [h + radius * s * rng.uniform(-1, 1, N_ROWS)
                  for h, s in zip(hats, norms, strict=True)]
        exact = dict(zip(alphas, point_fn(*points, y, c), strict=False))
        for alpha, s_alpha in sup.items():
            assert np.all(np.abs(exact[alpha]) <= s_alpha), alpha


def test_truncated_normal_reads_its_mean_once_and_its_rates_bound_every_remainder():
    """``pm.Truncated(Normal(μ, σ), lower=a)`` with ``a ≠ 0``: its normaliser reads ``a − μ``
    and its density ``y − μ``, two offsets of one ``μ``, read as the one predictor ``μ``
    (beside ``log σ``). Where ``μ`` lies below ``a`` the two parts' derivatives nearly cancel
    (the normaliser's ``(a − μ)²/2σ²`` against the density's ``(y − μ)²/2σ²``), which the
    bound sees only in one variable: read as two predictors (three with ``log σ``) MHSS read
    688 rows an iteration at N = 2·10⁵ where 69 % of the means lay below ``a``
    (docs/benchmarks.md, "Censored and truncated Normals"). On random pairs inside the region
    ``|ξ_i|`` stays under the step's rates on every row, the same both ways."""
    from pymc_subsample.model.predictors import PredictorTerm
    from tests.pairs import step_remainder_shares
    from tests.row_models import truncated_normal_offset

    model = truncated_normal_offset(2000, seed=RNG_SEED)
    with model:
        step = pms.MHSS(progressbar=False)
    (term,) = step._reference_pass.terms
    assert isinstance(term, PredictorTerm) and term.family.n_predictors == 2
    tight = step_remainder_shares(step, np.random.default_rng([RNG_SEED, 3]))
    assert max(tight) > 1e-3  # the pairs reach where the remainder is a visible share
