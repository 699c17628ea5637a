"""Where the level moves' rows come from, and the fewest rows any bound could read (issue 27).

Builds MHSS on the centred logistic random-intercept model of ``benchmarks/many_levels.py``
(``--case N:G``, or ``N:G:G2`` for crossed intercepts), runs one chain, and at every
``--every``-th iteration after tuning takes two pairs ``(θ, θ')`` at the chain's state:

- *the level sweep*: every level of the first factor proposed as the step proposes it (an
  independence draw from its conditional Gaussian given ``θ_F``; also pCN with
  ``ρ_L = 0.5, 0.8``, for the expected rows only);
- *the fixed block*: the step's own proposal of that iteration.

For each pair it computes on all ``N`` rows, with the logistic formulas (NumPy, no sampling):

- ``Λ``: the level bound's expected rows, as the step computes them (``expected``; with
  ``--level-cv-order 3`` or ``4`` the bound of that order);
- ``Σ|ξ|``: the order-2 remainders' absolute sum. Any rates ``B_i ≥ |ξ_i|`` expect at least
  this many rows, so it is the floor of **every** exact bound with order-2 control variates;
- the same floors with third-order control variates: the level's own cubic only
  (``Σ_{i∈k} f‴_i t_i³``), with the level's cross term (``V_k``: the two sums the step already
  keeps), with all cubic terms, and with all quartic terms too (order 4);
- per-row bounds with each row's exact ``|a_i|, |a'_i|`` (order 2: ``L₂|h|(a²+|aa'|+a'²)/6``,
  order 3: ``L₃|h|(|a|+|a'|)(a²+a'²)/24``, order 4: ``L₄|h|Σ_j|a|^j|a'|^{4−j}/120``,
  ``L₂ = √3/18``, ``L₃ = 1/8``, ``L₄ = 0.1277``): what the level bound would read if its
  Cauchy–Schwarz on the fixed block were exact;
- (one factor only) the level bound's own form at orders 3 and 4, and at orders 2 and 4 with
  ``‖φ_D‖`` put at 0 (not a bound: the share of ``Λ`` due to the fixed block's displacement),
  and with ``L₂`` the supremum of ``|f‴|`` over each level's rows' boxes
  ``η̂_i ± max(A_i, A'_i)``.

    python benchmarks/level_rows_split.py --case 1e6:10000 --tune 300 --draws 100 --every 10
    python benchmarks/level_rows_split.py --case 1e5:1000 --tune 300 --draws 100 --every 10
    python benchmarks/level_rows_split.py --case 1e6:1000:100 --tune 300 --draws 100
    python benchmarks/level_rows_split.py --case 1e6:10000 --level-cv-order 3   # or 4

The chain is the step's (seed 1); the measurement wraps the step's level sweep and fixed-block
proposal on the instance (draws of its own generator for the level pairs, so the chain is not
changed by them).
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import time
import warnings

import numpy as np
import pymc as pm

# the sibling script's crossed data (run from the repository: benchmarks/ is on sys.path)
from many_levels import crossed_data

import pymc_subsample as pms
from pymc_subsample.bounds import CrossedBound, LevelBound
from pymc_subsample.bounds.levels import LEVEL_WEIGHT, ORDER_FACTOR
from pymc_subsample.datasets import random_effects_data, random_effects_model

logging.getLogger("pymc").setLevel(logging.ERROR)
warnings.filterwarnings("ignore")

#: sup |f‴| and sup |f⁗| of the logistic log-likelihood (at |η| = 1.317 and η = 0)
L2, L3 = math.sqrt(3.0) / 18.0, 1.0 / 8.0
#: L₄ ≥ sup |f^(5)| (pymc_subsample.model.level_quartic.LOGIT_FIFTH_SUP)
L4 = 0.1277
#: where |f‴| of the logistic peaks: log(2 + √3)
F3_PEAK = math.log(2.0 + math.sqrt(3.0))


def abs_f3_sup(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``sup |f‴|`` of the logistic on ``[lo, hi]``: monotone between 0 and ``±F3_PEAK``."""

    def value(eta):
        s = 1.0 / (1.0 + np.exp(-eta))
        return s * (1.0 - s) * np.abs(1.0 - 2.0 * s)

    inside = ((lo <= F3_PEAK) & (hi >= F3_PEAK)) | ((lo <= -F3_PEAK) & (hi >= -F3_PEAK))
    return np.where(inside, L2, np.maximum(value(lo), value(hi)))


