"""The correction distribution of the minibatch Barker test (Seita, Pan, Chen & Canny 2017, Sec. 4).

The Barker test accepts a proposal iff ``Δ + X_log > 0`` with ``X_log`` standard logistic. The
minibatch test writes ``X_log = X_norm + X_corr`` with ``X_norm ~ N(0, σ²)`` and a correction
variable ``X_corr`` with density ``C_σ`` (paper, eq. 12), so that the approximately normal noise
of a minibatch estimate ``Δ*`` can play the part of ``X_norm``. ``C_σ`` has no closed form; it is
found by a regularised least-squares deconvolution (paper, eqs. 14-15):

    Y_j = j·V/n_g,  j ∈ [−n_g, n_g]          (atoms of X_corr, range [−V, V])
    X_i = i·V/n_g,  i ∈ [−2n_g, 2n_g]        (points where the CDF of the sum is matched)
    M_ij = Φ((X_i − Y_j)/σ),   v_i = S(X_i)  (normal CDF, logistic CDF)
    u* = (MᵀM + λI)⁻¹ Mᵀv,  then negatives clipped to 0 and u renormalised to sum to 1.

``V = 20`` (Table 3: "a range of X_corr ∈ [−20, 20]"); the paper's settings ``n_g = 4000``,
``σ = 1``, ``λ = 10`` give an L∞ error of 8.9e-4 between the CDF of ``X_norm + X_corr`` and the
logistic CDF (Table 3). ``u_j`` is the probability of the atom ``Y_j``: ``X_corr`` is the discrete
distribution on the grid, so :meth:`CorrectionDistribution.cdf_of_sum` is exactly the CDF of
``X_norm + X_corr`` for the draws of :meth:`CorrectionDistribution.sample` (no interpolation).

Computation. ``M`` is Toeplitz (``M_ij`` depends on ``i − j`` only), so ``Mᵀv`` and the first row
of the Gram matrix ``G = MᵀM`` are discrete correlations and the other rows follow from the
recursion ``G[j+1, k+1] = G[j, k] + a_j a_k − b_j b_k`` (``a_j = Φ((X_{−2n_g−1} − Y_j)/σ)``,
``b_j = Φ((X_{2n_g} − Y_j)/σ)``: shifting both indices moves the row window by one), which costs
O(n_g²) instead of the O(n_g³) of forming ``MᵀM``. The system ``(G + λI)u = Mᵀv`` is solved by a
Cholesky factorisation (about 10 s on two cores at ``n_g = 4000``, dominated by the factorisation).

The shipped table. ``σ = 1`` is loaded from ``pymc_subsample/data/barker_correction_sigma1.npz``,
the output of ``compute_correction(1.0, 4000, 10.0, 20.0)``. Regenerate it with::

    python benchmarks/barker_correction_table.py                  # rewrites the shipped file
    python benchmarks/barker_correction_table.py --output other.npz

Other σ are computed on first use by :func:`load_correction` and memoised for the process.
"""

from __future__ import annotations

import functools
import importlib.resources
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.linalg
from scipy.signal import fftconvolve
from scipy.special import expit, ndtr

__all__ = [
    "SIGMA_MAX",
    "CorrectionDistribution",
    "compute_correction",
    "load_correction",
]

#: Standard deviation of the standard logistic distribution, ``π/√3``: ``σ`` must stay below it.
SIGMA_MAX = math.pi / math.sqrt(3.0)

#: Settings of the shipped table (the paper's choice, Sec. 4 and Appendix B.1).
SHIPPED_SIGMA = 1.0
SHIPPED_N_GRID = 4000
SHIPPED_LAM = 10.0
SHIPPED_SUPPORT = 20.0

_DATA_FILE = "barker_correction_sigma1.npz"
_FORMAT_VERSION = 1
# Beyond 8.3 standard deviations Φ is 0 or 1 to double precision (Φ(−8.3) ≈ 5e-17).
_PHI_CUTOFF = 8.3


def _check_sigma(sigma: float) -> float:
    try:
        value = float(sigma)
    except (TypeError, ValueError):
        raise ValueError(f"sigma must be a real number, got {sigma!r}") from None
    if not (0.0 < value < SIGMA_MAX):
        raise ValueError(
            f"sigma must satisfy 0 < sigma < pi/sqrt(3) ≈ {SIGMA_MAX:.4f} (the standard deviation "
            f"of the logistic distribution, which X_norm + X_corr must match), got sigma={sigma!r}"
        )
    return value


