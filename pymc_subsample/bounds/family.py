r"""What a likelihood family is to MHSS: one small object per family and link.

A GLM row is :math:`\ell_i(\theta) = f(\eta_i; y_i, \kappa_i)` with one linear predictor
:math:`\eta_i` affine in :math:`\theta` and fixed (not sampled) per-row parameters
:math:`\kappa_i` (a Normal's σ, a Gamma's shape, a Student-t's ν and σ). By Theorem 2 of Prado,
Nemeth & Sherlock (2024) and Cauchy–Schwarz, the order-``k`` control-variate error of such a row
is at most :math:`c_i M(\theta, \theta')` with

.. math::

    c_i = \sup_{\eta \in I_i} |f^{(k+1)}(\eta; y_i, \kappa_i)| \; s_i^{k+1},

where :math:`s_i` is the length of the row's covariate vector (whitened,
:math:`\lVert L^\top x_i \rVert`, or Euclidean, :math:`\lVert x_i\rVert`) and :math:`I_i` holds
every :math:`\eta_i` the Taylor remainder visits: the whole line for families whose derivatives
are bounded, the interval :math:`\hat\eta_i \pm r s_i` on the region :math:`\lVert\varphi\rVert
\le r` for the others (``docs/methods/mhss.md``, "Region-valid bounds").

A family therefore gives four things: how to read :math:`\eta` and :math:`\kappa` off the
observed variable's PyMC graph (:meth:`Family.read`), :math:`f, f', f''` as PyTensor graphs for
the data passes and control variates (:meth:`Family.terms`), :math:`f` in NumPy
(:meth:`Family.loglik`, for tests and users) and :meth:`Family.derivative_sup`. Adding a family
is one subclass registered with :func:`register` and one test file.
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np
import pytensor.tensor as pt
from pytensor.graph.basic import Variable
from pytensor.graph.replace import graph_replace

from pymc_subsample.bounds.remainder import angle_factor, check_order
from pymc_subsample.links import scalar_op

__all__ = [
    "Family",
    "LocationScaleFamily",
    "autodiff_row_terms",
    "combine_multi_partials",
    "combine_partials",
    "combine_predictor_partials",
    "family",
    "location_scale_families",
    "multi_indices",
    "register",
    "registered",
    "scalar_op",
    "upper_pairs",
]


class Family:
    """A likelihood family and link whose rows are ``f(η; y, κ)``.

    Class attributes
    ----------------
    name : str
        Identifier, e.g. ``"poisson_log"``.
    description : str
        How a user writes it in PyMC (for messages and docs).
    rv_op : type
        PyTensor ``RandomVariable`` op class of the observed variable.
    params : tuple of str
        Names of the fixed per-row parameters ``κ`` (empty for most families).
    region_only : bool
        ``True`` when ``sup |f^{(k+1)}|`` over the whole line is infinite for some ``y``: the
        constants then hold on a region of the Laplace frame only.
    """

    name: ClassVar[str]
    description: ClassVar[str]
    rv_op: ClassVar[type]
    params: ClassVar[tuple[str, ...]] = ()
    region_only: ClassVar[bool] = False
    #: Whether :meth:`loglik` is the model's row log-likelihood to rounding, so that the
    #: control variates may evaluate their remainders with it
    #: (:mod:`pymc_subsample.model.row_table`).
    loglik_is_model: ClassVar[bool] = True
    #: What to say when the predictor read is not affine, for a family whose :meth:`read`
    #: accepts any graph (a log link reads ``log(mean)``); ``None``: "not affine".
    link_hint: ClassVar[str | None] = None

    def read(self, dist_params: list[Variable]) -> tuple[Variable, tuple[Variable, ...]] | None:
        """``(η, κ)`` read off the observed variable's distribution parameters, or ``None``.

        ``None`` means the graph is not this family's link; the caller then tries the next
        family of the same distribution. ``η`` need not be simplified: the caller rewrites it
        and checks that it is affine in the sampled parameters, and that ``κ`` is free of them.
        """
        raise NotImplementedError

    def terms(
        self, eta: Variable, y: Variable, *params: Variable
    ) -> tuple[Variable, Variable, Variable]:
        """``f``, ``f'`` and ``f''`` per row as float64 PyTensor graphs of ``η`` (closed forms)."""
        raise NotImplementedError

    def loglik(self, eta: np.ndarray, y: np.ndarray, *params: np.ndarray) -> np.ndarray:
        """``f(η; y, κ)`` per row in NumPy, equal to the distribution's log-density."""
        raise NotImplementedError

    def derivative_sup(
        self,
        order: int,
        y: np.ndarray,
        *params: np.ndarray,
        lower: np.ndarray | float = -math.inf,
        upper: np.ndarray | float = math.inf,
    ) -> np.ndarray:
        r"""Per-row bound on :math:`\sup_{\eta\in[\text{lower}, \text{upper}]}|f^{(k+1)}(\eta)|`.

        ``order`` is the Taylor order ``k`` (1 or 2). The default interval is the whole line,
        where a :attr:`region_only` family's bound is infinite for some rows.
        """
        raise NotImplementedError

    def check_y(self, y: np.ndarray) -> np.ndarray:
        """``y`` as float64, or ``ValueError`` when it is outside the family's support."""
        y = np.asarray(y, dtype=np.float64)
        if not np.all(np.isfinite(y)):
            raise ValueError("y must be finite")
        return y

    def check_params(self, params: tuple) -> tuple[np.ndarray, ...]:
        """The fixed parameters as float64 arrays, or ``ValueError`` naming the bad one."""
        if len(params) != len(self.params):
            raise ValueError(f"family {self.name!r} needs the fixed parameters {self.params}, "
                             f"got {len(params)} values")
        out = []
        for name, value in zip(self.params, params, strict=True):
            value = np.asarray(value, dtype=np.float64)
            if not (np.all(np.isfinite(value)) and np.all(value > 0.0)):
                raise ValueError(f"{name} must be finite and positive, got {value!r}")
            out.append(value)
        return tuple(out)

    def row_constants(
        self,
        order: int,
        norms: np.ndarray,
        y: np.ndarray,
        params: tuple[np.ndarray, ...] = (),
        eta_hat: np.ndarray | None = None,
        radius: float = math.inf,
    ) -> np.ndarray:
        r"""``c_i = sup_{I_i} |f^{(k+1)}| · s_i^{k+1}`` (module docstring).

        Parameters
        ----------
        order : {1, 2}
        norms : ndarray, shape (n,)
            ``s_i``: ``‖Lᵀx_i‖`` (whitened) or ``‖x_i‖``.
        y, params : ndarray
            Observations and fixed parameters per row.
        eta_hat : ndarray, optional
            ``η̂_i`` at the reference point; needed with a finite ``radius``.
        radius : float
            ``r`` of the region ``‖φ‖ ≤ r`` (whitened norms only); ``inf``: the whole line.
        """
        norms = np.asarray(norms, dtype=np.float64)
        sup = self.row_sup(order, norms, y, params, eta_hat=eta_hat, radius=radius)
        return sup * norms ** (order + 1)

    def row_sup(
        self,
        order: int,
        norms: np.ndarray,
        y: np.ndarray,
        params: tuple[np.ndarray, ...] = (),
        eta_hat: np.ndarray | None = None,
        radius: float = math.inf,
    ) -> np.ndarray:
        r"""``sup_{I_i} |f^{(k+1)}|`` per row, ``I_i`` the whole line or, with a finite
        ``radius``, ``η̂_i ± r s_i`` (arguments as in :meth:`row_constants`)."""
        check_order(order)
        norms = np.asarray(norms, dtype=np.float64)
        if not np.all(np.isfinite(norms)) or np.any(norms < 0.0):
            raise ValueError("the row norms (x_norm) must be finite and non-negative")
        y = self.check_y(y)
        params = self.check_params(params)
        if math.isfinite(radius):
            if eta_hat is None:
                raise ValueError("region constants need eta_hat, the predictor at θ̂")
            half_width = radius * norms
            return self.derivative_sup(order, y, *params, lower=eta_hat - half_width,
                                       upper=eta_hat + half_width)
        if self.region_only:
            raise ValueError(f"family {self.name!r} has no global derivative bound: its "
                             "constants hold on a region of the Laplace frame only")
        return self.derivative_sup(order, y, *params)


