"""The bad-input matrix: every model or knob either samples or fails at construction, clearly.

Each case is a small PyMC model, the step a user would build for it, and the expected outcome:
``("error", ExceptionType, regex)`` (raised when the step is constructed; the regex includes
the offending variable's name where there is one) or ``("posterior",)``, a model that must
build and sample. ``docs/bad-inputs.md`` is this table in prose; keep the two in step.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest

import pymc_subsample as pms
from pymc_subsample import SubsamplingModelError
from tests import row_models
from tests.posterior import SAMPLE, assert_matches, summary

N = 400
RNG = np.random.default_rng(2024)
X = np.column_stack([np.ones(N), RNG.normal(size=(N, 2))])
BETA = np.array([0.3, -0.8, 0.5])
Y_BIN = RNG.binomial(1, 1 / (1 + np.exp(-X @ BETA)))
Y_NORM = X @ BETA + RNG.normal(size=N)
Y_COUNT = RNG.poisson(np.log1p(np.exp(X @ BETA)))
X1 = RNG.normal(2.0, 1.5, size=N)  # an uncentred covariate

MHSS = pms.MHSS
AUSTERITY = partial(pms.AusterityMH, epsilon=0.01, batch_size=100, cv_order=2)
BARKER = partial(pms.BarkerMinibatch, batch_size=50, cv_order=2)


# ---------------------------------------------------------------- model builders


def logistic(X=X, y=Y_BIN, data=True):
    with pm.Model() as model:
        Xd = pm.Data("X", X) if data else X
        b = pm.Normal("b", 0, 5, shape=X.shape[1])
        pm.Bernoulli("y", logit_p=Xd @ b, observed=y)
    return model


def _with_nan(a, where, value=np.nan):
    a = np.array(a, dtype=np.float64)
    a[where] = value
    return a


def per_row_latent():
    with pm.Model() as model:
        z = pm.Normal("z", 0, 1, shape=N)
        pm.Normal("y", mu=z, sigma=1, observed=Y_NORM)
    return model


def imputed():
    with pm.Model() as model, warnings.catch_warnings():
        warnings.simplefilter("ignore", pm.ImputationWarning)
        m = pm.Normal("m", 0, 1)
        pm.Normal("y", mu=m, sigma=1, observed=_with_nan(Y_NORM, 3))
    return model


def observed(y, sigma=1.0):
    with pm.Model() as model:
        m = pm.Normal("m", 0, 1)
        pm.Normal("y", mu=m, sigma=sigma, observed=y)
    return model


def discrete_free():
    with pm.Model() as model:
        k = pm.Poisson("k", 3.0)
        pm.Normal("y", mu=k, sigma=1, observed=Y_NORM)
    return model


def different_lengths():
    with pm.Model() as model:
        m = pm.Normal("m", 0, 1)
        pm.Normal("y1", mu=m, sigma=1, observed=Y_NORM)
        pm.Normal("y2", mu=m, sigma=1, observed=Y_NORM[:150])
    return model


def mvnormal_rows():
    with pm.Model() as model:
        m = pm.Normal("m", 0, 1)
        pm.MvNormal("y", mu=m * np.ones(N), cov=np.eye(N), observed=Y_NORM)
    return model


def potential_on_data():
    with pm.Model() as model:
        m = pm.Normal("m", 0, 1)
        pm.Normal("y", mu=m, sigma=1, observed=Y_NORM)
        pm.Potential("pen", -((pm.Data("w", X1) - m) ** 2).sum())
    return model


def no_observed():
    with pm.Model() as model:
        pm.Normal("m", 0, 1)
    return model


def two_free():
    with pm.Model() as model:
        a = pm.Normal("a", 0, 1)
        b = pm.Normal("b", 0, 1)
        pm.Normal("y", mu=a + b, sigma=1, observed=Y_NORM)
    return model


def only_a(**kwargs):
    def make():
        model = pm.modelcontext(None)
        return pms.MHSS(vars=[model["a"]], **kwargs)

    return make


def studentt():
    with pm.Model() as model:
        b = pm.Normal("b", 0, 5, shape=3)
        pm.StudentT("obs", nu=4, mu=pm.Data("X", X) @ b, sigma=1, observed=Y_NORM)
    return model


def studentt_shifted_nu():
    with pm.Model() as model:
        b = pm.Normal("b", 0, 5, shape=3)
        # ν = 1 + e^u: log ν is not affine in the sampled u (a Gamma prior on ν is bounded)
        pm.StudentT("obs", nu=1.0 + pm.Exponential("nu_minus_one", 0.1),
                    mu=pm.Data("X", X) @ b, sigma=1, observed=Y_NORM)
    return model


def poisson_exp():
    with pm.Model() as model:
        b = pm.Normal("b", 0, 5, shape=3)
        pm.Poisson("counts", mu=pm.math.exp(pm.Data("X", X) @ b), observed=Y_COUNT)
    return model


def sine_mean():
    with pm.Model() as model:
        b = pm.Normal("b", 0, 5, shape=3)
        pm.Normal("y", mu=pt.sin(pm.Data("X", X) @ b), sigma=1.0, observed=Y_NORM)
    return model


def normal_mixture_four_predictors():
    """Two Normal components, each mean a regression and each σ sampled: four predictors
    (two per row, two scalars) through the mixture's class axis."""
    with pm.Model() as model:
        b = pm.Normal("b", 0, 5, shape=(3, 2))
        s = pm.HalfNormal("s", 1.0, shape=2)
        mu = pm.Data("X", X) @ b
        pm.NormalMixture("y", w=np.array([0.4, 0.6]), mu=mu, sigma=s, observed=Y_NORM)
    return model


