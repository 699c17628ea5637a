"""Time to a bulk ESS of 1000: NUTS (NumPyro), HMCECS and MHSS side by side over N, d and family.

One run, every method on the same data in each cell: logistic regression for every
``--rows`` × ``--dims`` (default N ∈ {1e5, 1e6, 1e7}, d ∈ {10, 50, 100}, without 1e7 × 100)
and Poisson regression (mean softplus(Xb)) at 1e6 × 10; data and PyMC model from
:func:`pymc_subsample.datasets.glm_data` and :func:`~pymc_subsample.datasets.glm_model`.
Methods per cell:

- ``NUTS (numpyro)``: ``pm.sample(nuts_sampler="numpyro")`` through
  :func:`pymc_subsample.compare.compare`, JAX compilation counted;
- ``HMCECS``: NumPyro's HMCECS with Taylor control variates at the MAP (``hmcecs.py`` here);
- ``MHSS``: ``pms.MHSS(proposal=name)`` for each name in ``--proposals``.

The headline is the whole wall time (setup + compile + tuning + draws) to a minimum bulk ESS
of 1000, ``setup_s + sampling_s · 1000 / ess_bulk``: the setup paid once, the sampling
(tuning included) scaled linearly; a ``*`` marks a run whose bulk ESS was below 1000, so that
its figure lies beyond what it ran. One chain per
method, methods one after another. ``--out DIR`` writes ``grid.md``, ``grid.csv`` and
``grid.png`` (log-log time to ESS 1000 against N, per method and d).

    python benchmarks/grid.py --out out/grid                      # the whole grid (hours)
    python benchmarks/grid.py --rows 1e5 --dims 10 --proposals random_walk \\
        --draws 5000 --nuts-draws 500
"""

from __future__ import annotations

import argparse
import gc
import logging
import math
import os
import platform
import sys
import time
import warnings
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
import pymc as pm

import pymc_subsample as pms
from pymc_subsample.compare import (
    compare,
    mcse_distance,
    numpyro_available,
    summarise_run,
)
from pymc_subsample.datasets import FAMILIES, glm_data, glm_model

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hmcecs import FAMILIES as HMCECS_FAMILIES  # noqa: E402
from hmcecs import SUBSAMPLE_SIZE, run_hmcecs  # noqa: E402

logging.getLogger("pymc").setLevel(logging.ERROR)
warnings.filterwarnings("ignore")

NUTS_NAME = "NUTS (numpyro)"
TARGET_ESS = 1000
COLUMNS = [
    "N", "d", "family", "method", "proposal", "draws", "setup_s", "sampling_s", "ess_bulk",
    "ess_per_iter", "rows_per_iter", "accept", "time_to_ess1000_s", "time_ratio_to_nuts",
    "z_vs_nuts", "full_data_passes", "full_data_fallback", "extrapolated", "note",
]
HEADERS = {
    "N": "N", "d": "d", "family": "family", "method": "method", "proposal": "proposal",
    "draws": "draws", "setup_s": "setup s", "sampling_s": "sampling s", "ess_bulk": "ESS bulk",
    "ess_per_iter": "ESS/iter", "rows_per_iter": "rows/iter", "accept": "acceptance",
    "time_to_ess1000_s": "time to ESS 1000 (s)", "time_ratio_to_nuts": "x faster than NUTS",
    "z_vs_nuts": "z vs NUTS", "full_data_passes": "setup passes",
    "full_data_fallback": "moves on all rows", "note": "note",
}


def _cells(args) -> list[tuple[str, int, int]]:
    skip = {_cell(c) for c in args.skip_cells}
    poisson = None if args.poisson_cells == ["all"] else {_cell(c) for c in args.poisson_cells}
    cells = []
    for family in args.families:
        for n in (int(r) for r in args.rows):
            for d in args.dims:
                if (n, d) in skip or (family.startswith("poisson") and poisson is not None
                                      and (n, d) not in poisson):
                    continue
                cells.append((family, n, d))
    return cells


def _cell(text: str) -> tuple[int, int]:
    n, d = text.split(":")
    return int(float(n)), int(d)


def nuts_draws_at(n: int, draws: int, minimum: int) -> int:
    """NUTS draws (and tuning steps) at ``n`` rows: ``draws`` up to 1e5 rows, then
    ``draws · 1e5 / n``, never fewer than ``minimum``."""
    return max(minimum, min(draws, round(draws * 1e5 / n)))