class LocationScaleFamily:
    """A family with two predictors per row: a location ``μ`` and ``λ = log σ``, both affine.

    Its constants (:meth:`row_constants`) bound the ``(k+1)``-th directional derivative of a
    row in the Laplace frame by :func:`combine_partials` of the suprema of its partial
    derivatives over the box the region ``‖φ‖ ≤ r`` allows; ``M`` then goes without Lemma 1's
    angle factors (``remainder_scale(..., sharp=False)``): the derivative is not of rank one.

    A family may have further predictors, the logs of parameters :meth:`read` returns after
    the fixed ones (:attr:`log_params`: a Student-t's ``κ = log ν``); its rows then have
    ``2 + len(log_params)`` predictors, its suprema are keyed by one index per predictor and
    its constants come from :func:`combine_multi_partials`.

    Class attributes
    ----------------
    name, description : str
    rv_op : type
    params : tuple of str
        Fixed parameters besides ``σ`` (a Student-t's ν).
    log_params : tuple of str
        Sampled parameters besides ``σ`` whose logs are further predictors; the model layer
        picks a family with them only when one of them is sampled.
    costly_suprema : bool
        Whether :meth:`all_suprema` costs more than a pass over the data (``False``: closed
        forms; :class:`~pymc_subsample.bounds.automatic.AutomaticFamily` says ``True``).
    """

    name: ClassVar[str]
    description: ClassVar[str]
    rv_op: ClassVar[type]
    params: ClassVar[tuple[str, ...]] = ()
    log_params: ClassVar[tuple[str, ...]] = ()
    #: closed forms: the suprema cost little beside a pass over the data
    costly_suprema: ClassVar[bool] = False

    @property
    def n_predictors(self) -> int:
        """Predictors per row: the location, ``log σ`` and one per :attr:`log_params`."""
        return 2 + len(self.log_params)

    def read(
        self, dist_params: list[Variable]
    ) -> tuple[Variable, Variable, tuple[Variable, ...]] | None:
        """``(μ, σ, parameters)`` from the distribution parameters, or ``None``.

        ``σ`` is the parameter whose log is the second predictor (a negative binomial's
        dispersion); the parameters are the fixed ones (:attr:`params`) followed by those whose
        logs are further predictors (:attr:`log_params`); ``None``: not this family's form.
        """
        raise NotImplementedError

    def log_scale(self, scale: Variable, params: tuple[Variable, ...]) -> Variable:
        """The second predictor as a graph of what :meth:`read` returned: ``log σ`` (a
        Student-t with a sampled ν takes ``log σ + log ν / 2``)."""
        return pt.log(scale)

    def logp(self, first: Variable, log_scale: Variable, y: Variable,
             *params: Variable) -> Variable:
        """The row log-density as a PyTensor graph of the predictors (the one-predictor
        family's ``f`` with its fixed parameter made ``exp(log_scale)``); ``params`` are the
        fixed parameters followed by the further predictors (:attr:`log_params`)."""
        raise NotImplementedError

    def loglik(self, first: np.ndarray, log_scale: np.ndarray, y: np.ndarray,
               *params: np.ndarray) -> np.ndarray:
        """:meth:`logp` in NumPy (the control variates' remainders on small data,
        :mod:`pymc_subsample.model.row_table`)."""
        raise NotImplementedError

    def row_loglik(self, predictors: tuple[np.ndarray, ...], y: np.ndarray,
                   params: tuple[np.ndarray, ...]) -> np.ndarray:
        """:meth:`loglik` with every predictor in one tuple, as :meth:`row_logp`."""
        return self.loglik(predictors[0], predictors[1], y, *params, *predictors[2:])

    def row_logp(self, predictors: tuple[Variable, ...], y: Variable,
                 params: tuple[Variable, ...]) -> Variable:
        """:meth:`logp` with every predictor in one tuple (the interface the location–scale
        pass shares with :class:`~pymc_subsample.bounds.automatic.AutomaticFamily`)."""
        return self.logp(predictors[0], predictors[1], y, *params, *predictors[2:])

    def row_terms(self, predictors: tuple[Variable, ...], y: Variable,
                  params: tuple[Variable, ...]
                  ) -> tuple[Variable, tuple[Variable, ...], tuple[Variable, ...]]:
        """``f``, its gradient ``(f_1, ..., f_K)`` and Hessian ``(f_11, f_12, ..., f_KK)``
        (upper triangle row by row, :func:`upper_pairs`) in the predictors, per row, as
        PyTensor graphs of float64 predictor vectors (the location–scale pass and the control
        variates). By default :func:`autodiff_row_terms` of :meth:`row_logp`; a family with
        closed forms gives smaller graphs, faster to rewrite and compile."""
        return autodiff_row_terms(self.row_logp, predictors, y, params)

    def suprema(
        self,
        order: int,
        s_mu: np.ndarray,
        s_log_sigma: np.ndarray,
        y: np.ndarray,
        mu_hat: np.ndarray,
        log_sigma_hat: np.ndarray,
        radius: float,
        *params: np.ndarray,
        extra: tuple[tuple[np.ndarray, np.ndarray], ...] = (),
    ) -> dict[tuple[int, ...], np.ndarray]:
        """``{(a, b): S_{a,b}}``, ``S_{a,b} ≥ sup |∂^a_μ ∂^b_λ f|`` per row on the box that
        ``‖φ‖ ≤ radius`` allows, for ``a + b = order + 1``.

        A family with further predictors (:attr:`log_params`) takes ``extra``, one pair
        ``(s_j, p̂_j)`` (whitened row length and value at θ̂) per further predictor, and keys its
        suprema by one index per predictor, ``(a, b, c, ...)``.
        """
        raise NotImplementedError

    def row_constants(
        self,
        order: int,
        s_mu: np.ndarray,
        s_log_sigma: np.ndarray,
        y: np.ndarray,
        mu_hat: np.ndarray,
        log_sigma_hat: np.ndarray,
        radius: float,
        *params: np.ndarray,
        cos: np.ndarray | None = None,
        extra: tuple[tuple[np.ndarray, np.ndarray], ...] = (),
    ) -> np.ndarray:
        """Whitened ``c_i`` valid on ``‖φ‖ ≤ radius``: :func:`combine_partials` of
        :meth:`suprema`, or :func:`combine_multi_partials` with further predictors.

        ``cos`` is the cosine of the angle between each row's two whitened predictor rows
        (:func:`combine_partials`); ``None``: no angle factors (any angle). ``extra`` holds
        ``(s_j, p̂_j)`` of each further predictor (:meth:`suprema`).
        """
        norms = (s_mu, s_log_sigma, *(s for s, _ in extra))
        hats = (mu_hat, log_sigma_hat, *(h for _, h in extra))
        sup = self.all_suprema(order, norms, y, hats, radius, params)
        return combine_predictor_partials(order, sup, norms, cos)

    def all_suprema(
        self,
        order: int,
        norms: tuple[np.ndarray, ...],
        y: np.ndarray,
        hats: tuple[np.ndarray, ...],
        radius: float,
        params: tuple[np.ndarray, ...] = (),
    ) -> dict[tuple[int, ...], np.ndarray]:
        """:meth:`suprema` with every predictor's whitened row length and value at θ̂ in one
        tuple each (``extra`` from the third predictor on)."""
        extra = tuple(zip(norms[2:], hats[2:], strict=True))
        return self.suprema(order, norms[0], norms[1], y, hats[0], hats[1], radius, *params,
                            **({"extra": extra} if extra else {}))