def poisson_square():
    with pm.Model() as model:
        b = pm.Normal("b", 0, 5, shape=3)
        pm.Poisson("counts", mu=(pm.Data("X", X) @ b) ** 2, observed=Y_COUNT)
    return model


def weibull():
    with pm.Model() as model:
        b = pm.Normal("b", 0, 5, shape=3)
        pm.Weibull("sizes", alpha=2.0, beta=pm.math.exp(pm.Data("X", X) @ b),
                   observed=Y_COUNT + 0.5)
    return model


def poisson_softplus():
    with pm.Model() as model:
        b = pm.Normal("b", 0, 5, shape=3)
        pm.Poisson("counts", mu=pm.math.log1pexp(pm.Data("X", X) @ b), observed=Y_COUNT)
    return model


def normal_sigma_not_log_affine():
    with pm.Model() as model:
        b = pm.Normal("b", 0, 5, shape=3)
        s = pm.HalfNormal("s", 2.0)
        pm.Normal("resp", mu=pm.Data("X", X) @ b, sigma=s**2 + 0.1, observed=Y_NORM)
    return model


def normal_sampled_sigma_and_bernoulli():
    with pm.Model() as model:
        b = pm.Normal("b", 0, 5, shape=3)
        s = pm.HalfNormal("s", 2.0)
        eta = pm.Data("X", X) @ b
        pm.Normal("resp", mu=eta, sigma=s, observed=Y_NORM)
        pm.Bernoulli("flag", logit_p=eta, observed=(Y_NORM > 0).astype(int))
    return model


def normal_sampled_sigma():
    with pm.Model() as model:
        b = pm.Normal("b", 0, 5, shape=3)
        s = pm.HalfNormal("s", 2.0)
        pm.Normal("resp", mu=pm.Data("X", X) @ b, sigma=s, observed=Y_NORM)
    return model


def non_affine():
    with pm.Model() as model:
        b = pm.Normal("b", 0, 5, shape=3)
        pm.Bernoulli("y", logit_p=pm.Data("X", X) @ pt.tanh(b), observed=Y_BIN)
    return model


def product_among_many():
    with pm.Model() as model:
        a = pm.Normal("a", 0, 1)
        c = pm.Normal("c", 0, 1, shape=300)
        pm.Bernoulli("y", logit_p=a * c[pm.Data("g", np.arange(N) % 300)], observed=Y_BIN)
    return model


def centred_predictor():
    with pm.Model() as model:
        b = pm.Normal("b", 0, 5, shape=3)
        eta = pm.Data("X", X) @ b
        pm.Bernoulli("y", logit_p=eta - eta.mean(), observed=Y_BIN)
    return model


