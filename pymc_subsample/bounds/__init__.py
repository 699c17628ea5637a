r"""Bounds on the control-variate error of MHSS: one small object per likelihood family.

MHSS (Prado, Nemeth & Sherlock 2024, Sec. 2) is exact only if every per-row control-variate
error obeys

.. math::

    |\xi_i(\theta, \theta')| \le c_i \, M(\theta, \theta'),
    \qquad \xi_i = r_i - \hat r_i,

where :math:`r_i = \ell_i(\theta') - \ell_i(\theta)` and :math:`\hat r_i` is the same difference
of the order-1 or order-2 Taylor expansion of :math:`\ell_i` around :math:`\hat\theta`. For a
row :math:`\ell_i = f(x_i^\top\theta; y_i)` Corollary 2 gives
:math:`c_i = L_k(y_i)\lVert x_i\rVert^{k+1}` with :math:`L_k \ge \sup|f^{(k+1)}|` (Theorem 2,
eqs. 15-18) and ``M`` from :mod:`~pymc_subsample.bounds.remainder`; in the Laplace frame the
norm is :math:`\lVert L^\top x_i\rVert` and ``M`` is computed from whitened points.

Each family lives in one module with its constants derived in the docstring
(:class:`~pymc_subsample.bounds.family.Family` says what a family provides) and registers
itself (:func:`~pymc_subsample.bounds.family.registered`); the README's families table is
generated from that registry (``tests/test_docs_facts.py`` checks it), with how each is written
in PyMC and whether its constants hold everywhere or on a region.

Families whose derivatives are unbounded (:data:`REGION_FAMILIES`) get constants valid on the
ball ``‖φ‖ ≤ r`` of the Laplace frame (:func:`region_radius`): ``η_i`` then stays in
``η̂_i ± r s_i`` and the supremum is taken over that interval only. The step decides a move
with either end outside the ball on all rows, which keeps the chain exact because the switch
depends on the pair ``{θ, θ'}`` only (``docs/methods/mhss.md``, "Region-valid bounds"). A
Normal or Student-t with a sampled σ has two predictors, the location and ``log σ``
(:class:`~pymc_subsample.bounds.family.LocationScaleFamily`):
:func:`normal_scale_row_constants`, :func:`student_t_scale_row_constants`; so have a negative
binomial with a sampled dispersion (``η − log α`` and ``log α``) and a Gamma with a sampled
shape (``η`` and ``log α``). A Student-t with a sampled ν has three, ``μ``, ``log(σ√ν)`` and
``log ν`` (:func:`student_t_nu_suprema`, combined by :func:`combine_multi_partials`). A
one-predictor family whose predictor is quadratic in the parameters (a product of two) gets
:func:`quadratic_row_constants`.

Two bounds give each row a rate of its own, ``B_i(θ, θ') ≥ |ξ_i|``, in place of ``c_i M``
(:mod:`~pymc_subsample.bounds.rates` draws their rows): the level bound
(:mod:`~pymc_subsample.bounds.levels`) for rows that touch one level of a grouping factor, and
the shared-scale bound (:mod:`~pymc_subsample.bounds.shared_scale`) for rows of several
predictors whose σ, dispersion, shape or ν is one sampled scalar. The step keeps one of them or
Corollary 2's, whichever expects fewer rows.

References
----------
Prado, E. F., Nemeth, C. & Sherlock, C. (2024). Metropolis--Hastings with scalable subsampling.
arXiv:2407.19602.
"""

from __future__ import annotations

import numpy as np

from pymc_subsample.bounds import (  # noqa: F401  (each module registers its families)
    bernoulli,
    gamma,
    negative_binomial,
    normal,
    poisson,
    student_t,
)
from pymc_subsample.bounds.crossed import CrossedBound, CrossedRows, crossed_level_rows
from pymc_subsample.bounds.family import (
    Family,
    LocationScaleFamily,
    autodiff_row_terms,
    combine_multi_partials,
    combine_partials,
    combine_predictor_partials,
    family,
    location_scale_families,
    registered,
    row_cosines,
    row_norms,
    scalar_op,
    upper_pairs,
)
from pymc_subsample.bounds.levels import (
    LevelBound,
    LevelMoveRates,
    LevelRates,
    LevelRows,
    level_rows,
    split_level_rows,
)
from pymc_subsample.bounds.normal import normal_scale_row_constants
from pymc_subsample.bounds.quadratic import quadratic_row_constants
from pymc_subsample.bounds.rates import EnvelopeRates
from pymc_subsample.bounds.remainder import (
    REGION_TAIL,
    check_order,
    check_region,
    region_radius,
    remainder_scale,
)
from pymc_subsample.bounds.shared_scale import (
    SharedScaleBound,
    SharedScaleRates,
    SharedScaleRows,
    shared_scale_rows,
)
from pymc_subsample.bounds.student_t import student_t_nu_suprema, student_t_scale_row_constants

