"""Taylor control variates for per-row log-likelihood differences.

With ``g_i = ∇ℓ_i(θ̂)`` and ``H_i = ∇²ℓ_i(θ̂)`` at a reference point ``θ̂`` near the mode,
the order-1 and order-2 control variates (Prado, Nemeth & Sherlock 2024, eqs. (1)–(2)) are

    ℓ̂_i(θ) = ℓ_i(θ̂) + g_iᵀ(θ − θ̂) [+ ½ (θ − θ̂)ᵀ H_i (θ − θ̂)]

and for a move ``θ → θ'`` the estimate ``r̂_i = ℓ̂_i(θ') − ℓ̂_i(θ)`` of ``r_i = ℓ_i(θ') − ℓ_i(θ)``
leaves the remainder ``ξ_i = r_i − r̂_i`` (eq. (4)). The sum over all rows needs only
``G = Σ g_i`` and ``H = Σ H_i``, computed once in one pass over the data:

    Σ_i r̂_i = Gᵀ(θ' − θ) [+ ½ ((θ' − θ̂)ᵀ H (θ' − θ̂) − (θ − θ̂)ᵀ H (θ − θ̂))]

Per-row terms for the few rows an iteration touches are directional derivatives of
``t ↦ ℓ_i(θ̂ + t v)``, obtained by forward-mode autodiff (``Rop``); no N×d or N×d×d array is
ever formed. Like NumPyro's ``taylor_proxy``, everything is built once at ``θ̂``.
"""

from __future__ import annotations

import numpy as np
import pytensor
from pytensor.gradient import Rop
from pytensor.graph.replace import graph_replace

from pymc_subsample.model.glm import (
    GLMTerm,
    family_terms,
)
from pymc_subsample.model.levels import bilinear_form
from pymc_subsample.model.likelihood import SubsampledLikelihood
from pymc_subsample.model.location_scale import (
    location_scale_logp,
    location_scale_terms,
    upper_pairs,
)
from pymc_subsample.model.passes import GenericPass
from pymc_subsample.model.row_table import TabulatedRemainder, tabulable

__all__ = [
    "COMPILE_AFTER_CALLS",
    "TaylorControlVariate",
    "loglik_sums",
    "validate_cv_order",
]


#: Calls of :meth:`TaylorControlVariate.remainder` served by tabulated remainders before the
#: compiled graph takes over. A call of the tabulated ones costs 7–20 µs more than the compiled
#: graph's on a few rows of the logistic demo model (17 against 10 µs at load 2, 34 against
#: 15 µs at load 13); the compile costs 0.3–0.6 s with a warm PyTensor cache, 1–3 s with an
#: empty one: 20,000 calls spend about the warm compile's time, and the demo's 6,000
#: iterations never reach them.
COMPILE_AFTER_CALLS = 20_000


def validate_cv_order(order) -> int:
    """Return ``order`` as an int if it is 1 or 2, else raise a clear ``ValueError``."""
    if isinstance(order, bool) or order not in (1, 2):
        raise ValueError(
            f"cv_order must be 1 or 2 (first- or second-order Taylor control variates); got "
            f"{order!r}. Order 2 touches far fewer rows for smooth likelihoods."
        )
    return int(order)


def loglik_sums(
    lik: SubsampledLikelihood, theta: np.ndarray
) -> tuple[float, np.ndarray, np.ndarray]:
    """``Σ_i ℓ_i(θ)``, ``Σ_i ∇ℓ_i(θ)`` and ``Σ_i ∇²ℓ_i(θ)`` in one chunked pass over the data."""
    res = GenericPass(lik).full(theta)
    return res.loglik, res.grad, res.hess