def upper_pairs(n_predictors: int) -> list[tuple[int, int]]:
    """``(j, k)``, ``j ≤ k``, in the order of :meth:`LocationScaleFamily.row_terms`'s
    Hessian."""
    return [(j, k) for j in range(n_predictors) for k in range(j, n_predictors)]


def autodiff_row_terms(
    row_logp, predictors: tuple[Variable, ...], y: Variable, params: tuple[Variable, ...]
) -> tuple[Variable, tuple[Variable, ...], tuple[Variable, ...]]:
    """:meth:`LocationScaleFamily.row_terms` by reverse-mode autodiff of
    ``row_logp(predictors, y, params)``, a row log-density.

    Each row's ``f`` depends on its own predictors only, so the gradient of ``Σ f`` in the
    vector of first predictors is the per-row ``f_1``, and so on.
    """
    ps = [pt.vector(f"predictor_{j}", dtype="float64") for j in range(len(predictors))]
    f = row_logp(tuple(ps), y, params)
    grad = pt.grad(f.sum(), ps, disconnected_inputs="ignore")
    hess = [pt.grad(grad[j].sum(), ps[k], disconnected_inputs="ignore")
            for j, k in upper_pairs(len(ps))]
    out = graph_replace([f, *grad, *hess], dict(zip(ps, predictors, strict=True)), strict=False)
    return out[0], tuple(out[1 : 1 + len(ps)]), tuple(out[1 + len(ps) :])