def _row(family, n, d, method, proposal, table_row, note="", profile=None):
    draws = table_row.get("draws", math.nan)
    chains = table_row.get("chains", 1)
    ess = table_row.get("ess_bulk", math.nan)
    setup, sampling = table_row.get("setup_s", math.nan), table_row.get("sampling_s", math.nan)
    return {
        "N": n, "d": d, "family": family, "method": method, "proposal": proposal,
        "draws": draws, "setup_s": setup, "sampling_s": sampling, "ess_bulk": ess,
        "ess_per_iter": ess / (chains * draws) if draws and draws == draws else math.nan,
        "rows_per_iter": table_row.get("rows_per_iter", math.nan),
        "accept": table_row.get("accept", math.nan),
        "time_to_ess1000_s": table_row.get("time_to_ess1000_s", math.nan),
        "time_ratio_to_nuts": math.nan,
        "z_vs_nuts": math.nan,
        "full_data_passes": (profile or {}).get("full_data_passes", math.nan),
        "full_data_fallback": math.nan,
        "extrapolated": bool(ess < TARGET_ESS) if ess == ess else False, "note": note,
    }


def _run_mhss(model, proposal, args):
    """compare() for ``partial(pms.MHSS, proposal=proposal)``.

    Returns ``((row of compare's table, idata, note, setup profile), None)``, or
    ``(None, note)`` when this
    version of MHSS has no ``proposal`` keyword and ``proposal`` is not ``"random_walk"``:
    the random walk is then run as plain ``pms.MHSS()``, its only proposal.
    """
    kwargs = {"draws": args.draws, "tune": args.tune, "chains": 1, "nuts": False,
              "random_seed": args.seed}
    try:
        result = compare(model, {"MHSS": partial(pms.MHSS, proposal=proposal)}, **kwargs)
    except TypeError as err:
        if "proposal" not in str(err):
            raise
        if proposal != "random_walk":
            return None, f"skipped: this MHSS has no proposal= keyword ({err})"
        result = compare(model, {"MHSS": pms.MHSS}, **kwargs)
        note = "plain pms.MHSS() (no proposal= keyword yet)"
    else:
        note = ""
    profile = result.setup_profiles.get("MHSS")
    return (result.table.iloc[0].to_dict(), result.idata["MHSS"], note, profile), None


def run_cell(family: str, n: int, d: int, args) -> list[dict]:
    """Every method on one (family, N, d); rows of the grid's table."""
    X, y = glm_data(n, d, family, seed=args.seed)
    model = glm_model(X, y, family)
    rows, idatas = [], {}
    label = f"{family} N={_sci(n)} d={d}"

    def say(text):
        print(f"  [{label}] {text}", flush=True)

    if "nuts" in args.methods:
        n_nuts = nuts_draws_at(n, args.nuts_draws, args.nuts_min_draws)
        if args.skip_nuts_above is not None and n > args.skip_nuts_above:
            rows.append(_row(family, n, d, NUTS_NAME, "", {},
                             note=f"skipped (N > {_sci(args.skip_nuts_above)})"))
            say(f"{NUTS_NAME}: skipped")
        elif not numpyro_available():
            rows.append(_row(family, n, d, NUTS_NAME, "", {}, note="skipped: no NumPyro"))
            say(f"{NUTS_NAME}: skipped, NumPyro is not installed")
        else:
            say(f"{NUTS_NAME}: {n_nuts} tuning steps + {n_nuts} draws ...")
            t0 = time.perf_counter()
            result = compare(model, {}, nuts_sampler="numpyro", chains=1, nuts_draws=n_nuts,
                             nuts_tune=n_nuts, random_seed=args.seed)
            table_row = result.table.iloc[0].to_dict()
            rows.append(_row(family, n, d, NUTS_NAME, "", table_row))
            idatas[NUTS_NAME] = result.idata[NUTS_NAME]
            say(f"{NUTS_NAME}: done in {time.perf_counter() - t0:.0f} s, "
                f"ESS {table_row['ess_bulk']:.0f}")
    if "hmcecs" in args.methods:
        if not numpyro_available():
            rows.append(_row(family, n, d, "HMCECS", "", {}, note="skipped: no NumPyro"))
            say("HMCECS: skipped, NumPyro is not installed")
        elif family not in HMCECS_FAMILIES:
            rows.append(_row(family, n, d, "HMCECS", "", {},
                             note="skipped: benchmarks/hmcecs.py samples b only"))
            say(f"HMCECS: skipped, {family} has a sampled scale that hmcecs.py does not model")
        else:
            say(f"HMCECS: {args.hmcecs_draws} warm-up + {args.hmcecs_draws} draws ...")
            t0 = time.perf_counter()
            table_row, idata = run_hmcecs(X, y, family, draws=args.hmcecs_draws,
                                          tune=args.hmcecs_draws, seed=args.seed)
            note = f"m = {SUBSAMPLE_SIZE}"
            if table_row["divergences"]:
                note += f", {table_row['divergences']} divergences"
            rows.append(_row(family, n, d, "HMCECS", "", table_row, note=note,
                             profile=table_row["setup_profile"]))
            idatas["HMCECS"] = idata
            say(f"HMCECS: done in {time.perf_counter() - t0:.0f} s, "
                f"ESS {table_row['ess_bulk']:.0f}")
            _clear_jax()
    if "mhss" in args.methods:
        for proposal in args.proposals:
            say(f"MHSS ({proposal}): {args.tune} tuning steps + {args.draws} draws ...")
            t0 = time.perf_counter()
            done, skipped = _run_mhss(model, proposal, args)
            if done is None:
                print(f"  note: MHSS proposal {proposal!r} {skipped}", flush=True)
                rows.append(_row(family, n, d, "MHSS", proposal, {}, note=skipped))
                continue
            table_row, idata, note, profile = done
            rows.append(_row(family, n, d, "MHSS", proposal, table_row, note=note,
                             profile=profile))
            # share of moves decided on all rows (bounds' region left, or C·M ≥ N)
            rows[-1]["full_data_fallback"] = float(
                idata.sample_stats["full_data_fallback"].mean())
            idatas[f"MHSS {proposal}"] = idata
            say(f"MHSS ({proposal}): done in {time.perf_counter() - t0:.0f} s, "
                f"ESS {table_row['ess_bulk']:.0f}")

    # ratios and agreement against NUTS in this cell
    nuts_time = next((r["time_to_ess1000_s"] for r in rows if r["method"] == NUTS_NAME),
                     math.nan)
    if NUTS_NAME in idatas:
        _, ref_means, ref_mcse = summarise_run(idatas[NUTS_NAME], ["b"], n, setup_s=0.0,
                                               sampling_s=1.0)
    for row in rows:
        row["time_ratio_to_nuts"] = nuts_time / row["time_to_ess1000_s"]
        key = row["method"] if row["method"] != "MHSS" else f"MHSS {row['proposal']}"
        if NUTS_NAME in idatas and key in idatas and key != NUTS_NAME:
            _, means, mcse = summarise_run(idatas[key], ["b"], n, setup_s=0.0, sampling_s=1.0)
            row["z_vs_nuts"] = mcse_distance(means, mcse, ref_means, ref_mcse)
    del model, X, y, idatas
    gc.collect()
    _clear_jax()
    return rows


