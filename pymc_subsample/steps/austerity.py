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

from pymc_subsample.errors import positive_int
from pymc_subsample.kernels.austerity import (
    SequentialTestResult,
    austerity_mu0,
    sequential_mh_test,
    validate_austerity_knobs,
)
from pymc_subsample.model.langevin import (
    check_langevin_options,
    langevin_proposal,
    minibatch_gradient,
    surrogate_gradient,
)
from pymc_subsample.model.reference import fit_reference
from pymc_subsample.steps.base import COMMON_STATS, Move, SubsamplingStep
from pymc_subsample.steps.rows_warning import RowsReadCounter, austerity_rows_advice

__all__ = ["AusterityMH"]


class AusterityMH(RowsReadCounter, SubsamplingStep):
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
        Rows added per step of the test (``m``), in ``[1, N]``. The paper (Sec. 5.5) uses a few
        hundred for the raw differences; 100 suits the control-variate remainders, whose tests
        mostly decide on the first batch (``docs/benchmarks.md``).
    cv_order : {2, 1, None}
        Taylor control variates at the reference point (``docs/methods/mhss.md``), order 2 by
        default; ``None`` for none (the paper's setting: near the posterior the test then
        reads about half the rows at ``ε = 0.01`` and the posterior comes out too wide).
    temperature : float
        ``K > 0``; every ``ℓ_i`` is divided by ``K``.
    proposal : {None, "pcn", "independence", "random_walk", "langevin"}
        ``None`` (default): ``"pcn"``, or ``"random_walk"`` when ``proposal_cov`` is given.
        ``"pcn"`` and ``"independence"``: the proposals around the Laplace approximation
        shared with :class:`~pymc_subsample.MHSS` (:mod:`pymc_subsample.proposals`), their
        parameter (``ρ``, ``s``) chosen during tuning by jump distance per row read; their
        ``log q`` ratio enters ``μ0``. With ``cv_order=2`` almost every test decides on its
        first batch. ``"random_walk"``: the Laplace random walk (symmetric), ``κ`` tuned toward
        ``target_accept``. ``"langevin"``: the preconditioned Langevin proposal
        :class:`~pymc_subsample.proposals.LangevinProposal` ``θ' = θ + (s²/2)Vĝ(θ) + s·chol(V)z``
        with the same ``V`` and scale ``s``; its ``log q`` ratio enters ``μ0``.
    langevin_gradient : {None, "minibatch", "surrogate"}
        The gradient estimate ``ĝ`` of ``∇ log π`` for ``proposal="langevin"``: ``"minibatch"``
        (SGLD, paper Sec. 5.4, Eq. 13; one minibatch of ``m_g`` rows per proposal, used for
        the reverse density too) or ``"surrogate"`` (the order-2 Taylor surrogate at ``θ̂``,
        no data read); ``docs/methods/austerity.md``. ``None`` picks ``"surrogate"`` when
        ``cv_order`` is set and ``gradient_batch_size`` is not, else ``"minibatch"``.
    gradient_batch_size : int, optional
        ``m_g`` for ``langevin_gradient="minibatch"``; defaults to ``batch_size``.
    **kwargs
        ``map_point``, ``proposal_cov`` (random walk), ``scaling`` (the proposal's initial
        parameter), ``df`` (independence), ``target_accept`` (random walk: default 0.234;
        Langevin: 0.574), ``tune``, ``compile_kwargs``, ``model``, ``rng``: see
        :class:`~pymc_subsample.steps.base.SubsamplingStep`.

    Attributes
    ----------
    epsilon, batch_size : float, int (the knobs, validated)
    proposal_rows : int
        Rows whose gradient the proposal reads per iteration (``m_g`` for the minibatch
        Langevin gradient, else 0); not included in the ``n_data`` stat.

    Notes
    -----
    Sampler stats per draw: the README's table (also in ``docs/getting-started.md``).

    A chain whose tests read more than 10% of the rows per iteration on average, over at least
    500 draws after tuning, warns once, naming the knob that would lower it.

    Index draws and ``u`` come from separate child streams of the step's generator, the
    Langevin minibatch from the proposal's. Data read and bias: ``docs/methods/austerity.md``.

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
            step = pms.AusterityMH()  # pCN, cv_order=2, epsilon=0.01, batch_size=100
            idata = pm.sample(step=step, random_seed=1)
    """

    name = "austerity_mh"
    default_proposal = "pcn"
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
        batch_size: int = 100,
        cv_order: int | None = 2,
        temperature: float = 1.0,
        proposal: str | None = None,
        langevin_gradient: str | None = None,
        gradient_batch_size: int | None = None,
        **kwargs,
    ):
        if proposal is None:  # a user's random-walk covariance asks for the random walk
            proposal = (
                "random_walk" if kwargs.get("proposal_cov") is not None else self.default_proposal
            )
        # the checks that do not need N, before the (costly) setup; ε alone: 1 row of 1 passes
        validate_austerity_knobs(epsilon, 1, 1)
        positive_int("batch_size", batch_size, "rows added at each step of the sequential test")
        langevin_gradient, gradient_batch_size = check_langevin_options(
            proposal, langevin_gradient, gradient_batch_size, batch_size, cv_order)
        if proposal == "langevin" and kwargs.get("target_accept") is None:
            kwargs["target_accept"] = 0.574  # MALA (Roberts & Rosenthal 1998)
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
            lik = self.likelihood
            if langevin_gradient == "minibatch":
                draw = minibatch_gradient(lik, gradient_batch_size)
                self.proposal_rows = operator.index(gradient_batch_size)
            else:
                reference = self.reference
                if reference is None:  # a user proposal_cov and no control variates
                    reference = fit_reference(lik, self._data_pass(lik, self.cv_order),
                                              map_point=kwargs.get("map_point"))
                    self.theta_hat = reference.theta_hat
                draw = surrogate_gradient(lik, reference.grad_sum, reference.hess_sum,
                                          self.theta_hat)
            self.gradient_draw = draw  # in θ; the proposal gets it in the whitened frame
            self.proposal = langevin_proposal(self.proposal, self.frame, draw)
            self._initial_parameter = self.proposal.parameter

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
            row_diffs, self.n_rows, mu0, epsilon=self.epsilon if epsilon is None else epsilon,
            batch_size=self.batch_size, rng=self.rng_index if rng is None else rng,
        )

    def loglik_diff_sum(self, theta: np.ndarray, theta_new: np.ndarray) -> float:
        """``Σ_i l_i`` over all ``N`` rows: the exact MH test accepts iff it exceeds
        ``log u − log_rest`` (for checks and benchmarks; O(N))."""
        lik = self.likelihood
        return lik.sum_over_rows(lambda idx: lik.loglik_diff(theta, theta_new, idx))

    def _decide(self, move: Move) -> tuple[bool, dict[str, Any]]:
        log_u = math.log1p(-self.rng_accept.random())  # u = 1 − U ∈ (0, 1]: log u finite
        result = self.sequential_test(move.theta, move.theta_new, log_u, move.log_rest)
        self._count_rows(result.n_data)
        stats = {
            "n_data": result.n_data,
            "n_batches": result.n_batches,
            "p_value": result.p_value,
            "exact_decision": result.exact,
        }
        return result.accepted, stats


    _rows_advice = austerity_rows_advice