def combine_predictor_partials(
    order: int,
    suprema: dict[tuple[int, ...], np.ndarray],
    norms: tuple[np.ndarray, ...],
    cos: np.ndarray | None = None,
) -> np.ndarray:
    """A row's constant from its partials' suprema: :func:`combine_partials` (with the angle
    factors of ``cos``) for two predictors, :func:`combine_multi_partials` for more."""
    if len(norms) == 2:
        return combine_partials(order, suprema, norms[0], norms[1], cos)
    return combine_multi_partials(order, suprema, tuple(norms))


def row_norms(rows: np.ndarray) -> np.ndarray:
    """The Euclidean length of each row."""
    return np.sqrt(np.einsum("ij,ij->i", rows, rows))


def row_cosines(first: np.ndarray, second: np.ndarray, s_first: np.ndarray,
                s_second: np.ndarray) -> np.ndarray:
    """Cosine of the angle between two whitened predictor rows, row by row (1 where a row is
    zero: its terms vanish whatever the factor)."""
    dots = np.einsum("ij,ij->i", first, second)
    norms = s_first * s_second
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(norms > 0.0, dots / norms, 1.0)


def combine_partials(
    order: int,
    suprema: dict[tuple[int, int], np.ndarray],
    s_first: np.ndarray,
    s_second: np.ndarray,
    cos: np.ndarray | None = None,
) -> np.ndarray:
    r"""A row's constant from the suprema of its partials in two predictors.

    Along a unit direction ``u`` of the Laplace frame the ``(k+1)``-th derivative of
    ``f(p_1, p_2)``, ``p_j`` affine with whitened rows ``\tilde x_j``, is
    ``Σ_{a+b=k+1} C(k+1, a) ∂^a_1 ∂^b_2 f (\tilde x_1^\top u)^a (\tilde x_2^\top u)^b``, so

    .. math::

        c_i = \sum_{a+b=k+1} \binom{k+1}{a} S_{a,b}\, s_1^a s_2^b\, D_{a,b}(\omega_i)

    bounds it on the box where ``|∂^a_1 ∂^b_2 f| ≤ S_{a,b}``: ``s_j = \lVert\tilde x_j\rVert``,
    ``ω_i = \cos\angle(\tilde x_1, \tilde x_2)`` and ``D_{a,b}`` the largest
    ``|u^\top \hat x_1|^a |u^\top \hat x_2|^b`` over unit ``u``
    (:func:`~pymc_subsample.bounds.remainder.angle_factor`, Lemma 1 of Prado et al. 2024): 1 for
    the pure terms; for the mixed ones 1 when the rows are parallel, down to 1/2 (``a = b = 1``)
    and 2/(3√3) ≈ 0.385 (``a + b = 3``) when they are orthogonal.
    Each term is maximised over ``u`` on its own, so the sum bounds the maximum of the sum. The
    derivative is a symmetric tensor, whose norm is the supremum on the diagonal (Banach), so
    ``c_i`` also bounds it on distinct directions, as ``M`` without angle factors needs.

    Parameters
    ----------
    order : {1, 2}
    suprema : dict
        ``{(a, b): S_{a,b}}`` for ``a + b = order + 1``, per row.
    s_first, s_second : ndarray
        Lengths of the two whitened predictor rows.
    cos : ndarray, optional
        ``ω_i``; ``None`` takes ``D = 1`` (Cauchy–Schwarz on each factor).
    """
    check_order(order)
    s1 = np.asarray(s_first, dtype=np.float64)
    s2 = np.asarray(s_second, dtype=np.float64)
    k = order + 1
    total = 0.0
    for a in range(k + 1):
        term = math.comb(k, a) * suprema[(a, k - a)] * s1**a * s2 ** (k - a)
        if cos is not None:
            term = term * angle_factor(a, k - a, cos)
        total = total + term
    return total