def customdist_value_mean():
    def logp(value, mu):
        return pm.logp(pm.Normal.dist(mu, 1.0), value) - value.mean()

    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 1)
        pm.CustomDist("obs", mu, logp=logp, observed=Y_NORM)
    return model


def cumsum():
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1)
        pm.Normal("walk", mu=pt.cumsum(b * pm.Data("x", X1)), sigma=1, observed=Y_NORM)
    return model


def ambiguous_axis():
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1, shape=2)
        K = pm.Data("K", RNG.normal(size=(2, N, N)))
        pm.Normal("y", mu=(b[:, None, None] * K).sum((0, 2)), sigma=1, observed=Y_NORM)
    return model


def observed_on_axis_one():
    with pm.Model() as model:
        b = pm.Normal("b", 0, 5, shape=3)
        pm.Normal("y", mu=b @ X.T, sigma=1, observed=Y_NORM[None, :])
    return model


def constant_column_standardised():
    with pm.Model() as model:
        b = pm.Normal("b", 0, 5, shape=3)
        Xd = pm.Data("X", X)  # column 0 is all ones: std 0
        pm.Bernoulli("y", logit_p=((Xd - Xd.mean(0)) / Xd.std(0)) @ b, observed=Y_BIN)
    return model


def censored_negative_binomial():
    """Counts censored at 6: each censored row's log P(Y ≥ 6) is PyMC's incomplete beta
    ``I_p(α, y + 1)`` at the row's own ``y``, a scalar loop PyTensor cannot differentiate
    twice (at ``y + 1 = 1``, a hurdle's P(Y = 0), it is rewritten as ``p^α``)."""
    with pm.Model() as model:
        b = pm.Normal("b", 0, 2, shape=3)
        alpha = pm.Gamma("alpha", 2.0, 0.5)
        pm.Censored("y", pm.NegativeBinomial.dist(mu=pm.math.exp(X @ b), alpha=alpha),
                    lower=None, upper=6, observed=np.minimum(Y_COUNT, 6))
    return model


def rows_on_axis_one():
    with pm.Model() as model:
        b = pm.Normal("b", 0, 5, shape=3)
        pm.Bernoulli("y", logit_p=b @ pm.Data("Xt", X.T), observed=Y_BIN)
    return model


def data_centred():
    with pm.Model() as model:
        b = pm.Normal("b", 0, 5, shape=2)
        x = pm.Data("x", X1)
        pm.Bernoulli("y", logit_p=b[0] + b[1] * (x - x.mean()), observed=Y_BIN)
    return model


def two_observed_same_rows():
    with pm.Model() as model:
        Xd = pm.Data("X", X)
        b = pm.Normal("b", 0, 5, shape=3)
        pm.Bernoulli("yb", logit_p=Xd @ b, observed=Y_BIN)
        pm.Normal("yn", mu=Xd @ b, sigma=1.0, observed=Y_NORM)
    return model


def intercept_and_coefficients():
    with pm.Model() as model:
        a = pm.Normal("a", 0, 5)
        b = pm.Normal("b", 0, 5, shape=2)
        pm.Normal("y", mu=a + pm.Data("X", X[:, 1:]) @ b, sigma=1.0, observed=Y_NORM)
    return model


def potential_on_parameters():
    with pm.Model() as model:
        b = pm.Normal("b", 0, 5, shape=3)
        pm.Bernoulli("y", logit_p=pm.Data("X", X) @ b, observed=Y_BIN)
        pm.Potential("c", -(b[0] ** 2))
    return model


def trailing_axis_observed():
    Y2 = np.column_stack([Y_NORM, Y_NORM + RNG.normal(size=N)])
    with pm.Model() as model:
        b = pm.Normal("b", 0, 5, shape=3)
        pm.Normal("y", mu=(pm.Data("X", X) @ b)[:, None], sigma=1.0, observed=Y2)
    return model


# ---------------------------------------------------------------- the matrix


@dataclass(frozen=True)
class Case:
    id: str
    build: Callable[[], pm.Model]
    step: Callable[[], pms.SubsamplingStep]
    expect: tuple
    floatx: str = "float64"
    xfail: str | None = None  # a known package bug: the reason, file and line


def error(exc, match):
    return ("error", exc, match)


