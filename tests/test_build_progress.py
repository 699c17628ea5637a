"""What a step shows while it is built (issue 29): its phases, a bar over the rows of a long pass,
one summary line, and nothing with progressbar=False."""

import io

import numpy as np
import pymc as pm
import pytest

import pymc_subsample as pms
from pymc_subsample.model import build_progress
from pymc_subsample.model.build_progress import BuildProgress, build_phase, rows_advance


@pytest.fixture(scope="module")
def model():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2000, 3))
    with pm.Model() as m:
        b = pm.Normal("b", 0, 1, shape=3)
        pm.Bernoulli("y", logit_p=pm.Data("X", x) @ b, observed=rng.random(2000) < 0.5)
    return m


def test_a_step_names_its_phases_in_one_line(model, capsys):
    with model:
        pms.MHSS()
    err = capsys.readouterr().err
    [line] = [s for s in err.splitlines() if "built in" in s]
    assert line.startswith("MHSS built in ")
    for phase in ("reading the model", "reference point", "passes over 2,000 rows"):
        assert phase in line, line


def test_progressbar_false_shows_nothing(model, capsys):
    with model:
        pms.AusterityMH(progressbar=False)
    assert "built in" not in capsys.readouterr().err


def test_a_long_pass_gets_a_bar_over_its_rows(monkeypatch):
    monkeypatch.setattr(build_progress, "SHOW_PASS_AFTER_S", 0.0)
    with BuildProgress("MHSS", file=io.StringIO()) as shown:
        with build_phase("reference point"):
            advance = rows_advance(1000)
            advance(400)
            [bar] = [t for t in shown._progress.tasks if t.total == 1000]
            assert bar.visible and bar.completed == 400
            advance(600)  # the pass is over: its bar goes
            assert not [t for t in shown._progress.tasks if t.total == 1000]
    assert set(shown.seconds) == {"reference point"}
    # outside a build the hooks do nothing
    rows_advance(10)(10)
