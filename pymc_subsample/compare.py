"""Run NUTS and subsampling steps on the same model and tabulate their cost and accuracy.

:func:`compare` builds every step itself, inside the model context, so that the time spent
constructing it (finding the reference point, control variates, bound constants, compiling)
is measured and reported apart from the time spent sampling. The table then puts, for every
method, the wall times, the effective sample sizes from ArviZ, ESS per second of total wall
time, the whole wall time extrapolated to a bulk ESS of 1000, R-hat, the rows of data read per
iteration, the acceptance rate, and how far each posterior mean lies from the reference run's
(NUTS by default) in Monte Carlo standard errors.

NUTS is the yardstick: NumPyro's, through ``pm.sample(nuts_sampler="numpyro")``, when NumPyro
is installed (``pip install "pymc-subsample[jax]"``), PyMC's own otherwise. The table's method
name says which one ran: ``"NUTS (numpyro)"`` or ``"NUTS (pymc)"``.

Examples
--------
.. code-block:: python

    from functools import partial

    import pymc_subsample as pms
    from pymc_subsample.compare import compare

    result = compare(
        model,
        {"MHSS-1": partial(pms.MHSS, cv_order=1), "MHSS-2": partial(pms.MHSS, cv_order=2)},
        draws=2000, tune=1000, chains=2, nuts_draws=500, figure="forest.png",
    )
    print(result)          # the formatted table
    result.table           # a pandas DataFrame, one row per method
    result.table["time_to_ess1000_s"]   # whole wall time to a bulk ESS of 1000 (extrapolated)
"""

from __future__ import annotations

import importlib.util
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import arviz as az
import numpy as np
import pandas as pd
import pymc as pm
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from pymc.step_methods.compound import BlockedStep, CompoundStep
from threadpoolctl import threadpool_limits

__all__ = [
    "COLUMNS",
    "NUTS_SAMPLERS",
    "Comparison",
    "compare",
    "mcse_distance",
    "numpyro_available",
    "nuts_method_name",
    "resolve_nuts_sampler",
    "run_numpyro_nuts",
    "summarise_run",
    "time_to_ess",
]

#: Values of :func:`compare`'s ``nuts_sampler``.
NUTS_SAMPLERS = ("auto", "numpyro", "pymc")

#: Bulk ESS that the ``time_to_ess1000_s`` column extrapolates to.
TARGET_ESS = 1000

#: Columns of :attr:`Comparison.table`, in order (see :func:`compare` for their meaning).
COLUMNS = (
    "method",
    "chains",
    "tune",
    "draws",
    "setup_s",
    "sampling_s",
    "ess_bulk",
    "ess_tail",
    "ess_bulk_per_s",
    "time_to_ess1000_s",
    "r_hat",
    "rows_per_iter",
    "accept",
    "z_vs_ref",
)

StepSpec = Callable[[], Any] | BlockedStep | CompoundStep | Sequence[BlockedStep]

_FORMATS = {
    "setup_s": "{:.1f}",
    "sampling_s": "{:.1f}",
    "ess_bulk": "{:.0f}",
    "ess_tail": "{:.0f}",
    "ess_bulk_per_s": "{:.3g}",
    "time_to_ess1000_s": "{:.3g}",
    "r_hat": "{:.3f}",
    "rows_per_iter": "{:.3g}",
    "accept": "{:.2f}",
    "z_vs_ref": "{:.2f}",
}


