"""The likelihood layer reads every PyMC construct a row-wise model uses (issue 26, item 2).

For each model of :mod:`tests.row_models` (censored, truncated, hurdle, zero-inflated, per-row
mixtures, ordinal, categorical with a reference column, binomial with per-row trials, the
positive families), the per-row terms :meth:`SubsampledLikelihood.loglik_terms` on random row
indices (repeats included) equal PyMC's own elementwise log density of the observed variable
(``model.logp(vars=[rv], sum=False)``) evaluated on all rows, at random parameter points, to
1e-10, and so do their gradients, which the steps' Laplace frame and control variates use;
the compiled terms read only the rows ``idx``.

Before the rebuild resized the components of censored and hurdle distributions and indexed
N-sized constants, ``Censored(Weibull)``, ``HurdlePoisson``, ``HurdleNegativeBinomial`` and a
``Categorical`` whose reference column is ``pt.zeros((N, 1))`` were refused at construction;
while the terms came from ``pm.logp`` (not the model's path, ``conditional_logp``), a
truncated normal's gradient was NaN.
"""

from __future__ import annotations

import numpy as np
import pytest
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.gradient import grad
from pytensor.graph.basic import Constant
from pytensor.tensor.elemwise import DimShuffle

from pymc_subsample.model.likelihood import SubsampledLikelihood
from tests.row_models import MODELS

N = 60
TOL = 1e-10
#: the models whose terms go through PyMC's normal log-CDFs, which the likelihood layer writes
#: as the ops of ``bounds/normal_cdf_ops.py`` (``tests/test_normal_cdf_ops.py`` checks those
#: against 30-digit mpmath): PyMC's graphs take √2 as a float32 constant (``pt.sqrt(2.0)``), so
#: their z is off by a relative 2·10⁻⁸, and the two agree to about that
NORMAL_CDF_TOL = {name: 1e-6 for name in ("censored_normal_left", "censored_normal_both",
                                          "truncated_normal", "truncated_normal_offset",
                                          "ordered_probit")}


@pytest.mark.parametrize("name", list(MODELS))
def test_terms_equal_pymc_elementwise_logp(name):
    model = MODELS[name](N, seed=3)
    # the Python linker: no C compilation, which would cost more than the whole check
    lik = SubsampledLikelihood(model, compile_kwargs={"mode": "FAST_COMPILE"})
    (rv,) = model.observed_RVs
    # PyMC's own elementwise log density of the observed variable on all N rows, and the
    # gradient of its sum over the rows idx, as graphs of θ
    (ref_graph,) = lik.in_theta(model.logp(vars=[rv], sum=False, jacobian=False))
    ref_grad = grad(ref_graph[lik.idx].sum(), lik.theta)
    ours_grad = grad(lik.terms.sum(), lik.theta)
    fn = lik.compile([lik.theta, lik.idx], [ref_graph, ref_grad, lik.terms, ours_grad])
    rng = np.random.default_rng(7)
    tol = NORMAL_CDF_TOL.get(name, TOL)
    theta0 = lik.ravel(model.initial_point())
    for _ in range(2):
        theta = theta0 + 0.3 * rng.standard_normal(lik.dim)
        idx = rng.integers(0, N, size=25).astype(np.int64)  # repeats allowed
        ref, ref_g, terms, g = fn(theta, idx)
        assert ref.shape == (N,) and np.all(np.isfinite(ref)) and np.all(np.isfinite(ref_g))
        np.testing.assert_allclose(terms, ref[idx], rtol=tol, atol=tol)
        np.testing.assert_allclose(lik.loglik_terms(theta, idx), ref[idx], rtol=tol, atol=tol)
        # the steps' Laplace frame and control variates differentiate the terms
        np.testing.assert_allclose(g, ref_g, rtol=tol, atol=tol)
    # cost ∝ len(idx): every N-row array, the N-sized constants folded from the graph among
    # them, is read through an index on idx (or only its shape), and no component draws
    fgraph = lik._terms_fn.maker.fgraph
    reads = _row_reads(fgraph)
    assert reads and all(
        (op.startswith("AdvancedSubtensor") and on_idx) or op.startswith("Shape")
        for op, on_idx in reads
    ), reads
    ops = [type(n.op).__name__ for n in fgraph.toposort()]
    assert not [op for op in ops if op.endswith("RV")], ops


def _row_reads(fgraph) -> list[tuple[str, bool]]:
    """``(op, reads it on idx)`` for every client of an N-row array (constant or pm.Data) of
    the compiled terms (through transposes, O(1) views)."""
    idx = fgraph.inputs[1]
    found = []
    for var in fgraph.variables:
        if isinstance(var, SharedVariable):
            value = var.get_value(borrow=True)
        elif isinstance(var, Constant):
            value = var.data
        else:
            continue
        if N not in np.shape(value):
            continue
        stack = [var]
        while stack:
            for client, _ in fgraph.clients[stack.pop()]:
                if isinstance(client.op, DimShuffle):
                    stack.extend(client.outputs)
                else:
                    found.append((type(client.op).__name__, idx in client.inputs))
    return found