POSTERIOR = ("posterior",)
E = SubsamplingModelError

CASES = [
    # --- what the model is: rejected for every step
    Case("per-row latent variable", per_row_latent, AUSTERITY,
         error(E, r"'z'.*per-row latent.*marginalise")),
    Case("NaN-imputed observations", imputed, BARKER,
         error(E, r"'y' has missing values.*drop the rows")),
    Case("NaN in a covariate array", partial(logistic, X=_with_nan(X, (5, 1)), data=False),
         MHSS, error(E, r"constant of shape \(400, 3\).*'y'.*NaN")),
    Case("inf in pm.Data", partial(logistic, X=_with_nan(X, (5, 1), np.inf)), MHSS,
         error(E, r"'X'.*'y'.*NaN or infinite")),
    Case("inf in observed values", partial(observed, _with_nan(Y_NORM, 0, np.inf)), AUSTERITY,
         error(E, r"observed values.*'y'.*NaN or infinite")),
    Case("-inf in observed values", partial(observed, _with_nan(Y_NORM, 7, -np.inf)), MHSS,
         error(E, r"observed values.*'y'.*NaN or infinite")),
    Case("discrete free variable", discrete_free, BARKER,
         error(E, r"'k' is discrete.*marginalise")),
    Case("observed variables of different lengths", different_lengths, MHSS,
         error(E, r"different numbers of rows.*'y1': 400")),
    Case("empty data", partial(observed, np.zeros(0)), AUSTERITY, error(E, r"'y' has no rows")),
    Case("MvNormal across rows", mvnormal_rows, BARKER, error(E, r"'y'.*not a sum over rows")),
    Case("Potential using row data", potential_on_data, MHSS, error(E, r"Potential.*'w'")),
    Case("Potential using row data: names the Potential", potential_on_data, AUSTERITY,
         error(E, r"pm.Potential 'pen'.*'w'")),
    Case("no observed variables", no_observed, MHSS, error(E, r"no observed variables")),
    Case("step not covering all free variables", two_free, only_a(),
         error(E, r"\['b'\] would be left to another step")),
    Case("row coupling: (X@b) - (X@b).mean()", centred_predictor, BARKER,
         error(E, r"'y' couples its rows.*NUTS")),
    Case("row coupling: CustomDist with value.mean()", customdist_value_mean, AUSTERITY,
         error(E, r"'obs' couples its rows")),
    Case("row coupling: cumsum", cumsum, MHSS, error(E, r"'walk' couples its rows.*Cumsum")),
    Case("ambiguous row axis", ambiguous_axis, MHSS, error(E, r"'K'.*'y'.*ambiguous.*first axis")),
    Case("observed with rows on axis 1", observed_on_axis_one, MHSS,
         error(E, r"'y' has shape \(1, 400\).*first axis")),
    Case("no second derivative: right-censored negative binomial at cv_order=2",
         censored_negative_binomial, pms.AusterityMH,
         error(E, r"'y' \(Censored\(NegativeBinomial\)\).*no second "
                  r"derivative.*ScalarLoop.*cv_order=1")),
    Case("data expression giving NaN", constant_column_standardised, BARKER,
         error(E, r"data \['X'\].*'y'.*NaN.*constant column")),
    # --- MHSS needs a bound: unsupported likelihoods
    Case("MHSS: StudentT with nu = 1 + a sampled value", studentt_shifted_nu, MHSS,
         error(E, r"'obs'.*sampled nu.*log\(nu\) is not affine.*UserBound")),
    # (X b)^2 has no hand-derived link: read by the automatic bound, whose reference fit
    # cannot start where every mean is 0
    Case("MHSS: Poisson with mean (Xb)^2", poisson_square, MHSS,
         error(E, r"not finite at the reference point.*map_point")),
    Case("MHSS: a row term through an op with no interval rule", sine_mean, MHSS,
         error(E, r"'y'.*the op Sin.*no interval rule.*UserBound")),
    # families the likelihood layer reads (AusterityMH and BarkerMinibatch sample them:
    # tests/test_likelihood_constructs.py) that MHSS's automatic bound cannot enclose yet
    Case("MHSS: a mixture through four predictors", normal_mixture_four_predictors, MHSS,
         error(E, r"'y'.*mixes classes.*through 4 predictors.*at most 3.*UserBound")),
    Case("MHSS: Normal with sigma**2 + 0.1", normal_sigma_not_log_affine, MHSS,
         error(E, r"'resp'.*sampled sigma.*log\(sigma\) is not affine.*UserBound")),
    Case("MHSS: non-affine predictor", non_affine, MHSS,
         error(E, r"'y'.*other than through predictors affine in them")),
    Case("MHSS: a product of two parameters among 301", product_among_many, MHSS,
         error(E, r"'y'.*product of two parameters among d = 301.*UserBound")),
    Case("MHSS: UserBound too small (probed at construction)", logistic,
         partial(MHSS, bound=pms.UserBound(np.full(400, 1e-12))),
         error(E, r"UserBound is violated: on row \d+ .*exceeds c_i·M")),
    Case("MHSS: UserBound of wrong length", logistic,
         partial(MHSS, bound=pms.UserBound(np.ones(5))),
         error(E, r"UserBound.row_constants.*one entry per row, shape \(400,\)")),
    # --- knobs
    Case("MHSS cv_order=3", logistic, partial(MHSS, cv_order=3),
         error(ValueError, r"cv_order must be 1 or 2")),
    Case("AusterityMH cv_order=3", logistic, partial(AUSTERITY, cv_order=3),
         error(ValueError, r"cv_order must be 1 or 2")),
    Case("temperature=0", logistic, partial(MHSS, temperature=0.0),
         error(ValueError, r"temperature must be a positive finite number; got 0.0")),
    Case("temperature<0", logistic, partial(AUSTERITY, temperature=-1.0),
         error(ValueError, r"temperature must be a positive finite number; got -1.0")),
    Case("temperature=inf", logistic, partial(BARKER, temperature=np.inf),
         error(ValueError, r"temperature must be a positive finite number; got inf")),
    Case("proposal_cov not positive definite", logistic, partial(MHSS, proposal_cov=-np.eye(3)),
         error(ValueError, r"proposal_cov must be symmetric positive definite")),
    Case("proposal_cov of the wrong shape", logistic, partial(MHSS, proposal_cov=np.eye(2)),
         error(ValueError, r"proposal_cov has shape \(2, 2\).*3 sampled coordinates")),
    Case("proposal_cov with NaN", logistic,
         partial(MHSS, proposal_cov=_with_nan(np.eye(3), (0, 0))),
         error(ValueError, r"proposal_cov contains NaN")),
    Case("unknown MHSS proposal", logistic, partial(MHSS, proposal="hmc"),
         error(ValueError, r"proposal must be one of.*'hmc'")),
    Case("unknown AusterityMH proposal", logistic, partial(AUSTERITY, proposal="pcn_typo"),
         error(ValueError, r"proposal must be one of.*'pcn_typo'")),
    Case("pCN with rho >= 1", logistic, partial(MHSS, proposal="pcn", scaling=1.5),
         error(ValueError, r"rho must be in \[0, 1\); got 1.5")),
    Case("df without the independence proposal", logistic, partial(MHSS, df=5.0),
         error(ValueError, r"df only applies to proposal='independence'")),
    Case("target_accept with pCN", logistic, partial(MHSS, target_accept=0.3),
         error(ValueError, r"target_accept only applies to the random walk")),
    Case("AusterityMH epsilon=1.5", logistic, partial(AUSTERITY, epsilon=1.5),
         error(ValueError, r"epsilon must be in \[0, 1\); got 1.5")),
    Case("BarkerMinibatch batch_size=0", logistic, partial(BARKER, batch_size=0),
         error(ValueError, r"batch_size must be a positive integer")),
    Case("BarkerMinibatch batch_size > N", logistic, partial(BARKER, batch_size=5000),
         error(ValueError, r"batch_size.*400")),
    Case("init unknown", logistic, partial(MHSS, init="map"),
         error(ValueError, r'init must be "laplace" or "pymc"')),
    Case("level_fraction=0", logistic, partial(MHSS, level_fraction=0.0),
         error(ValueError, r"level_fraction must be in \(0, 1\].*got 0.0")),
    Case("level_moves=True without a grouping factor", logistic, partial(MHSS, level_moves=True),
         error(ValueError, r"level_moves=True, but the model has no grouping factor")),
    # --- models that must work
    Case("float32 model", logistic, MHSS, POSTERIOR, floatx="float32"),
    Case("rows on axis 1: b @ Xt", rows_on_axis_one, MHSS, POSTERIOR),
    Case("x - x.mean() on data", data_centred, MHSS, POSTERIOR),
    Case("two observed variables on the same rows", two_observed_same_rows, MHSS, POSTERIOR),
    Case("intercept and coefficients as separate variables", intercept_and_coefficients, MHSS,
         POSTERIOR),
    Case("Potential on the parameters only", potential_on_parameters, MHSS, POSTERIOR),
    Case("MHSS: observed with a trailing axis", trailing_axis_observed, MHSS,
         error(E, r"'y'.*other than through predictors affine in them.*2 axes.*UserBound")),
    Case("AusterityMH: observed with a trailing axis", trailing_axis_observed, AUSTERITY,
         POSTERIOR),
    Case("MHSS: Poisson with softplus mean", poisson_softplus, MHSS, POSTERIOR),
    # bounded (the softmax weights' derivatives are bounded everywhere), but the logits' common
    # shift is identified by the prior only: the boxes are wide that way, and at 3,000 rows
    # every move was decided on all rows (exact, not cheap)
    Case("MHSS: softmax of logits without a reference class",
         partial(row_models.categorical_softmax, 3000), MHSS, POSTERIOR),
    Case("MHSS: Weibull (automatic bound)", weibull, MHSS, POSTERIOR),
    Case("MHSS: sampled-sigma Normal beside a Bernoulli (automatic bound)",
         normal_sampled_sigma_and_bernoulli, MHSS, POSTERIOR),
    Case("MHSS: Poisson with exp link (region-valid bounds)", poisson_exp, MHSS, POSTERIOR),
    Case("AusterityMH: Normal with sampled sigma", normal_sampled_sigma, AUSTERITY, POSTERIOR),
    Case("BarkerMinibatch: Normal with sampled sigma", normal_sampled_sigma, BARKER, POSTERIOR),
    Case("BarkerMinibatch: StudentT", studentt, BARKER, POSTERIOR),
    Case("covariates as a constant array", partial(logistic, data=False), BARKER, POSTERIOR),
]


