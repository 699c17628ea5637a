"""The sampling progress bar: whole headers at 80 columns, the knob named for what it is, and a
clock per chain when chains run one after another."""

import io
import time

import numpy as np
import pymc as pm
import pytest
from pymc.progress_bar.rich_progress import RichProgressBackend
from rich.console import Console

import pymc_subsample as pms

STEPS = [(pms.MHSS, {}, "ρ"), (pms.MHSS, {"proposal": "random_walk"}, "κ"),
         (pms.MHSS, {"proposal": "independence"}, "s"), (pms.AusterityMH, {}, "ρ"),
         (pms.BarkerMinibatch, {}, "ρ")]


@pytest.fixture(scope="module")
def model():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((300, 2))
    with pm.Model() as m:
        b = pm.Normal("b", 0, 1, shape=2)
        pm.Bernoulli("y", logit_p=pm.Data("X", x) @ b, observed=rng.random(300) < 0.5)
    return m


def _backend(step, chains=2):
    columns, stats = step._progressbar_config(chains)
    stats["draw"] = [0] * chains
    return RichProgressBackend("Draw", chains, 3000, False, True, columns, stats)


def _render(backend, width=80) -> list[str]:
    console = Console(file=io.StringIO(), width=width, color_system=None, record=True)
    progress = backend._progress
    console.print(progress.make_tasks_table(progress.tasks))
    return console.export_text().splitlines()


@pytest.mark.parametrize(("cls", "kwargs", "symbol"), STEPS)
def test_every_header_is_whole_at_80_columns(model, cls, kwargs, symbol):
    with model:
        step = cls(**kwargs)
    backend = _backend(step)
    backend._initialize_tasks()
    # a busy bar: four-digit draw counts, five-digit speeds, a fallback's rows in the average
    for draw in range(1500):
        backend.update(0, 1, False, {"draw": draw + 1, "accept_rate": 0.93, "rows": 123.4,
                                     "scaling": 0.7}, False)
    header = next(line for line in _render(backend) if "Progress" in line)
    assert "…" not in header
    titles = header.split()
    for title in ("Progress", "Draw", "Accept", "Rows", symbol, "Speed", "Elapsed", "Remaining"):
        assert title in titles, (title, header)
    assert "Scaling" not in titles


def test_a_chain_that_has_not_started_keeps_its_clock_at_zero(model):
    """With cores=1 PyMC starts every chain's bar at once and samples them in turn: chain 2's
    draws per second must not count chain 1's time."""
    with model:
        step = pms.AusterityMH()
    backend = _backend(step)
    backend._initialize_tasks()
    for draw in range(100):  # chain 1 samples for a while, the bar redrawn meanwhile
        backend.update(0, 1, False, {"draw": draw + 1}, False)
        if draw % 20 == 0:
            _render(backend)
            time.sleep(0.05)
    _render(backend)
    chain_2 = backend._progress.tasks[1]
    backend.update(1, 1, False, {"draw": 1}, False)
    assert chain_2.elapsed < 0.1
    assert backend._progress.tasks[0].elapsed > 0.2
