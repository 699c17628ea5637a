"""Shared fixtures; the data generators and models live in :mod:`pymc_subsample.datasets`."""

from __future__ import annotations

import logging
import warnings

import pytest

from pymc_subsample.datasets import glm_data, glm_model

logging.getLogger("pymc").setLevel(logging.ERROR)
warnings.filterwarnings("ignore", message=".*BLAS.*")


@pytest.fixture(scope="session")
def logistic_small():
    X, y = glm_data(2000, 3, "logistic", seed=1)
    return X, y, glm_model(X, y, "logistic")
