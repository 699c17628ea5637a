"""Behaviour unchanged: the three steps give, for fixed seeds, the draws stored in
``tests/data/behaviour_draws.npz`` (written by ``tests/make_behaviour_draws.py`` before the
package was restructured) on a logistic GLM, a Normal with a sampled σ and centred random
intercepts (:mod:`tests.behaviour`), to rounding (1e-9)."""

from __future__ import annotations

import numpy as np

from tests.behaviour import PATH, behaviour_draws


def test_draws_identical_to_stored():
    stored = np.load(PATH)
    draws = behaviour_draws()
    assert sorted(draws) == sorted(stored.files)
    for key, values in draws.items():
        # to rounding: the Hessian sums by a symmetric rank-k update (kernels/gram.py) moved
        # the random intercepts' reference point by 1e-12; a changed decision anywhere in a
        # chain would show as a difference of the order of a posterior sd
        np.testing.assert_allclose(values, stored[key], rtol=1e-9, atol=1e-9, err_msg=key)