def _sci(n: float) -> str:
    """``1e+05`` as ``1e5``."""
    mantissa, exponent = f"{n:.0e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def _clear_jax():
    if "jax" in sys.modules:
        sys.modules["jax"].clear_caches()


def _fmt(value, spec: str) -> str:
    if isinstance(value, float) and math.isnan(value):
        return "-"
    return format(value, spec)


def markdown(table: pd.DataFrame, header: str) -> str:
    """The table as Markdown, times extrapolated beyond the run marked ``*``."""
    specs = {"setup_s": ".1f", "sampling_s": ".1f", "ess_bulk": ".0f", "ess_per_iter": ".3g",
             "rows_per_iter": ".3g", "accept": ".2f", "time_to_ess1000_s": ".3g",
             "time_ratio_to_nuts": ".3g", "z_vs_nuts": ".2f", "draws": ".0f",
             "full_data_passes": ".0f", "full_data_fallback": ".2%"}
    cols = [c for c in COLUMNS if c != "extrapolated"]
    lines = [header, "", "| " + " | ".join(HEADERS[c] for c in cols) + " |",
             "|" + "|".join("---" for _ in cols) + "|"]
    for _, row in table.iterrows():
        cells = []
        for col in cols:
            value = row[col]
            if col == "N":
                text = _sci(value)
            elif col in specs:
                text = _fmt(float(value), specs[col])
                if (col.startswith("time_to_ess1000") and row["extrapolated"]
                        and text != "-"):
                    text += "*"
            else:
                text = str(value)
            cells.append(text)
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", f"Time to ESS {TARGET_ESS}: setup + sampling x {TARGET_ESS} / ESS bulk, the "
              "whole wall time with the setup paid once and the sampling (tuning included) "
              f"scaled linearly. `*`: bulk ESS below {TARGET_ESS}, so the time is "
              "extrapolated beyond the run. x faster than NUTS: NUTS's time to ESS 1000 / "
              "this one's."]
    return "\n".join(lines) + "\n"


