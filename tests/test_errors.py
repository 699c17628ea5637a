"""Bad input gets a clear error naming the variable and what to do, before any sampling."""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest
from pymc.sampling.parallel import ParallelSamplingError

import pymc_subsample as pms
from pymc_subsample.errors import SubsamplingModelError
from pymc_subsample.model import row_checks
from pymc_subsample.model.likelihood import SubsampledLikelihood

RNG = np.random.default_rng(0)
X = RNG.normal(size=(60, 2))
Y = RNG.binomial(1, 0.5, size=60)


def _logistic(X=X, y=Y):
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1, shape=2)
        pm.Bernoulli("y", logit_p=pm.Data("X", X) @ b, observed=y)
    return model


def test_per_row_latent_variable():
    with pm.Model() as model:
        z = pm.Normal("z", 0, 1, shape=60)
        pm.Normal("y", mu=z, sigma=1, observed=RNG.normal(size=60))
    with pytest.raises(SubsamplingModelError, match="'z'.*per-row latent.*marginalise"):
        SubsampledLikelihood(model)


def test_imputed_missing_observations():
    y = RNG.normal(size=60)
    y[3] = np.nan
    with pm.Model() as model:
        m = pm.Normal("m", 0, 1)
        pm.Normal("y", mu=m, sigma=1, observed=y)
    with pytest.raises(SubsamplingModelError, match="'y' has missing values.*drop the rows"):
        SubsampledLikelihood(model)


def test_nonfinite_covariates_in_pm_data():
    Xb = X.copy()
    Xb[5, 1] = np.inf  # pm.Data itself refuses NaN, but lets inf through
    with pytest.raises(SubsamplingModelError, match="'X'.*'y'.*NaN or infinite"):
        SubsampledLikelihood(_logistic(Xb))


def test_nonfinite_covariates_in_a_constant_array():
    Xb = X.copy()
    Xb[5, 1] = np.nan
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1, shape=2)
        pm.Bernoulli("y", logit_p=Xb @ b, observed=Y)
    with pytest.raises(SubsamplingModelError, match=r"constant of shape \(60, 2\).*'y'.*NaN"):
        SubsampledLikelihood(model)


def test_infinite_observed_values():
    y = RNG.normal(size=60)
    y[0] = np.inf
    with pm.Model() as model:
        m = pm.Normal("m", 0, 1)
        pm.Normal("y", mu=m, sigma=1, observed=y)
    with pytest.raises(SubsamplingModelError, match="observed values.*'y'.*NaN or infinite"):
        SubsampledLikelihood(model)


def test_discrete_sampled_variable():
    with pm.Model() as model:
        k = pm.Poisson("k", 3.0)
        pm.Normal("y", mu=k, sigma=1, observed=RNG.normal(size=60))
    with pytest.raises(SubsamplingModelError, match="'k' is discrete.*marginalise"):
        SubsampledLikelihood(model)


def test_observed_variables_of_different_lengths():
    with pm.Model() as model:
        m = pm.Normal("m", 0, 1)
        pm.Normal("y1", mu=m, sigma=1, observed=RNG.normal(size=60))
        pm.Normal("y2", mu=m, sigma=1, observed=RNG.normal(size=40))
    with pytest.raises(SubsamplingModelError, match="different numbers of rows.*'y1': 60"):
        SubsampledLikelihood(model)


def test_empty_data():
    with pm.Model() as model:
        m = pm.Normal("m", 0, 1)
        pm.Normal("y", mu=m, sigma=1, observed=np.zeros(0))
    with pytest.raises(SubsamplingModelError, match="'y' has no rows"):
        SubsampledLikelihood(model)


def test_likelihood_not_a_sum_over_rows():
    with pm.Model() as model:
        m = pm.Normal("m", 0, 1)
        pm.MvNormal("y", mu=m * np.ones(60), cov=np.eye(60), observed=RNG.normal(size=60))
    with pytest.raises(SubsamplingModelError, match="'y'.*not a sum over rows"):
        SubsampledLikelihood(model)


def test_potential_on_the_data():
    with pm.Model() as model:
        m = pm.Normal("m", 0, 1)
        pm.Normal("y", mu=m, sigma=1, observed=RNG.normal(size=60))
        pm.Potential("pen", -((pm.Data("w", RNG.normal(size=60)) - m) ** 2).sum())
    with pytest.raises(SubsamplingModelError, match="Potential.*'w'"):
        SubsampledLikelihood(model)


def test_no_observed_variables():
    with pm.Model() as model:
        pm.Normal("m", 0, 1)
    with pytest.raises(SubsamplingModelError, match="no observed variables"):
        SubsampledLikelihood(model)


def test_step_must_sample_every_free_variable():
    with pm.Model() as model:
        a = pm.Normal("a", 0, 1)
        b = pm.Normal("b", 0, 1)
        pm.Normal("y", mu=a + b, sigma=1, observed=RNG.normal(size=60))
    with pytest.raises(SubsamplingModelError, match=r"\['b'\] would be left to another step"):
        SubsampledLikelihood(model, vars=[model.rvs_to_values[a]])


