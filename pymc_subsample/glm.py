"""Find generalised-linear-model structure in a PyMC model and compute the MHSS row constants.

MHSS needs ``|ξ_i(θ, θ')| ≤ c_i · M(θ, θ')`` (Prado, Nemeth & Sherlock 2024, eq. (3)). For a
GLM row ``ℓ_i(θ) = f(η_i(θ); y_i)`` with an affine linear predictor ``η_i(θ) = x_iᵀθ + o_i``
Corollary 2 gives ``c_i = L(y_i)·‖x_i‖^{k+1}`` for Taylor order ``k`` (see :mod:`bounds`).
This module reads the family, the link and ``η`` off each observed variable's graph, checks
that ``η`` is affine in the sampled vector ``θ`` and evaluates ``‖x_i‖`` for all rows once.

Supported (ALGORITHMS.md §3.1): Bernoulli with a logistic link (``logit_p=η`` or
``p=pm.math.sigmoid(η)``), Bernoulli with a probit link (``p=pm.math.invprobit(η)``),
Poisson with mean ``softplus(η)`` (``pm.math.log1pexp`` / ``pt.softplus``), and Normal with
identity mean and a fixed ``σ`` (a constant or per-row data, not a sampled parameter).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytensor.tensor as pt
from pytensor.graph.basic import Variable
from pytensor.graph.traversal import ancestors
from pytensor.scalar.math import Erfc, Sigmoid, Softplus
from pytensor.tensor.elemwise import Elemwise
from pytensor.tensor.random.basic import BernoulliRV, NormalRV, PoissonRV
from scipy.special import ndtr

from pymc_subsample.bounds import glm_row_constants
from pymc_subsample.errors import SubsamplingModelError
from pymc_subsample.likelihood import SubsampledLikelihood

__all__ = ["GLMTerm", "detect_glm_terms", "glm_bound_constants"]


@dataclass(frozen=True)
class GLMTerm:
    """One observed variable recognised as a GLM on the rows ``idx``.

    Attributes
    ----------
    name : str
        The observed variable.
    family : str
        One of :data:`pymc_subsample.bounds.FAMILIES`.
    eta : Variable
        Linear predictor on the rows ``idx`` as a graph of ``θ``.
    y : Variable
        Observed values on the rows ``idx``.
    sigma : Variable or None
        Normal's fixed standard deviation on the rows ``idx`` (broadcast), else ``None``.
    """

    name: str
    family: str
    eta: Variable
    y: Variable
    sigma: Variable | None = None


def _scalar_op(var: Variable):
    owner = var.owner
    if owner is not None and isinstance(owner.op, Elemwise):
        return owner.op.scalar_op
    return None


def _unsupported(name: str, what: str) -> SubsamplingModelError:
    return SubsamplingModelError(
        f"MHSS has no automatic bound for observed variable '{name}': {what}. Supported: "
        "Bernoulli with logit or probit link, Poisson with mean softplus(eta), Normal with "
        "identity mean and fixed sigma, each with a linear predictor affine in the parameters. "
        "Pass your own bound with MHSS(bound=pms.UserBound(...)), or use AusterityMH or "
        "BarkerMinibatch, which need no bound."
    )


def _depends_on_parameters(var: Variable, lik: SubsampledLikelihood) -> bool:
    values = set(lik.value_vars)
    return any(v in values for v in ancestors([var]))


def detect_glm_terms(lik: SubsampledLikelihood) -> list[GLMTerm]:
    """Recognise every observed variable of ``lik`` as a supported GLM, or raise.

    Raises
    ------
    SubsamplingModelError
        Naming the variable, when its family or link has no bound here.
    """
    rows = lik.idx.shape[0]
    terms = []
    for block in lik.blocks:
        op = block.rv.owner.op
        params = op.dist_params(block.rv.owner)
        sigma = None
        if isinstance(op, BernoulliRV):
            (p,) = params
            if isinstance(_scalar_op(p), Sigmoid):
                family, eta = "bernoulli_logit", p.owner.inputs[0]
            else:
                erfc = [v for v in ancestors([p]) if isinstance(_scalar_op(v), Erfc)]
                if not erfc:
                    raise _unsupported(block.name, "its Bernoulli p is not sigmoid(eta) or "
                                       "invprobit(eta)")
                family, eta = "bernoulli_probit", -np.sqrt(2.0) * erfc[0].owner.inputs[0]
                _check_probit(lik, block.name, p, eta)
        elif isinstance(op, PoissonRV):
            (mu,) = params
            if not isinstance(_scalar_op(mu), Softplus):
                raise _unsupported(block.name, "its Poisson mean is not softplus(eta) (the exp "
                                   "link has no bounded third derivative)")
            family, eta = "poisson_softplus", mu.owner.inputs[0]
        elif isinstance(op, NormalRV):
            mu, sd = params
            if _depends_on_parameters(sd, lik):
                raise _unsupported(block.name, "its Normal sigma is a sampled parameter")
            family, eta = "normal_identity", mu
            sigma = pt.broadcast_to(sd, (rows,))
        else:
            raise _unsupported(block.name, f"its family is {type(op).__name__}")
        eta = pt.broadcast_to(eta, (rows,))
        (eta_theta,) = lik.in_theta([eta])
        terms.append(GLMTerm(block.name, family, eta_theta, block.value, sigma))
    return terms


def _check_probit(lik: SubsampledLikelihood, name: str, p: Variable, eta: Variable) -> None:
    """Make sure the erfc found in ``p`` really is ``Φ(η)`` (numerically, on a few rows)."""
    p_theta, eta_theta = lik.in_theta([p, eta])
    fn = lik.compile([lik.theta, lik.idx], [pt.broadcast_to(p_theta, eta_theta.shape), eta_theta])
    idx = np.arange(min(lik.n_rows, 64), dtype=np.int64)
    theta = lik.ravel(lik.initial_point) + 0.1
    p_val, eta_val = fn(theta, idx)
    if not np.allclose(p_val, ndtr(eta_val), rtol=1e-8, atol=1e-12):
        raise _unsupported(name, "its Bernoulli p contains erfc but is not invprobit(eta)")


def glm_bound_constants(
    lik: SubsampledLikelihood, theta_hat: np.ndarray, order: int, terms: list[GLMTerm] | None = None
) -> np.ndarray:
    """Row constants ``c_i`` (already divided by the temperature) for all N rows.

    ``‖x_i‖`` is read off an affine ``η`` as ``η(θ̂ + e_k) − η(θ̂)`` for each coordinate ``k``
    (ALGORITHMS.md §3.1); affinity is checked at a random point on every row. One O(N·d) pass
    in chunks; nothing of size N×d is kept.

    Raises
    ------
    SubsamplingModelError
        If a linear predictor is not affine in ``θ``.
    """
    terms = detect_glm_terms(lik) if terms is None else terms
    fn = lik.compile(
        [lik.theta, lik.idx],
        [out for t in terms for out in (t.eta, t.y, t.sigma if t.sigma is not None else t.eta)],
    )
    theta_hat = np.asarray(theta_hat, dtype=np.float64)
    rng = np.random.default_rng(20240611)
    theta_probe = theta_hat + rng.normal(size=theta_hat.shape)
    basis = np.eye(lik.dim)
    consts = np.zeros(lik.n_rows)
    for chunk in lik.row_chunks():
        at_hat = fn(theta_hat, chunk)
        cols = [fn(theta_hat + basis[k], chunk) for k in range(lik.dim)]
        at_probe = fn(theta_probe, chunk)
        for j, term in enumerate(terms):
            eta0, y, sd = at_hat[3 * j], at_hat[3 * j + 1], at_hat[3 * j + 2]
            x = np.stack([c[3 * j] - eta0 for c in cols], axis=1)
            predicted = eta0 + x @ (theta_probe - theta_hat)
            if not np.allclose(at_probe[3 * j], predicted, rtol=1e-6, atol=1e-6):
                raise _unsupported(
                    term.name, "its linear predictor is not affine in the sampled parameters"
                )
            x_norm = np.linalg.norm(x, axis=1)
            y = np.asarray(y, dtype=np.float64)
            if term.family == "normal_identity":
                # per-row known sigma: c_i = L(σ_i)·‖x_i‖^(k+1), with L(σ) = 1/σ² or 0
                unit = glm_row_constants(x_norm, y, term.family, order, sigma=1.0)
                consts[chunk] += unit / np.asarray(sd, dtype=np.float64) ** 2
            else:
                consts[chunk] += glm_row_constants(x_norm, y, term.family, order)
    return consts / lik.temperature