def multi_indices(n_predictors: int, total: int) -> list[tuple[int, ...]]:
    """Every ``α`` of ``n_predictors`` non-negative integers that sum to ``total``, ordered by
    ``α_0``, then ``α_1``, ...: for two predictors ``(0, total), (1, total − 1), ...``."""
    if n_predictors == 1:
        return [(total,)]
    return [(a, *rest) for a in range(total + 1)
            for rest in multi_indices(n_predictors - 1, total - a)]


def combine_multi_partials(
    order: int,
    suprema: dict[tuple[int, ...], np.ndarray],
    norms: tuple[np.ndarray, ...],
) -> np.ndarray:
    r"""A row's constant from the suprema of its partials in any number of predictors.

    Along a unit direction ``u`` the ``(k+1)``-th derivative of ``f(p_1, ..., p_K)``, ``p_j``
    affine with whitened rows ``\tilde x_j``, is
    ``Σ_{|α|=k+1} (k+1)!/α! ∂^α f Π_j (\tilde x_j^\top u)^{α_j}``, so by Cauchy–Schwarz on
    each factor

    .. math::

        c_i = \sum_{|\alpha|=k+1} \frac{(k+1)!}{\alpha!} S_\alpha \prod_j s_j^{\alpha_j}

    bounds it on the box where ``|∂^α f| ≤ S_α`` (``s_j = \lVert\tilde x_j\rVert``); for two
    predictors this is :func:`combine_partials` without angle factors. It bounds the symmetric
    derivative tensor on distinct directions too (Banach), as ``M`` without angle factors needs.

    Parameters
    ----------
    order : {1, 2}
    suprema : dict
        ``{α: S_α}`` for ``|α| = order + 1``, per row.
    norms : tuple of ndarray
        ``s_j``, one per predictor.
    """
    check_order(order)
    k = order + 1
    norms = tuple(np.asarray(s, dtype=np.float64) for s in norms)
    # each s_j^a once (an ordinal model's 20 α's in four predictors took the powers anew)
    powers: dict[tuple[int, int], np.ndarray] = {}
    total = 0.0
    for alpha in multi_indices(len(norms), k):
        coeff = math.factorial(k)
        term = suprema[alpha]
        for j, (a, s) in enumerate(zip(alpha, norms, strict=True)):
            coeff //= math.factorial(a)
            if a:  # s^0 = 1 exactly
                if (j, a) not in powers:
                    powers[j, a] = s**a
                term = term * powers[j, a]
        total = total + coeff * term
    return total


