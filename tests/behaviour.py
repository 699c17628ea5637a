"""Fixed-seed draws of the three steps on three small models, for the behaviour test.

:func:`behaviour_draws` builds each model with :mod:`pymc_subsample.datasets`, samples it with
``pm.sample(step=...)`` (one chain, one core, fixed seeds) and returns the draws of every free
variable, keyed ``"<model>/<step>/<variable>"``. ``tests/make_behaviour_draws.py`` stores them
in ``tests/data/behaviour_draws.npz``; ``tests/test_behaviour_unchanged.py`` reruns it and
asserts the same numbers. Only the public API is used, so the draws speak for the package's
behaviour whatever its modules are called.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pymc as pm

import pymc_subsample as pms
from pymc_subsample.datasets import (
    glm_data,
    glm_model,
    random_effects_data,
    random_effects_model,
)

PATH = Path(__file__).parent / "data" / "behaviour_draws.npz"
TUNE, DRAWS = 100, 200


def _models():
    """(name, model): a logistic GLM, a Normal with a sampled σ (a location–scale family)
    and centred random intercepts ``u[g]``."""
    yield "logistic", glm_model(*glm_data(3000, 3, "logistic", seed=11), "logistic")
    yield "gaussian_scale", glm_model(*glm_data(3000, 3, "gaussian_scale", seed=12),
                                      "gaussian_scale")
    X, group, y = random_effects_data(3000, 2, 8, seed=13)
    yield "random_effects", random_effects_model(X, group, y, groups=8)


#: (name, step factory): MHSS with its defaults; the approximate steps with the settings the
#: draws were recorded with (their defaults then: a random walk, AusterityMH's batch of 500),
#: pinned since their defaults became pCN (issue 30), with order-2 control variates
STEPS = (
    ("MHSS", lambda: pms.MHSS(rng=101)),
    ("AusterityMH", lambda: pms.AusterityMH(cv_order=2, proposal="random_walk", batch_size=500,
                                            rng=102)),
    ("BarkerMinibatch", lambda: pms.BarkerMinibatch(cv_order=2, proposal="random_walk",
                                                    rng=103)),
)


def behaviour_draws() -> dict[str, np.ndarray]:
    """Every free variable's draws for each (model, step), keyed ``model/step/variable``."""
    out = {}
    for model_name, model in _models():
        for seed, (step_name, make_step) in enumerate(STEPS):
            with model:
                step = make_step()
                idata = pm.sample(tune=TUNE, draws=DRAWS, chains=1, cores=1, step=step,
                                  random_seed=1000 + seed, progressbar=False,
                                  compute_convergence_checks=False)
            for var in idata.posterior.data_vars:
                out[f"{model_name}/{step_name}/{var}"] = idata.posterior[var].values
    return out
