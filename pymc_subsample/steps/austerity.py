"""The ``AusterityMH`` step: the approximate sequential MH test of Korattikara et al. (2014).

The step only wires the model to the pure kernel :mod:`pymc_subsample.kernels.austerity`: it draws
``u``, forms ``μ0`` from the prior and proposal terms (and the control-variate sum, if any) and
hands the kernel a function that returns the population values for a batch of rows.
"""

from __future__ import annotations

import math
import operator
from typing import Any

import numpy as np
import pytensor.tensor as pt
from pytensor.gradient import grad

from pymc_subsample.errors import positive_int
from pymc_subsample.kernels.austerity import (
    SequentialTestResult,
    austerity_mu0,
    sequential_mh_test,
    validate_austerity_knobs,
)
from pymc_subsample.kernels.indexing import WithoutReplacementSampler
from pymc_subsample.model.reference import fit_reference
from pymc_subsample.proposals.proposal import LangevinProposal
from pymc_subsample.steps.base import COMMON_STATS, Move, SubsamplingStep

__all__ = ["AusterityMH"]

_PROPOSALS = ("random_walk", "langevin", "pcn", "independence")
_GRADIENTS = ("minibatch", "surrogate")


def _check_epsilon_and_batch_size(epsilon, batch_size) -> None:
    """The checks that do not need ``N``, run before the (costly) model setup."""
    validate_austerity_knobs(epsilon, 1, 1)  # ε alone: batch 1 of 1 row always passes
    positive_int("batch_size", batch_size, "rows added at each step of the sequential test")