def plot(table: pd.DataFrame, path: Path) -> None:
    """Log-log time to ESS 1000 against N: one panel per (family, d), one line per method."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    pairs = zip(table["method"], table["proposal"], strict=True)
    data = table.assign(label=[m if not p else f"{m} {p}" for m, p in pairs])
    data = data[np.isfinite(data["time_to_ess1000_s"].astype(float))]
    panels = sorted({(f, d) for f, d in zip(data["family"], data["d"], strict=True)})
    if not panels:
        return
    fig = Figure(figsize=(4.2 * len(panels), 3.8))
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    labels = sorted(data["label"].unique())
    colours = {label: f"C{i}" for i, label in enumerate(labels)}
    for ax, (family, d) in zip(axes, panels, strict=True):
        panel = data[(data["family"] == family) & (data["d"] == d)]
        for label, group in panel.groupby("label"):
            group = group.sort_values("N")
            ax.plot(group["N"], group["time_to_ess1000_s"], "o-", color=colours[label],
                    label=label)
            extra = group[group["extrapolated"]]
            ax.plot(extra["N"], extra["time_to_ess1000_s"], "o", mfc="none", ms=11,
                    color=colours[label])
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("N (rows)")
        ax.set_title(f"{family}, d = {d}")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel(f"seconds to bulk ESS {TARGET_ESS} (whole wall)")
    # one legend for every method of every panel
    handles = [Line2D([], [], color=colours[label], marker="o", label=label) for label in labels]
    axes[-1].legend(handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1.0),
                    fontsize="small")
    fig.suptitle("One chain per method; ringed points extrapolated beyond the run")
    fig.savefig(path, dpi=120, bbox_inches="tight")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=float, nargs="+", default=[1e5, 1e6, 1e7])
    parser.add_argument("--dims", type=int, nargs="+", default=[10, 50, 100])
    parser.add_argument("--families", nargs="+",
                        choices=[f for f in FAMILIES if f != "gaussian"],
                        default=["logistic", "poisson"])
    parser.add_argument("--poisson-cells", nargs="+", default=["1e6:10"],
                        help="N:d cells run for the Poisson families (among --rows x --dims), "
                             "or 'all' (default 1e6:10)")
    parser.add_argument("--skip-cells", nargs="*", default=["1e7:100"],
                        help="N:d cells not run (default 1e7:100)")
    parser.add_argument("--methods", nargs="+", choices=["nuts", "hmcecs", "mhss"],
                        default=["nuts", "hmcecs", "mhss"])
    parser.add_argument("--proposals", nargs="+", default=["pcn", "independence", "random_walk"],
                        help="MHSS proposals, each run as pms.MHSS(proposal=name)")
    parser.add_argument("--draws", type=int, default=20_000, help="MHSS draws")
    parser.add_argument("--tune", type=int, default=2_000, help="MHSS tuning steps")
    parser.add_argument("--nuts-draws", type=int, default=1000,
                        help="NUTS draws and tuning steps up to N = 1e5; above, x 1e5 / N")
    parser.add_argument("--nuts-min-draws", type=int, default=200,
                        help="fewest NUTS draws (and tuning steps) at large N")
    parser.add_argument("--hmcecs-draws", type=int, default=1000,
                        help="HMCECS draws and warm-up steps")
    parser.add_argument("--skip-nuts-above", type=float, default=None,
                        help="skip NUTS for N above this (its rows are marked)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None,
                        help="directory for grid.md, grid.csv and grid.png")
    return parser


def main(argv: list[str] | None = None) -> pd.DataFrame:
    args = _parser().parse_args(argv)
    cells = _cells(args)
    start = time.perf_counter()
    rows = []
    for i, (family, n, d) in enumerate(cells, 1):
        print(f"[cell {i}/{len(cells)}] {family} N={n:,} d={d} "
              f"({time.perf_counter() - start:.0f} s so far)", flush=True)
        rows.extend(run_cell(family, n, d, args))
    table = pd.DataFrame(rows, columns=COLUMNS)
    elapsed = time.perf_counter() - start
    header = (
        f"Time to bulk ESS {TARGET_ESS}, one chain per method, methods run one after another; "
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"PyMC {pm.__version__}. MHSS: {args.tune} + {args.draws} iterations; HMCECS: "
        f"{args.hmcecs_draws} + {args.hmcecs_draws}; NUTS: {args.nuts_draws} + "
        f"{args.nuts_draws} up to N = 1e5, fewer above (at least {args.nuts_min_draws}). "
        f"Grid wall time {elapsed:.0f} s."
    )
    text = markdown(table, header)
    print()
    print(text, flush=True)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "grid.md").write_text(text)
        table.to_csv(args.out / "grid.csv", index=False)
        plot(table, args.out / "grid.png")
        print(f"Wrote {args.out / 'grid.md'}, grid.csv and grid.png", flush=True)
    return table


if __name__ == "__main__":
    main()