__all__ = [
    "FAMILIES",
    "REGION_FAMILIES",
    "REGION_TAIL",
    "CrossedBound",
    "CrossedRows",
    "EnvelopeRates",
    "Family",
    "LevelBound",
    "LevelMoveRates",
    "LevelRates",
    "LevelRows",
    "LocationScaleFamily",
    "autodiff_row_terms",
    "SharedScaleBound",
    "SharedScaleRates",
    "SharedScaleRows",
    "combine_multi_partials",
    "combine_partials",
    "combine_predictor_partials",
    "derivative_bound",
    "family",
    "glm_loglik",
    "glm_row_constants",
    "crossed_level_rows",
    "level_rows",
    "split_level_rows",
    "location_scale_families",
    "normal_scale_row_constants",
    "quadratic_row_constants",
    "region_radius",
    "region_row_constants",
    "registered",
    "remainder_scale",
    "row_cosines",
    "row_norms",
    "scalar_op",
    "shared_scale_rows",
    "upper_pairs",
    "student_t_nu_suprema",
    "student_t_scale_row_constants",
]

#: Every family MHSS bounds automatically, by name.
FAMILIES: tuple[str, ...] = tuple(f.name for f in registered())

#: Families whose derivatives in ``η`` are unbounded: their constants hold on a region only.
REGION_FAMILIES: tuple[str, ...] = tuple(f.name for f in registered() if f.region_only)


def _fixed(fam: Family, sigma: float | None, params: tuple) -> tuple:
    """The fixed parameters, ``sigma`` standing for a Normal's one (ignored by the others)."""
    if sigma is not None and fam.params == ("sigma",):
        params = (sigma,)
    return fam.check_params(params)


def derivative_bound(
    family_name: str, y: np.ndarray, order: int, sigma: float | None = None, params: tuple = ()
) -> np.ndarray:
    r"""Per-row :math:`L_k(y_i) \ge \sup_\eta |f^{(k+1)}(\eta; y_i)|` over the whole line.

    The constants of Theorem 3 / Remark 3 of Prado, Nemeth & Sherlock (2024) and of the
    family modules, which enter the conditions (15) and (17) of Theorem 2 through
    :math:`\nabla^k \ell_i = f^{(k)} x_i^{\otimes k}`.

    Parameters
    ----------
    family_name : str
        One of :data:`FAMILIES` outside :data:`REGION_FAMILIES`.
    y : array_like, shape (N,)
        Observations in the family's support.
    order : {1, 2}
        Order of the Taylor control variate.
    sigma : float, optional
        A Normal's fixed σ (shorthand for ``params=(sigma,)``).
    params : tuple
        The family's fixed parameters (:attr:`Family.params`).

    Raises
    ------
    ValueError
        Unknown family, order not in {1, 2}, missing or non-positive fixed parameters, ``y``
        outside the support, or a family with no global bound.
    """
    fam = family(family_name)
    check_order(order)
    if fam.region_only:
        raise ValueError(
            f"family {fam.name!r} has no global derivative bound: use region_row_constants"
        )
    params = _fixed(fam, sigma, params)
    return np.asarray(fam.derivative_sup(order, fam.check_y(y), *params), dtype=np.float64)


def glm_row_constants(
    x_norm: np.ndarray,
    y: np.ndarray,
    family_name: str,
    order: int,
    sigma: float | None = None,
    params: tuple = (),
) -> np.ndarray:
    r"""Per-row MHSS constants :math:`c_i = L_k(y_i) \lVert x_i \rVert^{k+1}` (Corollary 2).

    ``x_norm`` is :math:`\lVert x_i\rVert` (or the whitened :math:`\lVert L^\top x_i\rVert`);
    the other arguments are as in :func:`derivative_bound` (:meth:`Family.row_constants` on the
    whole line).
    """
    fam = family(family_name)
    return fam.row_constants(order, x_norm, y, _fixed(fam, sigma, params))


def region_row_constants(
    family_name: str,
    order: int,
    xt_norm: np.ndarray,
    y: np.ndarray,
    eta_hat: np.ndarray,
    radius: float,
    params: tuple = (),
) -> np.ndarray:
    r"""Whitened row constants valid for every ``θ, θ'`` in ``R = {‖φ‖ ≤ r}``.

    On ``R`` (convex, and containing ``θ̂``, so every point the Taylor remainders of
    Corollary 2 visit), ``|η_i − η̂_i| = |x_iᵀLφ| ≤ s_i r`` with ``s_i = ‖Lᵀx_i‖``, so
    ``L_k`` may be the supremum of ``|f^{(k+1)}|`` over that interval only; for
    ``poisson_log`` it is ``e^{η̂_i + r s_i}``. Use with ``M(φ, φ')`` of
    :func:`remainder_scale` while ``‖φ‖, ‖φ'‖ ≤ r``.
    """
    check_region(order, radius)
    fam = family(family_name)
    return fam.row_constants(order, xt_norm, y, _fixed(fam, None, params),
                             eta_hat=np.asarray(eta_hat, dtype=np.float64), radius=radius)


def glm_loglik(
    family_name: str, eta: np.ndarray, y: np.ndarray, sigma: float | None = None,
    params: tuple = (),
) -> np.ndarray:
    r"""Per-row log-likelihood :math:`f(\eta_i; y_i)`, computed stably.

    Equal to the ``scipy.stats`` log-pmf/log-pdf of the family and finite where those
    underflow. Arguments as in :func:`derivative_bound`.
    """
    fam = family(family_name)
    params = _fixed(fam, sigma, params)
    y = fam.check_y(y)
    eta, y = np.broadcast_arrays(np.asarray(eta, dtype=np.float64), y)
    return fam.loglik(eta, y, *params)