def test_a_variable_left_out_is_named_as_the_user_wrote_it():
    # sigma's value variable is sigma_log__; the message names sigma
    with pm.Model() as model:
        a = pm.Normal("a", 0, 1)
        sigma = pm.HalfNormal("sigma", 1)
        pm.Normal("y", mu=a, sigma=sigma, observed=RNG.normal(size=60))
    assert model.rvs_to_values[sigma].name == "sigma_log__"
    with pytest.raises(SubsamplingModelError,
                       match=r"\['sigma'\] would be left to another step") as err:
        SubsampledLikelihood(model, vars=[model.rvs_to_values[a]])
    assert "sigma_log__" not in str(err.value)


@pytest.mark.parametrize("temperature", [0.0, -1.0, np.inf, np.nan])
def test_non_positive_temperature(temperature):
    with pytest.raises(ValueError, match="temperature must be a positive"):
        SubsampledLikelihood(_logistic(), temperature=temperature)


@pytest.mark.parametrize("order", [0, 3, None, 1.5])
def test_mhss_cv_order(order):
    with _logistic():
        with pytest.raises(ValueError, match="cv_order must be 1 or 2"):
            pms.MHSS(cv_order=order)


def test_mhss_unsupported_family_names_variable():
    with pm.Model():
        b = pm.Normal("b", 0, 1, shape=2)
        # a Poisson whose log mean is tan(η): the automatic bound has no interval rule for
        # tan (a hurdle or zero-inflated negative binomial is bounded automatically)
        pm.Poisson("obs", mu=pm.math.exp(pt.tan(pm.Data("X", X) @ b)),
                   observed=RNG.poisson(1.5, size=60))
        with pytest.raises(SubsamplingModelError,
                           match="'obs'.*the op Tan.*no interval rule.*UserBound"):
            pms.MHSS(cv_order=2)


def test_user_bound_of_wrong_length():
    with _logistic():
        with pytest.raises(SubsamplingModelError, match=r"one entry per row, shape \(60,\)"):
            pms.MHSS(cv_order=2, bound=pms.UserBound(np.ones(5)))


def test_bad_proposal_cov():
    with _logistic():
        with pytest.raises(ValueError, match="positive definite"):
            pms.MHSS(cv_order=2, proposal_cov=-np.eye(2))
        with pytest.raises(ValueError, match="2 sampled coordinates"):
            pms.MHSS(cv_order=2, proposal_cov=np.eye(3))


def test_mixture_observed_is_bounded_automatically_through_its_class_axis():
    """Mixtures are split into rows (tests/test_likelihood_mixtures.py); MHSS reads a small
    class axis as columns (model/columns.py) and bounds the row term automatically."""
    with pm.Model() as model:
        m = pm.Normal("m", 0, 1)
        pm.NormalMixture("y", w=[0.5, 0.5], mu=pm.math.stack([m, m + 1]), sigma=1.0,
                         observed=RNG.normal(size=60))
    assert SubsampledLikelihood(model).n_rows == 60
    with model:
        step = pms.MHSS(progressbar=False)
    assert step.setup_profile["full_data_passes"] >= 1


def test_mixture_with_a_sampled_scale_is_read_through_its_predictors():
    """A sampled σ shared by the components reaches the class axis as a length-one vector
    whose axis a DimShuffle drops: read as one column, so the row term has three predictors
    (two means and log σ), not an unreadable two-axis array; three are within
    ``MAX_MIXTURE_PREDICTORS`` (four are refused: tests/test_bad_inputs.py). (Means ``m`` and
    ``m + 1``, offsets of one ``m``, would be one predictor.)"""
    with pm.Model() as model:
        m = pm.Normal("m", [-1.0, 1.0], 1.0, shape=2)  # priors apart: no label switching
        s = pm.HalfNormal("s", 1.0)
        pm.NormalMixture("y", w=[0.5, 0.5], mu=pm.math.stack([m[0], m[1]]), sigma=s,
                         observed=RNG.normal(size=60))
    with model:
        step = pms.MHSS(progressbar=False)
    (term,) = step._reference_pass.terms
    assert term.family.n_predictors == 3


def test_parameter_dependent_centering_couples_rows():
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1, shape=2)
        eta = pm.Data("X", X) @ b
        pm.Bernoulli("y", logit_p=eta - eta.mean(), observed=Y)
    with pytest.raises(SubsamplingModelError, match=r"'y' couples its rows.*Sum.*NUTS"):
        SubsampledLikelihood(model)


def test_customdist_with_the_mean_of_its_value_couples_rows():
    def logp(value, mu):
        return pm.logp(pm.Normal.dist(mu, 1.0), value) - value.mean()

    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 1)
        pm.CustomDist("obs", mu, logp=logp, observed=RNG.normal(size=60))
    with pytest.raises(SubsamplingModelError, match=r"'obs' couples its rows.*Sum"):
        SubsampledLikelihood(model)