class AusterityMH(SubsamplingStep):
    r"""Approximate Metropolis–Hastings by a sequential t-test (Korattikara, Chen & Welling 2014).

    Each iteration proposes ``θ'``, draws ``u ~ U(0, 1)`` and tests ``μ > μ0`` with
    ``μ = (1/N) Σ_i l_i``, ``l_i = ℓ_i(θ') − ℓ_i(θ)`` and (paper, Eq. 2)

    .. math::

        μ_0 = \frac1N\Big[\log u - \log\frac{p_0(θ')}{p_0(θ)}
              - \log\frac{q(θ|θ')}{q(θ'|θ)}\Big]

    on a sample of rows that grows by ``batch_size`` at a time, without replacement
    (Algorithm 1): after each batch the Student-t p-value ``δ`` of ``H0: μ = μ0`` is computed
    with the finite-population correction, and the test stops once ``δ < ε``, accepting iff the
    sample mean exceeds ``μ0``. When all ``N`` rows have been read the decision is the exact MH
    one. ``epsilon=0`` is therefore exact MH (every test reads all rows); larger ``epsilon``
    reads less data and biases the stationary distribution by at most ``Δmax/(1 − η)``
    (Theorem 1).

    With ``cv_order`` set, the population is the control-variate remainder
    ``ξ_i = l_i − r̂_i`` and ``Σ_i r̂_i / N`` moves into ``μ0`` (``docs/methods/austerity.md``): near
    the mode the spread of ``ξ_i`` is orders of magnitude below that of ``l_i``, and so is the
    data read.

    Parameters
    ----------
    vars : list, optional
        Must be all free variables of the model (the default).
    epsilon : float
        Bound ``ε ∈ [0, 1)`` on the p-value at which the test decides. 0 is exact MH.
    batch_size : int
        Rows added per step of the test (``m``), in ``[1, N]``. The t-approximation needs the
        central limit theorem to hold for a batch: a few hundred rows (paper, Sec. 5.5).
    cv_order : {None, 1, 2}
        Taylor control variates at the reference point (``docs/methods/mhss.md``); ``None``
        for none.
    temperature : float
        ``K > 0``; every ``ℓ_i`` is divided by ``K``.
    proposal : {"random_walk", "langevin"}
        ``"random_walk"``: the Laplace random walk shared with :class:`~pymc_subsample.MHSS`
        (symmetric). ``"langevin"``: the preconditioned Langevin proposal
        :class:`~pymc_subsample.proposals.LangevinProposal` ``θ' = θ + (s²/2)Vĝ(θ) + s·chol(V)z``
        with the same ``V`` and scale ``s``; its ``log q`` ratio enters ``μ0``.
    langevin_gradient : {None, "minibatch", "surrogate"}
        The gradient estimate ``ĝ`` of ``∇ log π`` for ``proposal="langevin"``:

        * ``"minibatch"`` (SGLD, paper Sec. 5.4, Eq. 13):
          ``∇ log p0(θ) + (N/m_g) Σ_{i∈B} ∇ℓ_i(θ)`` on a minibatch ``B`` of ``m_g`` rows drawn
          without replacement once per proposal, independently of ``θ``. The same ``B`` is used
          at ``θ'`` for the reverse density, so each minibatch's kernel has a computable MH
          correction (Eq. 14) and the mixture over minibatches keeps detailed balance. Cost:
          gradients of ``m_g`` rows at two points per iteration, on top of the test's rows.
        * ``"surrogate"``: the gradient of the second-order Taylor surrogate of the
          log-likelihood at ``θ̂``, ``∇ log p0(θ) + G + H(θ − θ̂)`` (``docs/methods/mhss.md``).
          Deterministic, O(d²) per evaluation, reads no data after the one setup pass that
          computes ``G`` and ``H`` (shared with the control variates when ``cv_order`` is set).

        ``None`` picks ``"surrogate"`` when ``cv_order`` is set (``G``, ``H`` are already there)
        and ``"minibatch"`` otherwise.
    gradient_batch_size : int, optional
        ``m_g`` for ``langevin_gradient="minibatch"``; defaults to ``batch_size``.
    **kwargs
        ``map_point``, ``proposal_cov``, ``scaling`` (κ, default 1.5), ``target_accept``
        (default 0.234 for the random walk, 0.574 for Langevin), ``tune``,
        ``compile_kwargs``, ``model``, ``rng``: see
        :class:`~pymc_subsample.steps.base.SubsamplingStep`.

    Attributes
    ----------
    epsilon, batch_size : float, int
        The knobs, validated.
    proposal_rows : int
        Rows whose gradient the proposal reads per iteration (``m_g`` for the minibatch
        Langevin gradient, else 0); not included in the ``n_data`` stat.

    Notes
    -----
    Sampler stats per draw: ``accepted``; ``n_data`` (rows read by the test); ``n_batches``;
    ``p_value`` (the final ``δ``; 0 for an exact decision); ``exact_decision`` (all ``N`` rows
    were read, so the decision is the exact MH one; also True for a proposal of zero prior
    density or a non-finite Langevin gradient, rejected without reading data); ``scaling``
    (κ, the scale relative to ``1/√d``); ``non_finite`` (the prior, proposal ratio or a row term
    read was NaN or infinite: the proposal was rejected).

    Index draws and ``u`` come from separate child streams of the step's generator; the
    Langevin minibatch comes from the proposal's stream.

    Data read and bias without control variates. For a random walk scaled to the posterior,
    ``l_i ≈ ∇ℓ_i(θ)ᵀ(θ' − θ)`` and the standard error of the estimate of ``N·μ`` after ``n`` rows
    is about ``κ·√(N/n)``, while ``N(μ − μ0) = Δ − log u`` is O(1). The test therefore stops
    after a fraction of about ``t²κ²/(t²κ² + (Δ − log u)²)`` of the rows (``t`` the Student-t
    quantile at ``ε``) *whatever N is*: around half the data or more at ``ε = 0.01`` for any
    reasonably tuned κ. Each batch is a chance to stop on a fluctuation, so wrong decisions
    (and the bias, which shows as a too-wide posterior: downhill moves are wrongly accepted
    more often than uphill ones are wrongly rejected) grow with ``ε`` and with the number of
    batches ``N / batch_size``. With order-2 control variates the remainders ``ξ_i`` are
    third order in the step, the test decides after the first batch near the mode, and
    wrong decisions become rare.

    References
    ----------
    Korattikara, A., Chen, Y. & Welling, M. (2014). Austerity in MCMC land: cutting the
    Metropolis–Hastings budget. *ICML*, PMLR 32(1):181–189.
    Welling, M. & Teh, Y. W. (2011). Bayesian learning via stochastic gradient Langevin
    dynamics. *ICML*, 681–688.

    Examples
    --------
    .. code-block:: python

        import pymc as pm
        import pymc_subsample as pms

        with pm.Model():
            X = pm.Data("X", X_np)
            b = pm.Normal("b", 0, 10, shape=X_np.shape[1])
            pm.Bernoulli("y", logit_p=X @ b, observed=y_np)
            step = pms.AusterityMH(epsilon=0.01, batch_size=500, cv_order=2)
            idata = pm.sample(step=step, random_seed=1)
    """

    name = "austerity_mh"
    default_target_accept = 0.234
    needs_reference_point = False
    stats_dtypes_shapes = {
        **COMMON_STATS,
        "n_batches": (np.int64, []),
        "p_value": (np.float64, []),
        "exact_decision": (bool, []),
    }

    def __init__(
        self,
        vars=None,
        *,
        epsilon: float = 0.01,
        batch_size: int = 500,
        cv_order: int | None = None,
        temperature: float = 1.0,
        proposal: str = "random_walk",
        langevin_gradient: str | None = None,
        gradient_batch_size: int | None = None,
        **kwargs,
    ):
        _check_epsilon_and_batch_size(epsilon, batch_size)
        if proposal not in _PROPOSALS:
            raise ValueError(f"proposal must be one of {_PROPOSALS}; got {proposal!r}")
        if proposal == "langevin":
            if langevin_gradient is None:
                langevin_gradient = "surrogate" if cv_order is not None else "minibatch"
            if langevin_gradient not in _GRADIENTS:
                raise ValueError(
                    f"langevin_gradient must be one of {_GRADIENTS} or None; got "
                    f"{langevin_gradient!r}"
                )
            if langevin_gradient == "minibatch":
                if gradient_batch_size is None:
                    gradient_batch_size = batch_size
                _check_gradient_batch_size(gradient_batch_size)
            if kwargs.get("target_accept") is None:
                kwargs["target_accept"] = 0.574  # MALA (Roberts & Rosenthal 1998)
        elif langevin_gradient is not None or gradient_batch_size is not None:
            raise ValueError(
                "langevin_gradient and gradient_batch_size only apply to proposal='langevin'"
            )
        super().__init__(
            vars,
            cv_order=cv_order,
            temperature=temperature,
            proposal="random_walk" if proposal == "langevin" else proposal,
            **kwargs,
        )
        self.epsilon, self.batch_size, _ = validate_austerity_knobs(
            epsilon, batch_size, self.n_rows
        )
        self.proposal_kind = proposal
        self.langevin_gradient = langevin_gradient if proposal == "langevin" else None
        self.proposal_rows = 0
        self.gradient_draw = None
        if proposal == "langevin":
            if langevin_gradient == "minibatch":
                gradient_batch_size = operator.index(gradient_batch_size)
                if gradient_batch_size > self.n_rows:
                    raise ValueError(
                        f"gradient_batch_size must be in [1, N] = [1, {self.n_rows}]; got "
                        f"{gradient_batch_size}"
                    )
                draw = self._minibatch_gradient(gradient_batch_size)
                self.proposal_rows = gradient_batch_size
            else:
                draw = self._surrogate_gradient(kwargs.get("map_point"))
            self.gradient_draw = draw  # in θ; the proposal gets it in the whitened frame
            walk = self.proposal
            self.proposal = LangevinProposal(
                walk.chol @ walk.chol.T, walk.scale, self._in_frame(draw), base=walk.base
            )
            self._initial_parameter = self.proposal.parameter

    # ------------------------------------------------------------------ Langevin gradients
    def _in_frame(self, draw):
        """Gradients in ``θ`` as gradients in the whitened ``φ`` the proposal moves."""
        frame = self.frame

        def draw_phi(rng: np.random.Generator):
            grad_theta = draw(rng)
            return lambda phi: frame.whiten_gradient(grad_theta(frame.unwhiten(phi)))

        return draw_phi

    def _minibatch_gradient(self, m: int):
        """SGLD estimate ``∇ log p0(θ) + (N/m) Σ_{i∈B} ∇ℓ_i(θ)`` on one minibatch ``B``."""
        lik = self.likelihood
        n_over_m = pt.cast(lik.n_rows, "float64") / pt.cast(lik.idx.shape[0], "float64")
        estimate = grad(lik.logp0_graph, lik.theta) + n_over_m * grad(lik.terms.sum(), lik.theta)
        fn = lik.compile([lik.theta, lik.idx], estimate)
        n_rows = self.n_rows

        def draw(rng: np.random.Generator):
            batch = WithoutReplacementSampler(n_rows, rng).next(m)
            return lambda theta: fn(theta, batch)

        return draw

    def _surrogate_gradient(self, map_point):
        """Gradient of the order-2 Taylor surrogate ``∇ log p0(θ) + G + H(θ − θ̂)``."""
        lik = self.likelihood
        reference = self.reference
        if reference is None:  # a user proposal_cov and no control variates
            reference = fit_reference(lik, self._data_pass(lik, self.cv_order), map_point=map_point)
            self.theta_hat = reference.theta_hat
        g_sum, h_sum = reference.grad_sum, reference.hess_sum
        grad_p0 = lik.compile([lik.theta], grad(lik.logp0_graph, lik.theta))
        theta_hat = self.theta_hat

        def gradient(theta: np.ndarray) -> np.ndarray:
            return grad_p0(theta) + g_sum + h_sum @ (theta - theta_hat)

        return lambda rng: gradient

    # ------------------------------------------------------------------ the test
    def sequential_test(
        self,
        theta: np.ndarray,
        theta_new: np.ndarray,
        log_u: float,
        log_rest: float,
        *,
        epsilon: float | None = None,
        rng: np.random.Generator | None = None,
    ) -> SequentialTestResult:
        """Run Algorithm 1 for one ``(θ, θ', u)``; ``log_rest`` = log p0 ratio + log q ratio.

        ``epsilon`` overrides the step's (for sweeps over one compiled model); ``rng`` the index
        stream. A proposal with ``log_rest = -inf`` (zero prior density) or NaN is rejected
        without reading data.
        """
        if not log_rest > -math.inf:
            return SequentialTestResult(False, 0, 0, 0.0, True)
        cv_sum, row_diffs = self._row_differences(theta, theta_new)

        mu0 = austerity_mu0(log_u, log_rest, 0.0, self.n_rows, cv_sum)
        return sequential_mh_test(
            row_diffs,
            self.n_rows,
            mu0,
            epsilon=self.epsilon if epsilon is None else epsilon,
            batch_size=self.batch_size,
            rng=self.rng_index if rng is None else rng,
        )

    def loglik_diff_sum(self, theta: np.ndarray, theta_new: np.ndarray) -> float:
        """``Σ_i l_i`` over all ``N`` rows: the exact MH test accepts iff it exceeds
        ``log u − log_rest`` (for checks and benchmarks; O(N))."""
        lik = self.likelihood
        return lik.sum_over_rows(lambda idx: lik.loglik_diff(theta, theta_new, idx))

    def _decide(self, move: Move) -> tuple[bool, dict[str, Any]]:
        log_u = math.log1p(-self.rng_accept.random())  # u = 1 − U ∈ (0, 1]: log u finite
        result = self.sequential_test(move.theta, move.theta_new, log_u, move.log_rest)
        stats = {
            "n_data": result.n_data,
            "n_batches": result.n_batches,
            "p_value": result.p_value,
            "exact_decision": result.exact,
        }
        return result.accepted, stats


def _check_gradient_batch_size(value) -> None:
    positive_int("gradient_batch_size", value, "rows of the SGLD minibatch")