def _check_grid_args(n_grid: int, lam: float, support: float) -> tuple[int, float, float]:
    if isinstance(n_grid, bool) or not isinstance(n_grid, int | np.integer) or n_grid < 1:
        raise ValueError(f"n_grid must be a positive integer, got n_grid={n_grid!r}")
    lam = float(lam)
    if not (math.isfinite(lam) and lam > 0.0):
        raise ValueError(f"lam must be a finite positive number, got lam={lam!r}")
    support = float(support)
    if not (math.isfinite(support) and support > 0.0):
        raise ValueError(f"support must be a finite positive number, got support={support!r}")
    return int(n_grid), lam, support


@dataclass(frozen=True, eq=False)
class CorrectionDistribution:
    """The distribution of ``X_corr``: probabilities on the grid ``Y_j = j·support/n_grid``.

    ``X_norm + X_corr`` (with ``X_norm ~ N(0, sigma²)`` independent) is approximately standard
    logistic; :meth:`linf_error` measures how closely. Instances are immutable (their arrays are
    read-only) because :func:`load_correction` shares them.

    Attributes
    ----------
    sigma : float
        Standard deviation of the normal part ``X_norm``.
    grid : numpy.ndarray, shape (2*n_grid + 1,)
        The atoms ``Y_j``, from ``-support`` to ``support``.
    probs : numpy.ndarray, shape (2*n_grid + 1,)
        ``P(X_corr = Y_j)``: the clipped, renormalised least-squares solution ``u*``.
    cdf : numpy.ndarray, shape (2*n_grid + 1,)
        ``P(X_corr <= Y_j)``; the last entry is exactly 1.
    n_grid, lam, support : int, float, float
        The settings of :func:`compute_correction` that produced the table.
    """

    sigma: float
    grid: np.ndarray
    probs: np.ndarray
    cdf: np.ndarray
    n_grid: int
    lam: float
    support: float

    @classmethod
    def from_probs(
        cls, probs: np.ndarray, sigma: float, n_grid: int, lam: float, support: float
    ) -> CorrectionDistribution:
        """Build the distribution from the atom probabilities (validated and renormalised)."""
        sigma = _check_sigma(sigma)
        n_grid, lam, support = _check_grid_args(n_grid, lam, support)
        probs = np.array(probs, dtype=np.float64)
        if probs.shape != (2 * n_grid + 1,):
            raise ValueError(f"probs must have shape ({2 * n_grid + 1},), got {probs.shape}")
        if not np.all(np.isfinite(probs)) or np.any(probs < 0) or probs.sum() <= 0:
            raise ValueError("probs must be finite, non-negative and not all zero")
        probs /= probs.sum()
        cdf = np.cumsum(probs)
        cdf /= cdf[-1]
        cdf[-1] = 1.0
        grid = np.arange(-n_grid, n_grid + 1) * (support / n_grid)
        for arr in (grid, probs, cdf):
            arr.flags.writeable = False
        return cls(sigma, grid, probs, cdf, n_grid, lam, support)

    @property
    def step(self) -> float:
        """Spacing ``V/n_g`` of the grid."""
        return self.support / self.n_grid

    def sample(self, rng: np.random.Generator, size: int | None = None) -> float | np.ndarray:
        """Draw ``X_corr`` by inversion of its CDF (a float, or an array of ``size`` draws)."""
        u = rng.random(size)
        # side="right": the first atom whose cdf exceeds u; atoms of probability 0 are never hit.
        idx = np.searchsorted(self.cdf, u, side="right")
        out = self.grid[np.minimum(idx, self.grid.size - 1)]
        return float(out) if size is None else out

    def cdf_of_sum(self, x: np.ndarray) -> np.ndarray:
        """CDF of ``X_norm + X_corr`` at ``x``: ``Σ_j probs_j Φ((x − Y_j)/σ)``.

        Exact for the tabulated distribution; costs O(len(x)·n_grid) normal-CDF evaluations
        (see :meth:`cdf_of_sum_on_grid` for a dense regular grid).
        """
        x = np.asarray(x, dtype=np.float64)
        flat = x.ravel()
        out = np.empty(flat.size)
        chunk = max(1, 2_000_000 // self.grid.size)
        for start in range(0, flat.size, chunk):
            xs = flat[start : start + chunk]
            out[start : start + chunk] = ndtr((xs[:, None] - self.grid[None, :]) / self.sigma) @ (
                self.probs
            )
        return out.reshape(x.shape)

    def cdf_of_sum_on_grid(self, refine: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """CDF of ``X_norm + X_corr`` on ``[−2V, 2V]`` with spacing ``V/(n_g·refine)``.

        The points include the ``X_i`` of the fit (``refine = 1``) and ``refine − 1`` equally
        spaced points between consecutive ones. Each of the ``refine`` offsets is one discrete
        convolution of ``probs`` with a normal-CDF kernel (FFT; rounding error ~1e-15).

        Returns
        -------
        x, cdf : numpy.ndarray
            The points, increasing, and the CDF there.
        """
        if isinstance(refine, bool) or not isinstance(refine, int | np.integer) or refine < 1:
            raise ValueError(f"refine must be a positive integer, got refine={refine!r}")
        n, h = self.n_grid, self.step
        k = np.arange(-3 * n, 3 * n + 1)  # i − j for i ∈ [−2n, 2n], j ∈ [−n, n]
        i = np.arange(-2 * n, 2 * n + 1)
        x = np.empty((i.size, refine))
        out = np.empty((i.size, refine))
        for s in range(refine):
            offset = s * h / refine
            kernel = ndtr((k * h + offset) / self.sigma)
            # full[p] = Σ_j probs[j+n]·kernel[p − (j+n)]; the point X_i + offset is p = i + 4n.
            full = fftconvolve(self.probs, kernel)
            out[:, s] = full[2 * n : 6 * n + 1]
            x[:, s] = i * h + offset
        x, out = x.ravel()[: -(refine - 1) or None], out.ravel()[: -(refine - 1) or None]
        return x, np.clip(out, 0.0, 1.0)

    def linf_error(self, refine: int = 4) -> float:
        """``max |CDF of X_norm + X_corr − logistic CDF|`` on the :meth:`cdf_of_sum_on_grid` points.

        Outside ``[−2V, 2V]`` both CDFs are within ``S(−2V)`` (4e-18 for ``V = 20``) of 0 or 1.
        """
        x, cdf = self.cdf_of_sum_on_grid(refine)
        return float(np.max(np.abs(cdf - expit(x))))


def _gram_and_rhs(sigma: float, n_grid: int, support: float) -> tuple[np.ndarray, np.ndarray]:
    """Return ``G = MᵀM`` and ``Mᵀv`` for the deconvolution, without forming ``M``.

    ``M_ij = f(i − j)`` with ``f(k) = Φ(k·h/σ)``, ``h = support/n_grid``; ``G`` is built row by row
    from its first row by ``G[p+1, q+1] = G[p, q] + a_p a_q − b_p b_q`` (module docstring).
    """
    n = n_grid
    h = support / n
    f = ndtr(np.arange(-3 * n, 3 * n + 1) * h / sigma)  # f[k + 3n] = Φ(k·h/σ)
    v = expit(np.arange(-2 * n, 2 * n + 1) * h)
    # np.correlate(f, w, "valid")[s] = Σ_i f[(i+2n) + s]·w[i+2n] = Σ_i f(i − j) w_i with j = n − s.
    rhs = np.correlate(f, v, mode="valid")[::-1].copy()
    first = np.correlate(f, f[2 * n : 6 * n + 1], mode="valid")[::-1]  # w_i = M_{i,−n} = f(i + n)
    m = 2 * n + 1
    a = f[2 * n - 1 :: -1]  # a_p = f(−2n − 1 − j) = f[2n − 1 − p],  p = j + n ∈ [0, 2n − 1]
    b = f[6 * n : 4 * n : -1]  # b_p = f(2n − j) = f[6n − p]
    gram = np.empty((m, m))
    gram[0] = first
    gram[:, 0] = first
    for p in range(m - 1):
        np.add(gram[p, :-1], a[p] * a - b[p] * b, out=gram[p + 1, 1:])
    return gram, rhs


def compute_correction(
    sigma: float = 1.0, n_grid: int = 4000, lam: float = 10.0, support: float = 20.0
) -> CorrectionDistribution:
    """Compute the correction distribution ``C_σ`` by regularised least squares.

    Solves ``u* = (MᵀM + λI)⁻¹Mᵀv`` (Seita et al. 2017, eq. 15) with a Cholesky factorisation,
    clips negative entries to zero and renormalises (Sec. 4). See the module docstring for the
    discretisation.

    Parameters
    ----------
    sigma : float
        Standard deviation of ``X_norm``; ``0 < sigma < π/√3``.
    n_grid : int
        ``n_g``: ``X_corr`` lives on ``2·n_grid + 1`` atoms. The paper uses 4000.
    lam : float
        Ridge parameter ``λ > 0``. The paper uses 10 for ``σ = 1``; Table 3 favours smaller
        ``λ`` for smaller ``σ`` (``λ = 1`` at ``σ = 0.9``).
    support : float
        ``V``: the atoms span ``[−V, V]`` and the fit matches CDFs on ``[−2V, 2V]``.

    Returns
    -------
    CorrectionDistribution
    """
    sigma = _check_sigma(sigma)
    n_grid, lam, support = _check_grid_args(n_grid, lam, support)
    gram, rhs = _gram_and_rhs(sigma, n_grid, support)
    gram[np.diag_indices_from(gram)] += lam
    factor = scipy.linalg.cho_factor(gram, lower=True, overwrite_a=True, check_finite=False)
    u = scipy.linalg.cho_solve(factor, rhs, check_finite=False)
    return CorrectionDistribution.from_probs(np.clip(u, 0.0, None), sigma, n_grid, lam, support)


def shipped_path() -> Path:
    """Where the shipped ``σ = 1`` table lives in the source tree."""
    return Path(__file__).resolve().parents[1] / "data" / _DATA_FILE


def save_correction(correction: CorrectionDistribution, path: str | Path) -> None:
    """Write ``correction`` to a compressed ``.npz`` file readable by :func:`read_correction`."""
    np.savez_compressed(
        path,
        format_version=np.int64(_FORMAT_VERSION),
        probs=correction.probs,
        sigma=np.float64(correction.sigma),
        n_grid=np.int64(correction.n_grid),
        lam=np.float64(correction.lam),
        support=np.float64(correction.support),
    )


def read_correction(file) -> CorrectionDistribution:
    """Read a table written by :func:`save_correction` (a path or a binary file object)."""
    with np.load(file, allow_pickle=False) as data:
        version = int(data["format_version"])
        if version != _FORMAT_VERSION:
            raise ValueError(f"unsupported correction table format version {version}")
        return CorrectionDistribution.from_probs(
            data["probs"],
            sigma=float(data["sigma"]),
            n_grid=int(data["n_grid"]),
            lam=float(data["lam"]),
            support=float(data["support"]),
        )


def _load_shipped() -> CorrectionDistribution:
    resource = importlib.resources.files("pymc_subsample") / "data" / _DATA_FILE
    with resource.open("rb") as fh:
        correction = read_correction(fh)
    if correction.sigma != SHIPPED_SIGMA:
        raise ValueError(f"shipped correction table has sigma={correction.sigma}, expected 1")
    return correction


@functools.cache
def _load_cached(sigma: float) -> CorrectionDistribution:
    if sigma == SHIPPED_SIGMA:
        return _load_shipped()
    return compute_correction(sigma, SHIPPED_N_GRID, SHIPPED_LAM, SHIPPED_SUPPORT)


def load_correction(sigma: float = 1.0) -> CorrectionDistribution:
    """Return the correction distribution for ``X_norm ~ N(0, σ²)``.

    ``σ = 1`` (the paper's Algorithm 1) is read from the table shipped with the package; any
    other ``σ`` is computed with ``compute_correction(sigma, 4000, 10.0, 20.0)`` on first use
    (about 10 s) and memoised for the rest of the process. The fit degrades as ``σ`` grows
    towards ``π/√3`` (Table 3: L∞ error 6e-3 at ``σ = 1.1``); check ``linf_error()``, or call
    :func:`compute_correction` with another ``lam`` for a better fit.

    Raises
    ------
    ValueError
        If ``sigma`` is not in ``(0, π/√3)``.
    """
    return _load_cached(_check_sigma(sigma))