#: Every registered family by name (one- and two-predictor), in the order the model layer's
#: detections try them (:func:`pymc_subsample.model.glm.detect_glm_terms`,
#: :func:`pymc_subsample.model.location_scale.detect_location_scale_terms`).
_REGISTRY: dict[str, Family | LocationScaleFamily] = {}


def register(cls: type[Family] | type[LocationScaleFamily]):
    """Class decorator: add one instance of a family (either kind) to the registry."""
    _REGISTRY[cls.name] = cls()
    return cls


def registered() -> tuple[Family, ...]:
    """The registered one-predictor families, in registration order."""
    return tuple(f for f in _REGISTRY.values() if isinstance(f, Family))


def location_scale_families() -> tuple[LocationScaleFamily, ...]:
    """The registered two-predictor (location and log-scale) families."""
    return tuple(f for f in _REGISTRY.values() if isinstance(f, LocationScaleFamily))


def family(name: str | Family) -> Family:
    """The registered one-predictor family called ``name`` (a :class:`Family` is returned as
    it is)."""
    if isinstance(name, Family):
        return name
    found = _REGISTRY.get(name)
    if not isinstance(found, Family):
        names = tuple(f.name for f in registered())
        raise ValueError(f"unknown family {name!r}; expected one of {names}")
    return found