def test_cumulative_sum_couples_rows():
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1)
        pm.Normal("walk", mu=pt.cumsum(b * pm.Data("x", X[:, 0])), sigma=1,
                  observed=RNG.normal(size=60))
    with pytest.raises(SubsamplingModelError, match=r"'walk' couples its rows.*Cumsum"):
        SubsampledLikelihood(model)


def test_matrix_product_over_rows_couples_rows():
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1)
        v = pm.Data("X", X)[:, 0] * b
        pm.Normal("y", mu=v + (pm.Data("Z", X).T @ v)[0], sigma=1, observed=RNG.normal(size=60))
    # the op of the terms' graph: PyMC's logp rewrites (conditional_logp, as model.logp) turn
    # the user's Matmul into a Dot
    with pytest.raises(SubsamplingModelError, match=r"'y' couples its rows.*(Matmul|Dot)"):
        SubsampledLikelihood(model)


def test_coupling_in_one_of_two_observed_variables_is_named():
    model = _coupled_models()[("sorted", "Sort")]()
    with pytest.raises(SubsamplingModelError, match=r"'sorted' couples its rows.*Sort"):
        SubsampledLikelihood(model)


def _coupled_models() -> dict:
    """Models whose likelihood couples rows, each with the op its refusal names."""
    def centred():
        with pm.Model() as model:
            b = pm.Normal("b", 0, 1, shape=2)
            eta = pm.Data("X", X) @ b
            pm.Bernoulli("y", logit_p=eta - eta.mean(), observed=Y)
        return model

    def cumsum():
        with pm.Model() as model:
            b = pm.Normal("b", 0, 1)
            pm.Normal("walk", mu=pt.cumsum(b * pm.Data("x", X[:, 0])), sigma=1,
                      observed=RNG.normal(size=60))
        return model

    def sort():
        with pm.Model() as model:
            b = pm.Normal("b", 0, 1, shape=2)
            eta = pm.Data("X", X) @ b
            pm.Bernoulli("fine", logit_p=eta, observed=Y)
            pm.Normal("sorted", mu=pt.sort(eta), sigma=1, observed=RNG.normal(size=60))
        return model

    return {("y", "Sum"): centred, ("walk", "Cumsum"): cumsum, ("sorted", "Sort"): sort}


@pytest.mark.parametrize("coupled", list(_coupled_models()))
def test_couplings_are_refused_against_the_union_of_the_check_rows(coupled, monkeypatch):
    """Above ``FULL_REFERENCE_ROWS`` rows the reference is our own terms on the union of the
    check's row sets, not the model's on all rows: the same couplings are refused, the
    reference named; a model without one passes."""
    monkeypatch.setattr(row_checks, "FULL_REFERENCE_ROWS", 10)
    name, op = coupled
    with pytest.raises(SubsamplingModelError, match=rf"'{name}' couples its rows.*rows of the "
                                                    rf"check's row sets together.*{op}"):
        SubsampledLikelihood(_coupled_models()[coupled]())
    SubsampledLikelihood(_logistic())


def test_ambiguous_row_axis_of_data():
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1, shape=2)
        K = pm.Data("K", RNG.normal(size=(2, 60, 60)))
        pm.Normal("y", mu=(b[:, None, None] * K).sum((0, 2)), sigma=1,
                  observed=RNG.normal(size=60))
    with pytest.raises(SubsamplingModelError, match=r"'K'.*'y'.*ambiguous.*first axis"):
        SubsampledLikelihood(model)


def test_observations_with_rows_on_the_second_axis():
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1, shape=2)
        pm.Normal("y", mu=b @ X.T, sigma=1, observed=RNG.normal(size=(1, 60)))
    with pytest.raises(SubsamplingModelError, match=r"'y' has shape \(1, 60\).*first axis"):
        SubsampledLikelihood(model)


def test_data_expression_with_nan():
    Xc = np.column_stack([np.ones(60), X[:, 0]])  # a constant column: std 0
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1, shape=2)
        Xd = pm.Data("X", Xc)
        pm.Bernoulli("y", logit_p=((Xd - Xd.mean(0)) / Xd.std(0)) @ b, observed=Y)
    with pytest.raises(SubsamplingModelError, match=r"data \['X'\].*'y'.*NaN.*constant column"):
        SubsampledLikelihood(model)


@pytest.mark.parametrize("cores", [1, 2])
def test_set_data_after_the_step_is_built(cores):
    """pm.set_data after building the step: refused at the chain's start, naming the data."""
    model = _logistic()
    with model:
        step = pms.BarkerMinibatch(batch_size=10)
        pm.set_data({"X": RNG.normal(size=(60, 2))})
        # with cores=2 PyMC re-raises the worker's error as a ParallelSamplingError
        with pytest.raises((SubsamplingModelError, ParallelSamplingError),
                           match=r"\['X'\] changed.*pm.set_data.*again"):
            pm.sample(5, tune=5, chains=2, cores=cores, step=step, progressbar=False,
                      compute_convergence_checks=False, random_seed=1)
        # built after set_data, the step samples
        pm.sample(5, tune=5, chains=1, step=pms.BarkerMinibatch(batch_size=10),
                  progressbar=False, compute_convergence_checks=False, random_seed=1)