def _params(cases):
    return [
        pytest.param(c, id=c.id, marks=[pytest.mark.xfail(strict=True, reason=c.xfail)]
                     if c.xfail else [])
        for c in cases
    ]


@pytest.mark.parametrize("case", _params(CASES))
def test_bad_input_matrix(case):
    with pytensor.config.change_flags(floatX=case.floatx):
        model = case.build()
        with model:
            if case.expect[0] == "error":
                _, exc, match = case.expect
                with pytest.raises(exc, match=match):
                    case.step()
                return
            step = case.step()
            idata = pm.sample(100, tune=50, chains=1, step=step, random_seed=1, **SAMPLE)
    for name in model.free_RVs:
        draws = idata.posterior[name.name].values
        assert np.all(np.isfinite(draws)), name
    accepted = idata.sample_stats["accepted"].values
    assert 0 < accepted.mean() <= 1
    first = model.free_RVs[0].name
    assert np.unique(idata.posterior[first].values.reshape(100, -1), axis=0).shape[0] > 5


KEY = {c.id: c for c in CASES}
NUTS_CASES = ["float32 model", "rows on axis 1: b @ Xt", "x - x.mean() on data"]


@pytest.mark.slow
@pytest.mark.parametrize("case_id", NUTS_CASES)
def test_key_working_models_match_nuts(case_id):
    case = KEY[case_id]
    with pytensor.config.change_flags(floatX=case.floatx):
        model = case.build()
        with model:
            nuts = pm.sample(1000, tune=500, chains=2, random_seed=3, **SAMPLE)
            idata = pm.sample(2000, tune=300, chains=2, step=case.step(), random_seed=4,
                              **SAMPLE)
    ref_mean, ref_sd, ref_mcse = summary(nuts)
    assert_matches(idata, ref_mean, ref_sd, ref_mcse)
