"""Non-centred group effects ``s * z[g]`` run in the centred coordinates ``u = s·z``.

The twin model's log density must be the user's plus the log Jacobian ``−G log s`` of
``(log s, z) → (log s, u)`` at every point, the maps between the two must be inverse, the
forms a user writes must all be read, and products that are not this pattern must stay
refused with the observed variable named. The posterior against NUTS is in
``tests/test_random_effects.py``.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytest

import pymc_subsample as pms
from pymc_subsample.datasets import random_effects_data
from pymc_subsample.errors import SubsamplingModelError
from pymc_subsample.model.centring import centred_twin, find_non_centred_effects
from pymc_subsample.model.glm import detect_glm_terms
from pymc_subsample.model.likelihood import SubsampledLikelihood

X, GROUP, Y = random_effects_data(3_000, 3, 12, seed=2)
GROUPS = 12


def _model(form: str) -> pm.Model:
    """The random-intercept logistic regression with the group effect written as ``form``."""
    with pm.Model() as model:
        b = pm.Normal("b", 0.0, 10.0, shape=3)
        g = pm.Data("g", GROUP)
        eta = pm.Data("X", X) @ b
        if form == "two factors":
            s = pm.HalfNormal("s", 1.0)
            t = pm.Exponential("t", 2.0)
            z = pm.Normal("z", 0.0, 1.0, shape=GROUPS)
            w = pm.Normal("w", 0.0, 1.0, shape=3)
            effect = s * z[g] + t * w[g % 3]
        else:
            s = pm.HalfNormal("s", 1.0) if form != "gamma scale" else pm.Gamma("s", 2.0, 4.0)
            loc, scale = (0.5, 2.0) if form == "shifted prior" else (0.0, 1.0)
            z = pm.Normal("z", loc, scale, shape=GROUPS)
            effect = {
                "s * z[g]": lambda: s * z[g],
                "z[g] * s": lambda: z[g] * s,
                "(s * z)[g]": lambda: (s * z)[g],
                "deterministic": lambda: pm.Deterministic("a", s * z)[g],
                "shifted prior": lambda: s * z[g],
                "gamma scale": lambda: s * z[g],
                "column s * z[g][:, None]": lambda: (s * z[g][:, None])[:, 0],
            }[form]()
        pm.Bernoulli("y", logit_p=eta + effect, observed=Y)
    return model


FORMS = ["s * z[g]", "z[g] * s", "(s * z)[g]", "deterministic", "shifted prior", "gamma scale",
         "column s * z[g][:, None]", "two factors"]


def _ravel(model: pm.Model, point: dict) -> np.ndarray:
    return np.concatenate([np.ravel(point[v.name]) for v in model.value_vars])


def _unravel(model: pm.Model, theta: np.ndarray) -> dict:
    point, start = {}, 0
    for v, value in zip(model.value_vars, model.initial_point().values(), strict=True):
        size = np.size(value)
        point[v.name] = theta[start:start + size].reshape(np.shape(value))
        start += size
    return point


@pytest.mark.parametrize("form", FORMS)
def test_twin_density_is_the_users_plus_the_log_jacobian(form):
    model = _model(form)
    twin = centred_twin(model, model.value_vars)
    assert twin is not None
    assert len(twin.effects) == (2 if form == "two factors" else 1)
    assert not twin.model.deterministics
    user_logp, twin_logp = model.compile_logp(), twin.model.compile_logp()
    rng = np.random.default_rng(0)
    start = _ravel(model, model.initial_point())
    for _ in range(20):
        q = start + rng.normal(0.0, 0.7, start.size)
        theta = twin.to_twin(q)
        np.testing.assert_allclose(twin.to_user(theta), q, rtol=1e-13, atol=1e-13)
        point = _unravel(model, q)
        # |∂z/∂u| = s^(−G) per effect: log p_twin(θ) = log p_user(q) − G log s
        jacobian = sum(np.size(point[e.effect.name]) * float(point[f"{e.scale.name}_log__"])
                       for e in twin.effects)
        np.testing.assert_allclose(twin_logp(_unravel(twin.model, theta)),
                                   user_logp(point) - jacobian, rtol=1e-10)


def test_twin_shares_the_data_and_keeps_the_other_variables():
    model = _model("s * z[g]")
    twin = centred_twin(model, model.value_vars)
    assert set(twin.model.data_vars) == set(model.data_vars)
    assert twin.model["b"] is model["b"] and twin.model["s"] is model["s"]
    assert twin.model.rvs_to_values[twin.model.observed_RVs[0]] is model.rvs_to_values[
        model.observed_RVs[0]]
    assert [v.name for v in twin.model.value_vars] == ["b", "s_log__", "s*z"]


def test_a_point_of_the_user_maps_to_the_twin():
    model = _model("s * z[g]")
    twin = centred_twin(model, model.value_vars)
    point = {"b": np.ones(3), "s_log__": np.log(2.0), "z": np.arange(GROUPS, dtype=float)}
    mapped = twin.point_to_twin(point)
    np.testing.assert_allclose(mapped["s*z"], 2.0 * np.arange(GROUPS))
    assert "z" not in mapped


def _product_of_two_coefficients() -> pm.Model:
    with pm.Model() as model:
        a = pm.Normal("a", 0.0, 1.0)
        c = pm.Normal("c", 0.0, 1.0, shape=GROUPS)
        pm.Bernoulli("y", logit_p=a * c[pm.Data("g", GROUP)], observed=Y)
    return model


def _student_t_effects() -> pm.Model:
    with pm.Model() as model:
        s = pm.HalfNormal("s", 1.0)
        z = pm.StudentT("z", nu=4, mu=0.0, sigma=1.0, shape=GROUPS)
        pm.Bernoulli("y", logit_p=s * z[pm.Data("g", GROUP)], observed=Y)
    return model


def _scale_is_a_group_vector() -> pm.Model:
    with pm.Model() as model:
        s = pm.HalfNormal("s", 1.0, shape=GROUPS)
        z = pm.Normal("z", 0.0, 1.0, shape=GROUPS)
        g = pm.Data("g", GROUP)
        pm.Bernoulli("y", logit_p=s[g] * z[g], observed=Y)
    return model


def test_a_product_of_two_real_parameters_is_not_centred_but_read_as_quadratic():
    """No twin: ``a * c[g]`` with Normal priors stays a product of two parameters, which the GLM
    layer reads as a quadratic predictor (``bounds.quadratic``)."""
    model = _product_of_two_coefficients()
    assert find_non_centred_effects(model) == []
    assert centred_twin(model, model.value_vars) is None
    (term,) = detect_glm_terms(SubsampledLikelihood(model))
    assert term.curvature is not None


def _product_of_three() -> pm.Model:
    with pm.Model() as model:
        a, e = pm.Normal("a", 0.0, 1.0), pm.Normal("e", 0.0, 1.0)
        c = pm.Normal("c", 0.0, 1.0, shape=GROUPS)
        pm.Bernoulli("y", logit_p=a * e * c[pm.Data("g", GROUP)], observed=Y)
    return model


@pytest.mark.parametrize("build", [_student_t_effects, _product_of_three])
def test_other_products_are_read_by_the_automatic_bound(build):
    """Not centred and not quadratic (a positive scale is sampled as its log: ``s * z`` is
    ``e^λ z``): the automatic bound reads the row term in its predictors, ``λ`` and ``z[g]``
    (``a``, ``e`` and ``c[g]``), each affine."""
    from pymc_subsample.model.predictors import PredictorTerm

    model = build()
    assert find_non_centred_effects(model) == []
    with model:
        step = pms.MHSS(progressbar=False)
    (term,) = step._reference_pass.terms
    assert isinstance(term, PredictorTerm)
    assert term.family.n_predictors == (2 if build is _student_t_effects else 3)


def test_a_scale_per_group_is_refused_naming_the_variable():
    """``s[g] * z[g]`` with ``s`` a log-transformed vector: ``exp(λ)[g]`` indexes after the
    transform, so no predictor affine in ``θ`` has one value per row."""
    model = _scale_is_a_group_vector()
    assert find_non_centred_effects(model) == []
    with model, pytest.raises(SubsamplingModelError,
                              match=r"'y'.*other than through predictors affine in them.*"
                                    r"Subtensor.*UserBound"):
        pms.MHSS()


def test_step_takes_a_map_point_in_the_users_coordinates():
    model = _model("s * z[g]")
    with model:
        plain = pms.MHSS()
        point = {"b": plain.centring.to_user(plain.theta_hat)[:3],
                 "s_log__": plain.theta_hat[3],
                 "z": plain.centring.to_user(plain.theta_hat)[4:]}
        given = pms.MHSS(map_point=point)
    np.testing.assert_allclose(given.theta_hat, plain.theta_hat, rtol=1e-8, atol=1e-10)
    assert given.reference.full_data_passes <= plain.reference.full_data_passes


def test_chains_are_reproducible_in_parallel_and_report_the_users_variables():
    model = _model("(s * z)[g]")
    with model:
        step = pms.MHSS()
        kwargs = dict(draws=150, tune=100, chains=2, cores=2, step=step, random_seed=4,
                      progressbar=False, compute_convergence_checks=False)
        first = pm.sample(**kwargs)
        second = pm.sample(**kwargs)
    post = first.posterior
    assert set(post.data_vars) == {"b", "s", "z"}
    np.testing.assert_array_equal(post["z"].values, second.posterior["z"].values)
    # every draw is a point of the user's model: z = u / s of a finite twin state
    assert np.all(np.isfinite(post["z"].values)) and np.all(post["s"].values > 0)
    assert float(first.sample_stats["accepted"].mean()) > 0.2


@pytest.mark.parametrize("step_class", [pms.AusterityMH, pms.BarkerMinibatch])
def test_approximate_steps_sample_the_twin_too(step_class):
    model = _model("s * z[g]")
    with model:
        step = step_class()
        idata = pm.sample(100, tune=100, chains=1, step=step, random_seed=3,
                          progressbar=False, compute_convergence_checks=False)
    assert step.centring is not None
    assert np.all(np.isfinite(idata.posterior["z"].values))
