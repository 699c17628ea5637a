"""Location–scale rows: an observed variable whose location, ``log σ`` and further
log-parameters (a Student-t's ``log ν``, a negative binomial's ``log α``) are each affine in
``θ`` — a Normal or Student-t with a sampled σ, a Gamma or negative binomial with a sampled
shape or dispersion.

:func:`detect_location_scale_terms` reads every observed variable as such a family of
:func:`pymc_subsample.bounds.location_scale_families` (or returns None, and the GLM path of
:mod:`pymc_subsample.model.glm` reads the model); :func:`location_scale_terms` gives a row's
log density and its derivatives in the predictors, which the location–scale pass
(:mod:`pymc_subsample.model.location_scale_pass`), the control variates and the row table use.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import ClassVar

import pytensor.tensor as pt
from pytensor.graph.basic import Variable
from pytensor.graph.replace import graph_replace

from pymc_subsample.bounds import LocationScaleFamily, location_scale_families, upper_pairs
from pymc_subsample.errors import SubsamplingModelError
from pymc_subsample.model.glm import (
    depends_on_parameters,
    dist_name,
    fixed_per_row,
    rows_of_affine,
    simplify_log,
    unsupported,
)
from pymc_subsample.model.likelihood import SubsampledLikelihood

__all__ = [
    "LocationScaleTerm",
    "detect_location_scale_terms",
    "location_scale_logp",
    "location_scale_terms",
    "upper_pairs",
]


@dataclass(frozen=True)
class LocationScaleTerm:
    """An observed variable whose location and ``log σ`` (and the logs of the family's
    :attr:`~pymc_subsample.bounds.LocationScaleFamily.log_params`) are affine in ``θ``.

    Attributes
    ----------
    name : str
    family : LocationScaleFamily
        :mod:`pymc_subsample.bounds` (``normal_scale``, ``student_t_scale``, ...).
    mu, log_sigma : Variable
        The first two predictors on the rows ``idx``, as graphs of ``θ`` (broadcast to the
        rows): the location and ``log σ`` (``log σ + log ν / 2`` for a Student-t with a
        sampled ν: :meth:`LocationScaleFamily.log_scale`).
    y : Variable
        Observed values on the rows ``idx``.
    mu_rows, log_sigma_rows : Variable
        Their derivatives ``∂μ_i/∂θ`` and ``∂λ_i/∂θ`` (:func:`rows_of_affine`), free of ``θ``.
    params : tuple of Variable
        The family's fixed parameters on the rows ``idx`` (a Student-t's ν when fixed).
    extra, extra_rows : tuple of Variable
        Further predictors (a Student-t's ``log ν`` when sampled) and their derivatives.
    """

    name: str
    family: LocationScaleFamily
    mu: Variable
    log_sigma: Variable
    y: Variable
    mu_rows: Variable
    log_sigma_rows: Variable
    params: tuple[Variable, ...] = ()
    extra: tuple[Variable, ...] = ()
    extra_rows: tuple[Variable, ...] = ()
    #: every predictor is affine (:attr:`GLMTerm.curvature`)
    curvature: ClassVar[None] = None

    @property
    def predictors(self) -> tuple[Variable, ...]:
        """``(μ, λ, *extra)``."""
        return (self.mu, self.log_sigma, *self.extra)

    @property
    def predictor_rows(self) -> tuple[Variable, ...]:
        """Their derivatives in ``θ``, in the same order."""
        return (self.mu_rows, self.log_sigma_rows, *self.extra_rows)


def _location_scale_family(
    block, lik: SubsampledLikelihood
) -> tuple[LocationScaleFamily, tuple] | None:
    """The location–scale family of one observed variable and what it reads, or None.

    A family with further predictors (:attr:`LocationScaleFamily.log_params`) is taken when one
    of them is sampled; one without when its σ is sampled.
    """
    op = block.rv.owner.op
    # families with further predictors first: a Student-t with ν and σ sampled is theirs
    for fam in sorted(location_scale_families(), key=lambda f: not f.log_params):
        if not isinstance(op, fam.rv_op) or block.value.type.ndim != 1:
            continue
        read = fam.read(op.dist_params(block.rv.owner))
        if read is None:
            continue
        _, sd, values = read
        logged = values[len(fam.params):]
        if fam.log_params:
            if any(depends_on_parameters(v, lik) for v in logged):
                return fam, read
        elif depends_on_parameters(sd, lik):
            return fam, read
    return None


def detect_location_scale_terms(lik: SubsampledLikelihood) -> list[LocationScaleTerm] | None:
    """Every observed variable as a location–scale family with a sampled σ (or a sampled
    further parameter, a Student-t's ν), or None.

    None when any observed variable is something else (the GLM path then reads the model).

    Raises
    ------
    SubsamplingModelError
        Naming the variable, when it is such a family with a sampled σ but its location or
        ``log σ`` is not affine in the sampled parameters (``σ = exp(λ)`` or a positive prior
        on σ, whose log transform is the sampled value, are), or another parameter is sampled
        that no family takes as a predictor.
    """
    n_rows = lik.idx.shape[0]
    found = []
    for block in lik.blocks:
        detected = _location_scale_family(block, lik)
        if detected is None:
            return None
        fam, (mu, sd, values) = detected
        op = block.rv.owner.op
        n_fixed = len(fam.params)
        params = fixed_per_row(
            block.name, fam, values[:n_fixed], lik,
            "its sigma and its {param} are both sampled (MHSS bounds {family})",
        )
        named = (("mean", mu, False), ("log(sigma)", fam.log_scale(sd, values[n_fixed:]), False),
                 *((f"log({p})", v, True) for p, v in zip(fam.log_params, values[n_fixed:],
                                                          strict=True)))
        # log(exp(λ)) → λ before the affinity check
        graphs = [simplify_log(v) for v in lik.in_theta(
            [pt.broadcast_to(pt.log(v) if logged else v, (n_rows,)) for _, v, logged in named])]
        rows_of = []
        # the further predictors first: a Student-t's second predictor is log(σ√ν), and a
        # log ν that is not affine is named as such
        for (what, _, _), graph in reversed(list(zip(named, graphs, strict=True))):
            try:
                rows_of.insert(0, rows_of_affine(block.name, graph, lik.theta))
            except SubsamplingModelError:
                raise unsupported(
                    block.name, f"it is a {dist_name(op)} with a sampled "
                    f"{'nu' if fam.log_params else 'sigma'}, but its {what} is not affine in the "
                    "sampled parameters (exp(affine) or a positive prior on the parameter are)"
                ) from None
        found.append(LocationScaleTerm(block.name, fam, graphs[0], graphs[1], block.value,
                                       rows_of[0], rows_of[1], params, tuple(graphs[2:]),
                                       tuple(rows_of[2:])))
    return found


#: Per term, ``f`` and its derivatives in stand-in predictors of the types last asked for,
#: built once: the data pass and the control variates ask for them at other predictors, and
#: an automatic family builds them by autodiff (an ordinal logit's second build took 0.45
#: CPU s at 20,000 rows, its first 0.17).
_ROW_TERMS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def location_scale_terms(
    term: LocationScaleTerm, *predictors: Variable
) -> tuple[Variable, tuple[Variable, ...], tuple[Variable, ...]]:
    """``f``, its gradient ``(f_1, ..., f_K)`` and Hessian ``(f_11, f_12, ..., f_1K, f_22,
    ..., f_KK)`` (upper triangle, row by row) in the predictors, per row, as float64 graphs of
    given predictor values: the family's
    :meth:`~pymc_subsample.bounds.LocationScaleFamily.row_terms` (closed forms, or autodiff of
    its row log-density), each broadcast to the rows.
    """
    ps = tuple(pt.cast(p, "float64") for p in predictors)
    types = tuple(p.type for p in ps)
    built = _ROW_TERMS.get(term)
    if built is None or built[0] != types:
        stand_ins = tuple(t() for t in types)
        f, grad, hess = term.family.row_terms(stand_ins, pt.cast(term.y, "float64"),
                                              tuple(term.params))
        built = _ROW_TERMS[term] = (types, stand_ins, [f, *grad, *hess])
    _, stand_ins, graphs = built
    graphs = graph_replace(graphs, dict(zip(stand_ins, ps, strict=True)), strict=False)
    f, *rest = (pt.cast(pt.broadcast_to(v, ps[0].shape), "float64") for v in graphs)
    return f, tuple(rest[: len(ps)]), tuple(rest[len(ps) :])


def location_scale_logp(term: LocationScaleTerm, *predictors: Variable) -> Variable:
    """``f`` of :func:`location_scale_terms` alone, per row (float64): the control variates'
    ``f(p'_i) − f(p_i)`` need no derivatives there, and building them by autodiff for nothing
    took about a second of a Student-t's setup with sampled ν."""
    ps = tuple(pt.cast(p, "float64") for p in predictors)
    f = term.family.row_logp(ps, pt.cast(term.y, "float64"), tuple(term.params))
    return pt.cast(pt.broadcast_to(f, ps[0].shape), "float64")
