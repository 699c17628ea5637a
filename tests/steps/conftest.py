"""Fixtures shared by the step tests: one small logistic regression and a cache of steps."""

from __future__ import annotations

import pymc as pm
import pytest

from pymc_subsample.datasets import glm_data, glm_model

N_ROWS = 3000
SAMPLE = dict(progressbar=False, compute_convergence_checks=False)


@pytest.fixture(scope="module")
def logistic():
    """A 3000-row, 3-coefficient logistic regression and its MAP."""
    X, y = glm_data(N_ROWS, 3, "logistic", seed=7)
    model = glm_model(X, y, "logistic")
    with model:
        map_point = pm.find_MAP(progressbar=False)
    return model, map_point


@pytest.fixture(scope="module")
def step_cache(logistic):
    """``get(StepClass, **kwargs)``: one compiled step per configuration, shared in a module."""
    model, map_point = logistic
    cache = {}

    def get(step_class, **kwargs):
        key = (step_class, tuple(sorted(kwargs.items())))
        if key not in cache:
            with model:
                cache[key] = step_class(map_point=map_point, **kwargs)
        return cache[key]

    return get