class TaylorControlVariate:
    """Order-1 or order-2 Taylor control variates at ``θ̂``, built once.

    Parameters
    ----------
    likelihood : SubsampledLikelihood
        The model's per-row terms.
    theta_hat : ndarray, shape (d,)
        Reference point ``θ̂`` (usually the MAP).
    order : {1, 2}
        Taylor order.
    sums : tuple, optional
        ``(Σ ℓ_i(θ̂), Σ ∇ℓ_i(θ̂), Σ ∇²ℓ_i(θ̂))`` when already computed (by the reference fit's
        last pass); computed in one pass otherwise.
    glm_terms : list of GLMTerm or of LocationScaleTerm, optional
        The model's GLM structure (:func:`pymc_subsample.model.glm.detect_glm_terms`). The per-row
        Taylor terms are then ``f'(η̂_i)(η'_i − η_i) [+ ½ f''(η̂_i)((η'_i − η̂_i)² − (η_i −
        η̂_i)²)]``, the same polynomials as the generic directional derivatives but a much
        smaller graph (faster to compile and to evaluate); for a quadratic predictor the
        Taylor terms in ``θ``, with its linear part in place of ``η − η̂`` where ``θ``'s
        expansion needs it; with several predictors per row
        (:func:`pymc_subsample.model.location_scale.detect_location_scale_terms`) the same in
        the predictors.
    tabulate : bool, optional
        Evaluate ``ξ_i`` in NumPy from a table of per-row constants
        (:class:`~pymc_subsample.model.row_table.TabulatedRemainder`: nothing compiled to C)
        instead of a compiled graph. By default where
        :func:`~pymc_subsample.model.row_table.tabulable` allows it (small data, closed-form
        families) and the likelihood's ``compile_kwargs`` choose no mode; ``True`` where it
        does not allow it raises ``ValueError``.

    Attributes
    ----------
    loglik_hat : float
        ``Σ_i ℓ_i(θ̂)``.
    grad_sum : ndarray, shape (d,)
        ``G = Σ_i g_i``.
    hess_sum : ndarray, shape (d, d), or LevelHessian
        ``H = Σ_i H_i`` (computed for both orders: the Laplace proposal needs it).
    """

    def __init__(
        self,
        likelihood: SubsampledLikelihood,
        theta_hat: np.ndarray,
        order: int,
        sums: tuple[float, np.ndarray, np.ndarray] | None = None,
        glm_terms: list | None = None,
        tabulate: bool | None = None,
    ):
        self.order = validate_cv_order(order)
        self.likelihood = likelihood
        self.theta_hat = np.array(theta_hat, dtype=np.float64)
        if self.theta_hat.shape != (likelihood.dim,):
            raise ValueError(
                f"theta_hat must have shape ({likelihood.dim},); got {self.theta_hat.shape}"
            )
        if sums is None:
            sums = loglik_sums(likelihood, self.theta_hat)
        self.loglik_hat, self.grad_sum, self.hess_sum = sums
        self._glm_terms = glm_terms
        can_tabulate = tabulable(likelihood, glm_terms)
        if tabulate and not can_tabulate:
            raise ValueError("the remainders of this model cannot be tabulated (see "
                             "pymc_subsample.model.row_table.tabulable)")
        #: calls of :meth:`remainder` left before the tabulated remainders give way to the
        #: compiled graph (None: no switch)
        self._calls_to_compile = None
        # by default not when the user chose a compile mode for the compiled functions
        if tabulate or (tabulate is None and can_tabulate
                        and "mode" not in likelihood.compile_kwargs):
            self._xi_fn = TabulatedRemainder(likelihood, glm_terms, self.theta_hat, self.order)
            if tabulate is None:
                self._calls_to_compile = COMPILE_AFTER_CALLS
        else:
            self._xi_fn = self._compiled_remainder()

    def _compiled_remainder(self):
        """``ξ_i(θ, θ')`` compiled from its graph: the family's closed forms when the model's
        terms are known, directional derivatives of the row terms otherwise."""
        lik, glm_terms = self.likelihood, self._glm_terms
        if not glm_terms:
            graph = self._remainder_graph()
        elif not isinstance(glm_terms[0], GLMTerm):  # predictors: location–scale or automatic
            graph = self._location_scale_remainder_graph(glm_terms)
        else:
            graph = self._glm_remainder_graph(glm_terms)
        return lik.compile([lik.theta, lik.theta_new, lik.idx], graph)

    # ------------------------------------------------------------------ setup
    def _theta_hat_input(self):
        """``θ̂`` in the graphs: a shared variable, not a constant. PyTensor writes the
        constants of a fused elementwise loop into its C code, so a constant ``θ̂`` (a
        scale ``σ̂`` or ``ν̂`` in a Student-t row term, say) made the compiled function new
        C code for every data set, compiled again however warm the cache (6.7 + 3.1 s for a
        Student-t regression with sampled ν); as an input, the same model on other data finds
        its code in the cache."""
        return pytensor.shared(self.theta_hat, name="theta_hat", shape=self.theta_hat.shape)

    def _remainder_graph(self):
        """Symbolic ``ξ_i(θ, θ')`` on the rows ``idx`` (eq. (4))."""
        lik = self.likelihood
        theta, theta_new = lik.theta, lik.theta_new
        # directional derivatives of ℓ_i at a free point, then pinned to θ̂
        probe = lik.theta.type("probe")
        direction = lik.theta.type("direction")
        terms_at_probe = lik.at(lik.terms, probe)
        d1 = Rop(terms_at_probe, probe, direction, use_op_rop_implementation=False)
        theta_hat = self._theta_hat_input()

        def along(graph, v):
            return graph_replace(graph, {probe: theta_hat, direction: v}, strict=False)

        r_hat = along(d1, theta_new - theta)
        if self.order == 2:
            d2 = Rop(d1, probe, direction, use_op_rop_implementation=False)
            r_hat = r_hat + 0.5 * (along(d2, theta_new - theta_hat) - along(d2, theta - theta_hat))
        return lik.diff_graph - r_hat

    def _glm_remainder_graph(self, glm_terms):
        """``ξ_i`` for GLM rows: ``f(η'_i) − f(η_i)`` minus the Taylor terms in ``θ``, written in
        ``η`` (and, for a quadratic predictor, its linear part).

        ``f`` is the family's closed form (:func:`pymc_subsample.model.glm.family_terms`), which the
        data pass checked against the model's own log-likelihood on all rows.
        """
        lik = self.likelihood
        theta_hat = self._theta_hat_input()
        xi = 0.0
        for term in glm_terms:
            eta_hat = lik.at(term.eta, theta_hat)
            eta_new = lik.at(term.eta, lik.theta_new)
            f_cur = family_terms(term, term.eta)[0]
            f_new = family_terms(term, eta_new)[0]
            _, f1, f2 = family_terms(term, eta_hat)
            u, u_new = term.eta - eta_hat, eta_new - eta_hat
            # the Taylor terms in θ: for a quadratic predictor u = v + ½δᵀQδ with v its
            # linear part, and f' multiplies v to order 1, u to order 2; f'' multiplies v²
            v, v_new = u, u_new
            if term.curvature is not None:
                rows_hat = lik.at(term.rows, theta_hat)
                v, v_new = (rows_hat @ (t - theta_hat) for t in (lik.theta, lik.theta_new))
            step = f1 * (v_new - v)
            if self.order == 2:
                step = f1 * (u_new - u) + 0.5 * f2 * (v_new**2 - v**2)
            xi = xi + (f_new - f_cur - step) / lik.temperature
        return xi

    def _location_scale_remainder_graph(self, terms):
        """``ξ_i`` for rows with several affine predictors ``p = (μ, λ, ...)``: ``f(p'_i) −
        f(p_i)`` minus the Taylor terms in ``p`` at ``p̂_i``, which equal those in ``θ`` because
        ``p`` is affine (:func:`pymc_subsample.model.location_scale.location_scale_terms`,
        checked against the model's likelihood by the data pass)."""
        lik = self.likelihood
        theta_hat = self._theta_hat_input()
        xi = 0.0
        for term in terms:
            cur = term.predictors
            new = tuple(lik.at(v, lik.theta_new) for v in cur)
            hat = tuple(lik.at(v, theta_hat) for v in cur)
            f_cur = location_scale_logp(term, *cur)
            f_new = location_scale_logp(term, *new)
            _, grad, hess = location_scale_terms(term, *hat)
            u, u_new = ([a - b for a, b in zip(p, hat, strict=True)] for p in (cur, new))
            step = sum(g * (b - a) for g, a, b in zip(grad, u, u_new, strict=True))
            if self.order == 2:
                for (j, k), h in zip(upper_pairs(len(cur)), hess, strict=True):
                    weight = 0.5 if j == k else 1.0
                    step = step + weight * h * (u_new[j] * u_new[k] - u[j] * u[k])
            xi = xi + (f_new - f_cur - step) / lik.temperature
        return xi

    # ------------------------------------------------------------------ per iteration
    def estimate_sum(self, theta: np.ndarray, theta_new: np.ndarray) -> float:
        """``Σ_i r̂_i(θ, θ')`` from ``G`` and ``H`` alone: O(d) or O(d²), no data."""
        est = float(self.grad_sum @ (theta_new - theta))
        if self.order == 2:
            a = theta - self.theta_hat
            a_new = theta_new - self.theta_hat
            # ½(a'ᵀHa' − aᵀHa) = ½(a' − a)ᵀH(a' + a), H symmetric: one product with H
            # (O(G·d_F) with many levels) instead of two
            est += 0.5 * bilinear_form(self.hess_sum, a_new - a, a_new + a)
        return est

    def remainder(self, theta: np.ndarray, theta_new: np.ndarray, idx: np.ndarray) -> np.ndarray:
        """``ξ_i(θ, θ') = r_i − r̂_i`` for the rows ``idx``; cost O(len(idx)).

        Tabulated remainders (NumPy, nothing compiled) serve the first
        :data:`COMPILE_AFTER_CALLS` calls; a run that goes on then compiles the graph, whose
        calls cost about half as much, and uses it from there on (a short run never pays the
        compile, a long one pays it once it has saved about as much)."""
        if self._calls_to_compile is not None:
            self._calls_to_compile -= 1
            if self._calls_to_compile < 0:
                self._xi_fn, self._calls_to_compile = self._compiled_remainder(), None
        return self._xi_fn(theta, theta_new, idx)