@dataclass
class Comparison:
    """What :func:`compare` returns.

    Attributes
    ----------
    table : pandas.DataFrame
        One row per method, columns :data:`COLUMNS`.
    idata : dict of str to arviz.InferenceData
        Each method's run (``posterior`` and ``sample_stats`` groups only), in table order.
    reference : str or None
        The method whose posterior means the ``z_vs_ref`` column measures against.
    nuts_sampler : {"numpyro", "pymc"} or None
        Which NUTS ran (None when NUTS was not run); its method name is
        :func:`nuts_method_name` of it.
    n_rows : int
        ``N``, the rows of data in the model (used for NUTS's ``rows_per_iter``).
    var_names : list of str
        The variables summarised and plotted.
    figure : pathlib.Path or None
        Where the forest plot was saved, if it was.
    setup_profiles : dict of str to dict
        For each method whose step has a ``setup_profile`` attribute (a dict of named setup
        phases in seconds and the int ``full_data_passes``), a copy of it, by method name.
    """

    table: pd.DataFrame
    idata: dict[str, az.InferenceData]
    reference: str | None
    n_rows: int
    var_names: list[str]
    figure: Path | None = field(default=None)
    nuts_sampler: str | None = field(default=None)
    setup_profiles: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_string(self) -> str:
        """The table with rounded numbers, for printing."""
        formatters = {col: fmt.format for col, fmt in _FORMATS.items()}
        return self.table.to_string(index=False, formatters=formatters, na_rep="-")

    def __str__(self) -> str:
        return self.to_string()

    def plot(
        self,
        path: str | os.PathLike,
        *,
        standardize: bool | None = None,
        hdi_prob: float = 0.94,
        dpi: int = 120,
    ) -> Path:
        """Save one ArviZ forest plot of every method's posterior (mean and HDI) to ``path``.

        With ``standardize`` (the default when there is a reference run) every coordinate is
        shown as ``(value − mean_ref) / sd_ref``, so that differences between methods are
        visible at the scale of the posterior's own width even when the coefficients' values
        differ by far more than that. Drawn on a Matplotlib Agg canvas: no display is needed,
        and neither the global backend nor ``pyplot``'s figures are touched.
        """
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        if standardize is None:
            standardize = self.reference is not None
        if standardize and self.reference is None:
            raise ValueError("standardize=True needs a reference run")
        transform, xlabel = None, "value"
        if standardize:
            ref = self.idata[self.reference].posterior[self.var_names]
            mean, sd = ref.mean(("chain", "draw")), ref.std(("chain", "draw"))

            def transform(dataset):
                return (dataset[self.var_names] - mean) / sd

            xlabel = f"(value − {self.reference} posterior mean) / {self.reference} posterior sd"
        posterior = self.idata[next(iter(self.idata))].posterior
        n_coords = sum(int(np.prod(posterior[v].shape[2:], dtype=int)) for v in self.var_names)
        height = 1.5 + 0.22 * n_coords * len(self.idata)
        fig = Figure(figsize=(7.0, min(max(height, 3.0), 40.0)))
        FigureCanvasAgg(fig)
        ax = fig.add_subplot()
        az.plot_forest(
            list(self.idata.values()),
            model_names=list(self.idata),
            var_names=self.var_names,
            transform=transform,
            combined=True,
            hdi_prob=hdi_prob,
            ax=ax,
        )
        ax.set_title(f"Posterior means and {hdi_prob:.0%} HDIs by method")
        legend = ax.get_legend()
        if legend is not None:  # beside the plot, where it hides no interval
            labels = [text.get_text() for text in legend.get_texts()]
            ax.legend(legend.legend_handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        ax.set_xlabel(xlabel)
        fig.savefig(path, dpi=dpi, bbox_inches="tight")
        self.figure = path
        return path


def numpyro_available() -> bool:
    """Whether NumPyro and JAX can be imported (checked without importing them)."""
    return all(importlib.util.find_spec(name) is not None for name in ("numpyro", "jax"))


def resolve_nuts_sampler(nuts_sampler: str = "auto") -> str:
    """``"numpyro"`` or ``"pymc"``: the NUTS that ``nuts_sampler`` asks for.

    ``"auto"`` is NumPyro when it is installed, else PyMC's NUTS; ``"numpyro"`` without NumPyro
    raises an ``ImportError`` that says how to install it.
    """
    if nuts_sampler not in NUTS_SAMPLERS:
        raise ValueError(f"nuts_sampler must be one of {NUTS_SAMPLERS}; got {nuts_sampler!r}")
    if nuts_sampler == "auto":
        return "numpyro" if numpyro_available() else "pymc"
    if nuts_sampler == "numpyro" and not numpyro_available():
        raise ImportError(
            'nuts_sampler="numpyro" needs NumPyro and JAX: pip install "pymc-subsample[jax]"'
        )
    return nuts_sampler


def nuts_method_name(sampler: str) -> str:
    """The table's name for the NUTS run: ``"NUTS (numpyro)"`` or ``"NUTS (pymc)"``."""
    return f"NUTS ({sampler})"


def time_to_ess(setup_s: float, sampling_s: float, ess_bulk: float,
                target: float = TARGET_ESS) -> float:
    """``setup_s + sampling_s · target / ess_bulk``: the ``time_to_ess1000_s`` column.

    The whole wall time to a bulk ESS of ``target``: the setup is paid once, the sampling time
    (tuning included) is scaled linearly to the target ESS. NaN when the setup was not timed
    or the ESS is not positive.
    """
    if not (math.isfinite(setup_s + sampling_s) and ess_bulk > 0):
        return math.nan
    return setup_s + sampling_s * target / ess_bulk


def _is_built(spec: Any) -> bool:
    if isinstance(spec, BlockedStep | CompoundStep):
        return True
    return isinstance(spec, list | tuple) and all(isinstance(s, BlockedStep) for s in spec)


def _n_rows(model: pm.Model) -> int:
    """Length of the observed data's first axis (the largest, if observed variables differ)."""
    lengths = [
        int(model.rvs_to_values[rv].shape[0].eval())
        for rv in model.observed_RVs
        if model.rvs_to_values[rv].ndim > 0
    ]
    return max(lengths, default=0)


def _flat(dataset, var_names: Sequence[str]) -> np.ndarray:
    return np.concatenate([np.ravel(dataset[v].values) for v in var_names])


def summarise_run(
    idata: az.InferenceData,
    var_names: Sequence[str],
    n_rows: int,
    *,
    setup_s: float,
    sampling_s: float,
) -> tuple[dict[str, float], np.ndarray, np.ndarray]:
    """One table row (without ``method`` and ``z_vs_ref``), posterior means and MCSEs.

    ESS (bulk and tail) is the minimum and R-hat the maximum over every coordinate of
    ``var_names``. ``rows_per_iter`` is the mean of the ``n_data`` stat when the step records
    it, ``N ×`` the mean of ``n_steps`` for HMC/NUTS (each leapfrog step evaluates the gradient
    on all rows), NaN otherwise. ``accept`` is the mean of ``accepted`` (Metropolis-type steps)
    or of ``acceptance_rate`` (NUTS's mean acceptance probability of the trajectory).
    ``time_to_ess1000_s`` is :func:`time_to_ess` of the run.
    """
    names = list(var_names)
    post = idata.posterior
    stats = idata.sample_stats
    ess_bulk = float(_flat(az.ess(idata, var_names=names, method="bulk"), names).min())
    ess_tail = float(_flat(az.ess(idata, var_names=names, method="tail"), names).min())
    multi_chain = post.sizes["chain"] > 1
    r_hat = float(_flat(az.rhat(idata, var_names=names), names).max()) if multi_chain else math.nan
    mcse = _flat(az.mcse(idata, var_names=names), names)
    means = _flat(post[names].mean(("chain", "draw")), names)
    if "n_data" in stats:
        rows = float(stats["n_data"].mean())
    elif "n_steps" in stats:
        rows = float(stats["n_steps"].mean()) * n_rows
    else:
        rows = math.nan
    if "accepted" in stats:
        accept = float(stats["accepted"].mean())
    elif "acceptance_rate" in stats:
        accept = float(stats["acceptance_rate"].mean())
    else:
        accept = math.nan
    row = {
        "chains": int(post.sizes["chain"]),
        "draws": int(post.sizes["draw"]),
        "setup_s": setup_s,
        "sampling_s": sampling_s,
        "ess_bulk": ess_bulk,
        "ess_tail": ess_tail,
        "ess_bulk_per_s": ess_bulk / (setup_s + sampling_s),
        "time_to_ess1000_s": time_to_ess(setup_s, sampling_s, ess_bulk),
        "r_hat": r_hat,
        "rows_per_iter": rows,
        "accept": accept,
    }
    return row, means, mcse


def mcse_distance(
    means: np.ndarray, mcse: np.ndarray, ref_means: np.ndarray, ref_mcse: np.ndarray
) -> float:
    """``max_k |mean_k − ref_k| / sqrt(mcse_k² + ref_mcse_k²)``: the ``z_vs_ref`` column.

    Two runs that target the same posterior give roughly standard-normal terms, so the
    maximum over ``d`` coordinates is rarely above 3–4; it grows with the run length if one of
    them is biased.
    """
    z = np.abs(np.asarray(means) - ref_means) / np.sqrt(np.square(mcse) + np.square(ref_mcse))
    return float(np.max(z))


def _sample(model, step, draws, tune, chains, random_seed, sample_kwargs, **extra):
    kwargs = {
        "cores": 1,
        "progressbar": False,
        "compute_convergence_checks": False,
        **sample_kwargs,
        **extra,
    }
    t0 = time.perf_counter()
    with model:
        idata = pm.sample(
            draws, tune=tune, chains=chains, step=step, random_seed=random_seed, **kwargs
        )
    seconds = time.perf_counter() - t0
    return az.InferenceData(posterior=idata.posterior, sample_stats=idata.sample_stats), seconds


def _run_nuts(model, draws, tune, chains, random_seed, sample_kwargs):
    """PyMC's NUTS as ``pm.sample`` builds it by default; setup is ``pm.init_nuts``."""
    t0 = time.perf_counter()
    initial_points, step = pm.init_nuts(
        chains=chains, model=model, random_seed=random_seed, progressbar=False, tune=tune
    )
    setup = time.perf_counter() - t0
    idata, seconds = _sample(
        model, step, draws, tune, chains, random_seed, sample_kwargs, initvals=initial_points
    )
    return setup, seconds, idata


def run_numpyro_nuts(model: pm.Model, draws: int, tune: int, chains: int, random_seed: Any,
                     sample_kwargs: Mapping[str, Any]) -> tuple[float, float, az.InferenceData]:
    """``(setup_s, sampling_s, idata)`` of NumPyro's NUTS through ``pm.sample``, chains in turn.

    ``sampling_s`` is NumPyro's ``MCMC.run`` (PyMC's ``sampling_time``, JAX's compilation of
    the sampler included), ``setup_s`` the rest of ``pm.sample``'s wall time (the model made a
    JAX function, starting points, draws turned back into the model's variables).
    """
    kwargs = {"progressbar": False, "compute_convergence_checks": False, **sample_kwargs}
    kwargs.pop("cores", None)  # NumPyro runs the chains itself
    kwargs["nuts_sampler_kwargs"] = {
        "chain_method": "sequential",
        **dict(kwargs.get("nuts_sampler_kwargs") or {}),
    }
    t0 = time.perf_counter()
    with model:
        idata = pm.sample(
            draws, tune=tune, chains=chains, random_seed=random_seed, nuts_sampler="numpyro",
            **kwargs,
        )
    total = time.perf_counter() - t0
    seconds = float(idata.posterior.attrs.get("sampling_time", total))
    idata = az.InferenceData(posterior=idata.posterior, sample_stats=idata.sample_stats)
    return total - seconds, seconds, idata


def _setup_profile(step: Any) -> dict[str, Any] | None:
    """A copy of the step's ``setup_profile`` (or of the one sub-step that has one), if any."""
    profile = getattr(step, "setup_profile", None)
    if isinstance(profile, Mapping):
        return dict(profile)
    parts = step.methods if isinstance(step, CompoundStep) else step
    if isinstance(parts, list | tuple):
        found = [dict(p.setup_profile) for p in parts
                 if isinstance(getattr(p, "setup_profile", None), Mapping)]
        if len(found) == 1:
            return found[0]
    return None


def _run_step(model, spec, draws, tune, chains, random_seed, sample_kwargs):
    """Build ``spec`` in the model context (timed) unless it is built already, and sample."""
    if _is_built(spec):
        step, setup = spec, math.nan
    else:
        t0 = time.perf_counter()
        with model:
            step = spec()
        setup = time.perf_counter() - t0
    idata, seconds = _sample(model, step, draws, tune, chains, random_seed, sample_kwargs)
    return setup, seconds, idata, _setup_profile(step)


def compare(
    model: pm.Model | None = None,
    steps: Mapping[str, StepSpec] | None = None,
    *,
    draws: int = 2000,
    tune: int = 1000,
    chains: int = 2,
    nuts: bool = True,
    nuts_sampler: str = "auto",
    nuts_draws: int | None = None,
    nuts_tune: int | None = None,
    reference: str | None = None,
    var_names: Sequence[str] | None = None,
    random_seed: int | None = None,
    figure: str | os.PathLike | None = None,
    sample_kwargs: Mapping[str, Any] | None = None,
    blas_threads: int | None = 1,
) -> Comparison:
    """Sample one model with NUTS and with the given steps; tabulate cost and agreement.

    The headline column is ``time_to_ess1000_s``: the whole wall time of a method (building
    its step, compiling, tuning and drawing) linearly extrapolated to a minimum bulk ESS of
    1000, ``setup_s + sampling_s · 1000 / ess_bulk``: the setup is paid once, the sampling
    (tuning included) is scaled linearly. It is an extrapolation, not a measurement, whenever
    the run's bulk ESS is not 1000.

    Parameters
    ----------
    model : pymc.Model, optional
        The model (default: the one in context).
    steps : mapping of str to step spec
        Method name → how to build its step: a zero-argument callable such as a step class
        (``pms.MHSS``) or ``functools.partial(pms.MHSS, cv_order=1)``, called inside the model
        context and timed as the setup; or an already-built step (or list of steps), used as
        is with ``setup_s`` NaN, since its construction was not seen here.
    draws, tune, chains : int
        Passed to ``pm.sample`` for every step in ``steps``.
    nuts : bool
        Also run NUTS, as the method named ``"NUTS (numpyro)"`` or ``"NUTS (pymc)"`` (see
        ``nuts_sampler``). Its tuning counts as sampling time, as for the others.
    nuts_sampler : {"auto", "numpyro", "pymc"}
        Which NUTS: ``"numpyro"`` is ``pm.sample(nuts_sampler="numpyro")``, often 5–10×
        faster than PyMC's own, with the chains run one after another (NumPyro's
        ``chain_method="sequential"``); its ``sampling_s`` is NumPyro's ``MCMC.run``, JAX's
        compilation of the sampler included, and its ``setup_s`` the rest of ``pm.sample``
        (the model turned into JAX, the starting points, the draws transformed back).
        ``"pymc"`` is ``pm.sample``'s default NUTS (``init="auto"``), whose ``setup_s`` is
        ``pm.init_nuts`` (the step and the jittered starting points). ``"auto"`` (default):
        NumPyro when it is installed (``pip install "pymc-subsample[jax]"``), PyMC otherwise.
    nuts_draws, nuts_tune : int, optional
        Draws and tuning steps per chain for NUTS (default ``draws`` and ``tune``): NUTS reads
        every row at every gradient, so on tall data it is often run shorter. The table shows
        the draws each method used.
    reference : str, optional
        The method the ``z_vs_ref`` column measures from: the NUTS run by default when
        ``nuts`` (``"NUTS"`` also names it), else none (the column is NaN).
    var_names : list of str, optional
        Variables to summarise and plot (default: the model's free random variables).
    random_seed : int, optional
        Passed to ``pm.sample`` (and ``pm.init_nuts``) for every method.
    figure : path, optional
        Save the forest plot of all methods there (see :meth:`Comparison.plot`).
    sample_kwargs : mapping, optional
        Extra ``pm.sample`` arguments for every method. The defaults are ``cores=1``
        (chains one after another, so that methods do not compete for the CPUs while being
        timed), ``progressbar=False`` and ``compute_convergence_checks=False``.
    blas_threads : int or None
        Threads BLAS may use while steps are built and sampled (through ``threadpoolctl``).
        The default 1 gives every method one core, as ``pm.sample``'s ``blas_cores="auto"``
        intends with ``cores=1``; on a busy machine extra BLAS threads can make NUTS's
        full-data matrix products ten times slower. ``None`` leaves the setting alone.

    Returns
    -------
    Comparison
        ``.table`` is a DataFrame with one row per method (NUTS first) and the columns

        - ``method``, ``chains``, ``tune``, ``draws``: what was run (draws per chain);
        - ``setup_s``: seconds to build the step (MAP, control variates, bounds, compiling;
          for NUTS see ``nuts_sampler``);
        - ``sampling_s``: seconds in ``pm.sample`` (tuning and draws);
        - ``ess_bulk``, ``ess_tail``: ArviZ ESS, minimum over all coordinates;
        - ``ess_bulk_per_s``: ``ess_bulk / (setup_s + sampling_s)``;
        - ``time_to_ess1000_s``: ``setup_s + sampling_s · 1000 / ess_bulk``, the whole wall
          time to a bulk ESS of 1000, setup counted once and sampling scaled linearly (NaN
          when setup was not timed);
        - ``r_hat``: ArviZ rank-normalised R-hat, maximum over coordinates;
        - ``rows_per_iter``: rows whose likelihood was evaluated per iteration, the mean of
          the step's ``n_data`` stat; for NUTS ``N ×`` mean leapfrog steps (each gradient
          reads every row);
        - ``accept``: acceptance rate (NUTS: mean acceptance probability);
        - ``z_vs_ref``: ``max |mean − mean_ref| / sqrt(mcse² + mcse_ref²)`` over coordinates,
          the distance of each posterior mean from the reference run's in Monte Carlo standard
          errors. Values up to about 3–4 are what chance gives with ``d`` coordinates; larger
          ones point to bias in one of the two runs, or to runs too short to judge.

    Notes
    -----
    Chains run sequentially by default and every method samples the same model, with the
    same per-chain seeds. PyTensor caches compiled code on disk, so the first run on a fresh
    machine spends longer in ``setup_s`` than later ones; JAX compiles NumPyro's sampler anew
    in every process, and that time is counted. ``blas_threads`` does not reach JAX, whose CPU
    backend may use several threads for NumPyro's full-data products.

    :attr:`Comparison.setup_profiles` keeps, by method name, a copy of the
    ``setup_profile`` of each step built here that has one.
    """
    model = pm.modelcontext(model)
    steps = dict(steps or {})
    if not steps and not nuts:
        raise ValueError("Nothing to compare: pass some steps, or nuts=True.")
    sampler = resolve_nuts_sampler(nuts_sampler) if nuts else None
    nuts_name = nuts_method_name(sampler) if nuts else None
    if nuts:
        clash = sorted({"NUTS", nuts_name} & set(steps))
        if clash:
            raise ValueError(
                f"The name {clash[0]!r} is used by the built-in NUTS run; rename your entry or "
                "pass nuts=False."
            )
    for name, spec in steps.items():
        if not (_is_built(spec) or callable(spec)):
            raise TypeError(
                f"steps[{name!r}] must be a zero-argument callable (a step class or a "
                f"functools.partial) or a built step; got {type(spec).__name__}"
            )
    if nuts and reference in (None, "NUTS"):
        reference = nuts_name
    if reference is not None and reference not in steps and reference != nuts_name:
        raise ValueError(f"reference {reference!r} is not one of the methods compared")
    if var_names is None:
        var_names = [rv.name for rv in model.free_RVs]
    var_names = list(var_names)
    sample_kwargs = dict(sample_kwargs or {})
    n_rows = _n_rows(model)

    runs = {}  # name -> (tune, setup seconds, sampling seconds, idata)
    profiles = {}
    limit = threadpool_limits(limits=blas_threads) if blas_threads is not None else nullcontext()
    with limit:
        if nuts:
            n_tune = tune if nuts_tune is None else nuts_tune
            n_draws = draws if nuts_draws is None else nuts_draws
            run_nuts = run_numpyro_nuts if sampler == "numpyro" else _run_nuts
            runs[nuts_name] = (
                n_tune, *run_nuts(model, n_draws, n_tune, chains, random_seed, sample_kwargs)
            )
        for name, spec in steps.items():
            *run, profile = _run_step(
                model, spec, draws, tune, chains, random_seed, sample_kwargs
            )
            runs[name] = (tune, *run)
            if profile is not None:
                profiles[name] = profile

    rows, summaries = [], {}
    for name, (n_tune, setup, seconds, idata) in runs.items():
        row, means, mcse = summarise_run(
            idata, var_names, n_rows, setup_s=setup, sampling_s=seconds
        )
        rows.append({"method": name, "tune": n_tune, **row})
        summaries[name] = (means, mcse)
    if reference is not None:
        ref_means, ref_mcse = summaries[reference]
        for row in rows:
            if row["method"] == reference:
                row["z_vs_ref"] = math.nan
                continue
            row["z_vs_ref"] = mcse_distance(*summaries[row["method"]], ref_means, ref_mcse)
    table = pd.DataFrame(rows).reindex(columns=list(COLUMNS))
    result = Comparison(
        table=table,
        idata={name: run[3] for name, run in runs.items()},
        reference=reference,
        n_rows=n_rows,
        var_names=var_names,
        nuts_sampler=sampler,
        setup_profiles=profiles,
    )
    if figure is not None:
        result.plot(figure)
    return result
