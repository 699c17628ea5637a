"""Behaviour unchanged: the three steps give, for fixed seeds, the very draws stored in
``tests/data/behaviour_draws.npz`` (written by ``tests/make_behaviour_draws.py`` before the
package was restructured) on a logistic GLM, a Normal with a sampled σ and centred random
intercepts (:mod:`tests.behaviour`)."""

from __future__ import annotations

import numpy as np

from tests.behaviour import PATH, behaviour_draws


def test_draws_identical_to_stored():
    stored = np.load(PATH)
    draws = behaviour_draws()
    assert sorted(draws) == sorted(stored.files)
    for key, values in draws.items():
        np.testing.assert_array_equal(values, stored[key], err_msg=key)