def _power_sum(a: np.ndarray, b: np.ndarray, k: int) -> np.ndarray:
    """``Σ_{j=0}^{k} a^j b^{k−j}``."""
    return sum(a**j * b ** (k - j) for j in range(k + 1))


class Split:
    """The per-pair measurements (module docstring) for one built step and its data."""

    def __init__(self, step, X, y, groups: list[np.ndarray]) -> None:
        self.step, self.X, self.y, self.groups = step, X, y, groups
        self.lik, self.frame = step.likelihood, step.frame
        self.moves = step.level_moves
        if self.moves is None:
            raise SystemExit("MHSS moves this model's parameters jointly (no level moves at "
                             "this size): nothing to split; try more levels or rows")
        self.bound = self.moves.bound
        self.g = self.moves.n_levels
        self.eta_hat = self.eta(self.frame.theta_hat)
        s = 1.0 / (1.0 + np.exp(-self.eta_hat))
        p = s * (1.0 - s)
        # f = yη − log(1 + e^η) and its derivatives at η̂
        self.f1, self.f2, self.f3 = y - s, -p, -p * (1.0 - 2.0 * s)
        self.f4 = -p * (1.0 - 6.0 * p)
        if isinstance(self.bound, LevelBound):
            # the level bound's S_i, s_i, t_i from its stored c̄_i = κ₂ L₂ S_i³ and ρ_i
            w = self.bound.sampler.weights.astype(np.float64)
            rho = self.bound.share.astype(np.float64)
            big = np.cbrt(w / (ORDER_FACTOR[2] * L2))
            self.s = rho * big / self.bound.dense_weight
            self.t = (1.0 - rho) * big / LEVEL_WEIGHT

    def eta(self, theta: np.ndarray) -> np.ndarray:
        point = self.lik.unravel(theta)
        out = self.X @ point["b"] + point["u"][self.groups[0]]
        if len(self.groups) > 1:
            out = out + point["v"][self.groups[1]]
        return out

    def _f(self, eta: np.ndarray) -> np.ndarray:
        return self.y * eta - np.logaddexp(0.0, eta)

    def measure(self, theta, theta_new, phi, phi_new, level_move: bool) -> dict[str, float]:
        a, a2 = self.eta(theta) - self.eta_hat, self.eta(theta_new) - self.eta_hat
        h = a2 - a
        xi2 = (self._f(self.eta_hat + a2) - self._f(self.eta_hat + a)
               - (self.f1 * h + 0.5 * self.f2 * (a2**2 - a**2)))
        xi3 = xi2 - self.f3 / 6.0 * (a2**3 - a**3)
        xi4 = xi3 - self.f4 / 24.0 * (a2**4 - a**4)
        out = {"floor2": np.abs(xi2).sum(), "floor3": np.abs(xi3).sum(),
               "floor4": np.abs(xi4).sum()}
        if level_move:  # the level's part l = a − e (e the fixed block's, held by the move)
            e = self.eta(np.where(self._level_mask, self.frame.theta_hat, theta)) - self.eta_hat
            lv, lv2 = a - e, a2 - e
            own = xi2 - self.f3 / 6.0 * (lv2**3 - lv**3)
            out["floor3_Tk"] = np.abs(own).sum()
            out["floor3_TkVk"] = np.abs(own - self.f3 / 2.0 * (lv2**2 - lv**2) * e).sum()
        aa, aa2, hh = np.abs(a), np.abs(a2), np.abs(h)
        out["exact_a2"] = (L2 / 6.0 * hh * (aa**2 + aa * aa2 + aa2**2)).sum()
        out["exact_a3"] = (L3 / 24.0 * hh * (aa + aa2) * (aa**2 + aa2**2)).sum()
        out["exact_a4"] = (L4 / 120.0 * hh * _power_sum(aa, aa2, 4)).sum()
        if isinstance(self.bound, LevelBound):
            out.update(self._level_form(phi, phi_new, level_move))
        elif isinstance(self.bound, CrossedBound):
            out.update(self._crossed_form(phi, phi_new))
        return out

    def _crossed_form(self, psi, psi_new) -> dict[str, float]:
        """The crossed bound's ``Λ = Σ_i B_i`` on all rows (its candidates' mean is the
        step's ``expected``), and ``Λ`` with each part of the linear factors put at 0 in
        turn (not bounds: where ``Λ`` sits)."""
        bound, rows = self.bound, np.arange(self.y.size)
        factors = bound.factors(psi, psi_new)
        out = {"lambda": float(np.sum(bound.row_rates(factors, rows)))}
        for name, part in (("dense", factors.u), ("first", factors.v), ("second", factors.w)):
            kept = part.copy()
            part[...] = 0.0
            out[f"lambda_no_{name}"] = float(np.sum(bound.row_rates(factors, rows)))
            part[...] = kept
        return out

    @property
    def _level_mask(self) -> np.ndarray:
        lay = self.frame.layout
        mask = np.zeros(self.lik.dim, dtype=bool)
        mask[lay.start:lay.stop] = True
        return mask

    def _level_form(self, phi, phi_new, level_move: bool) -> dict[str, float]:
        """The level bound's factors per row (no margins): orders 2 and 3, and the splits."""
        g, grp = self.g, self.groups[0]
        dense, dense2 = math.sqrt(phi[g:] @ phi[g:]), math.sqrt(phi_new[g:] @ phi_new[g:])
        step = phi_new[g:] - phi[g:]
        hk = np.abs(phi_new[:g] - phi[:g])[grp]
        pk, pk2 = np.abs(phi[:g])[grp], np.abs(phi_new[:g])[grp]
        A, A2 = self.s * dense + self.t * pk, self.s * dense2 + self.t * pk2
        H = self.t * hk + (0.0 if level_move else self.s * math.sqrt(step @ step))
        form2 = L2 / 6.0 * H * (A**2 + A * A2 + A2**2)
        A0, A20, H0 = self.t * pk, self.t * pk2, self.t * hk
        top = np.maximum(A, A2)
        row_sup = abs_f3_sup(self.eta_hat - top, self.eta_hat + top)
        level_sup = np.zeros(g)
        np.maximum.at(level_sup, grp, row_sup)
        out = {"form2": form2.sum(),
               "form2_phiD0": (L2 / 6.0 * H0 * (A0**2 + A0 * A20 + A20**2)).sum(),
               "form2_level_sup": (level_sup[grp] / 6.0 * H * (A**2 + A * A2 + A2**2)).sum(),
               "form3": (L3 / 24.0 * H * (A + A2) * (A**2 + A2**2)).sum(),
               "form4": (L4 / 120.0 * H * _power_sum(A, A2, 4)).sum(),
               "form4_phiD0": (L4 / 120.0 * H0 * _power_sum(A0, A20, 4)).sum(),
               "mean_phiD": dense}
        if level_move:
            per_level = np.bincount(grp, weights=form2, minlength=g)
            out["per_level_mean"] = per_level.mean()
            out["per_level_p90"] = float(np.quantile(per_level, 0.9))
        return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", default="1e6:10000", help="N:G or N:G:G2")
    parser.add_argument("--tune", type=int, default=300)
    parser.add_argument("--draws", type=int, default=100)
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--level-cv-order", type=int, default=2, choices=(2, 3, 4),
                        help="MHSS's level_cv_order (3, 4: the level moves' own third- and "
                             "fourth-order terms)")
    args = parser.parse_args(argv)
    n, g, *g2 = (int(float(v)) for v in args.case.split(":"))
    if g2:
        X, grp, grp2, y = crossed_data(n, 10, g, g2[0], args.seed)
        with pm.Model() as model:
            b = pm.Normal("b", 0.0, 10.0, shape=10)
            s = pm.HalfNormal("s", 1.0)
            s2 = pm.HalfNormal("s2", 1.0)
            u = pm.Normal("u", 0.0, s, shape=g)
            v = pm.Normal("v", 0.0, s2, shape=g2[0])
            pm.Bernoulli("y", logit_p=pm.Data("X", X) @ b + u[pm.Data("g", grp)]
                         + v[pm.Data("g2", grp2)], observed=y)
        groups = [grp, grp2]
    else:
        X, grp, y = random_effects_data(n, 10, g, seed=args.seed)
        model, groups = random_effects_model(X, grp, y, groups=g), [grp]
    print(f"case {args.case}, seed {args.seed}, level_cv_order {args.level_cv_order}, "
          f"load average {os.getloadavg()[0]:.1f}")
    t0 = time.perf_counter()
    with model:
        step = pms.MHSS(level_cv_order=args.level_cv_order)
    print(f"setup {time.perf_counter() - t0:.1f} s")
    split = Split(step, X, y, groups)
    moves, frame = step.level_moves, step.frame
    level_records, fixed_records = [], []
    count = {"it": 0}
    sweep, propose = moves.sweep, step.proposal.propose

    def measured(it: int) -> bool:
        return it > args.tune and (it - args.tune) % args.every == 0

    # the bound the moves use (order 3's with level_cv_order=3)
    level_bound = moves.bound if moves.cubic is None else moves.cubic.bound
    fixed_bound = step.rate_bound if moves.cubic is None else moves.cubic.bound

    def level_pairs(theta, phi):
        rng = np.random.default_rng(count["it"])
        mean, precision = moves.conditional_gaussian(theta)
        x = theta[moves._levels]
        z = rng.standard_normal(moves.n_levels)
        rec = {}
        for rho in (0.8, 0.5, 0.0):  # 0 last: its pair is the one measured on all rows
            x_new = mean + rho * (x - mean) + math.sqrt(1.0 - rho**2) * z / np.sqrt(precision)
            theta_new = theta.copy()
            theta_new[moves._levels] = x_new
            phi_new = phi.copy()
            phi_new[: moves.n_levels] = phi[: moves.n_levels] + frame.level_scale * (x_new - x)
            rec[f"expected_rhoL_{rho}"] = float(np.sum(
                level_bound.level_rates(phi, phi_new).expected))
        rec.update(split.measure(theta, theta_new, phi, phi_new, level_move=True))
        return rec

    def wrapped_sweep(theta, phi, remainder, **kw):
        count["it"] += 1
        if measured(count["it"]):
            level_records.append(level_pairs(theta, phi))
        return sweep(theta, phi, remainder, **kw)

    def wrapped_propose(rng, phi):
        phi_new, log_q = propose(rng, phi)
        if measured(count["it"] + 1):
            theta, theta_new = frame.unwhiten(phi), frame.unwhiten(phi_new)
            at, at_new = moves.rows_phi(theta), moves.rows_phi(theta_new)
            rec = {"expected": fixed_bound.category_rates(at, at_new).expected}
            rec.update(split.measure(theta, theta_new, at, at_new, level_move=False))
            fixed_records.append(rec)
        return phi_new, log_q

    moves.sweep, step.proposal.propose = wrapped_sweep, wrapped_propose
    second_records = []
    second = step.second_moves
    if second is not None:
        second_propose = second.propose

        def wrapped_second(theta, rng):
            x_new, log_q = second_propose(theta, rng)
            if measured(count["it"]):
                theta_new = theta.copy()
                theta_new[second._levels] = x_new
                at, at_new = second.coords.point(theta), second.coords.point(theta_new)
                rec = {"expected": float(np.sum(second.bound.level_rates(
                    at, at_new, factor=1).expected))}
                rec.update(split.measure(theta, theta_new, at, at_new, level_move=False))
                second_records.append(rec)
            return x_new, log_q

        second.propose = wrapped_second
    t0 = time.perf_counter()
    with model:
        idata = pm.sample(draws=args.draws, tune=args.tune, step=step, chains=1,
                          random_seed=args.seed, progressbar=False,
                          compute_convergence_checks=False)
    stats = idata.sample_stats
    rows, level_rows = float(stats["n_data"].mean()), float(stats["level_rows"].mean())
    print(f"chain {time.perf_counter() - t0:.1f} s (measurements included): rows/iter "
          f"{rows:.1f}, the levels' {level_rows:.1f}; load average {os.getloadavg()[0]:.1f}")
    for name, records in (("level sweep (every level of the first factor)", level_records),
                          ("fixed block", fixed_records),
                          ("second factor's level sweep", second_records)):
        if not records:
            continue
        print(f"\n{name}: mean over {len(records)} pairs (min, max)\n")
        print("| quantity | mean | min | max |\n|---|---|---|---|")
        for key in records[0]:
            vals = np.array([r[key] for r in records], dtype=float)
            print(f"| {key} | {vals.mean():.4g} | {vals.min():.4g} | {vals.max():.4g} |")


if __name__ == "__main__":
    main()
