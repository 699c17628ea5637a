"""The log-likelihood of an observed variable, row by row: ``ℓ_i`` of each row of a rebuilt
:class:`~pymc_subsample.model.rebuild.ObservedBlock`, the terms
:class:`~pymc_subsample.model.likelihood.SubsampledLikelihood` sums and subsamples."""

from __future__ import annotations

import pytensor.scalar.math as psm
import pytensor.tensor as pt
from pymc.logprob.basic import conditional_logp
from pytensor.graph.basic import Variable
from pytensor.graph.replace import graph_replace
from pytensor.graph.rewriting.utils import rewrite_graph
from pytensor.graph.traversal import toposort
from pytensor.tensor.elemwise import Elemwise
from pytensor.tensor.random.op import RandomVariable

from pymc_subsample.errors import SubsamplingModelError
from pymc_subsample.links import stable_bernoulli_logp
from pymc_subsample.model.predictor_forms import constant_value
from pymc_subsample.model.rebuild import ObservedBlock
from pymc_subsample.model.smooth_switches import rewrite_normal_log_cdfs

__all__ = ["rewrite_incomplete_beta_at_one", "row_logp"]


def rewrite_incomplete_beta_at_one(graph: Variable) -> Variable:
    """``graph`` with every regularised incomplete beta ``I_x(a, b)`` whose ``b`` is the
    constant 1 written as ``x^a = exp(a log x)`` (``B(x; a, 1) = x^a/a``, ``B(a, 1) = 1/a``).

    A negative binomial's ``P(Y = 0) = I_p(α, 1)`` (its log-CDF at 0: a hurdle's or a
    truncation's normaliser) is PyTensor's ``BetaInc``, a scalar loop with no second
    derivative, which the order-2 control variates need; ``exp(a log x)`` has every
    derivative, and ``log`` of it folds to ``a log x`` in PyTensor's canonicalisation.
    """
    replace = {}
    for node in toposort([graph]):
        if not (isinstance(node.op, Elemwise) and isinstance(node.op.scalar_op, psm.BetaInc)):
            continue
        a, b, x = node.inputs
        # PyMC writes b as floor(value) + 1 of a constant value: fold it before reading it
        if constant_value(rewrite_graph(b, include=("canonicalize",))) == 1.0:
            out = node.outputs[0]
            replace[out] = pt.cast(pt.exp(a * pt.log(x)), out.type.dtype)
    return graph_replace(graph, replace, strict=False) if replace else graph


def row_logp(block: ObservedBlock):
    """The block's log-likelihood, one term per row (summed over any further axes)."""
    stable = stable_bernoulli_logp(block.rv, block.value)
    if stable is not None:
        return stable
    # PyMC's model-level path (``model.logp`` uses it), not ``pm.logp``: its rewrites of the
    # measurable graph give, e.g. for a truncated normal with an infinite bound, a graph
    # whose gradient is finite where pm.logp's is NaN
    value = block.value.type()
    # PyMC's stabilised normal log-CDFs written as the one smooth function each is (an op with
    # a tight interval rule) while their graphs are still as PyMC built them, before PyMC's
    # rewrites of the measurable graph: in the variable's parameters (an ordinal probit's
    # probabilities), then in the log-CDFs the logp itself builds (a censored Normal's)
    rv = rewrite_normal_log_cdfs(block.rv)
    logp = graph_replace(conditional_logp({rv: value})[value], {value: block.value},
                         strict=False)
    logp = rewrite_normal_log_cdfs(logp)
    logp = rewrite_incomplete_beta_at_one(logp)
    if any(isinstance(n.op, RandomVariable) for n in toposort([logp])):
        # a mixture's logp reads its components' shapes: without this rewrite every call
        # would also draw the components (PyMC's compile adds their RNG updates), some on
        # all N rows
        logp = rewrite_graph(logp, include=("canonicalize",))
    if logp.ndim == 0:
        raise SubsamplingModelError(
            f"The log-likelihood of observed variable '{block.name}' is a single joint term "
            "over all rows (e.g. a multivariate distribution across the data axis), not a sum "
            "over rows. Subsampling needs independent rows: reshape it so each row is one "
            "draw, or sample with NUTS."
        )
    if logp.ndim > 1:
        logp = logp.sum(axis=tuple(range(1, logp.ndim)))
    return logp
