"""Recompute the correction table shipped for BarkerMinibatch (``σ = 1``).

    python benchmarks/barker_correction_table.py                  # rewrites the shipped file
    python benchmarks/barker_correction_table.py --output other.npz

The table is ``compute_correction(1.0, 4000, 10.0, 20.0)`` of
:mod:`pymc_subsample.kernels.barker_correction` (``docs/methods/barker.md``); the kernel itself
has no command line.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from pymc_subsample.kernels import barker_correction as bc


def main(argv: list[str] | None = None) -> None:
    """Recompute the shipped ``σ = 1`` table and write it (by default over the shipped one)."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--output", type=Path, default=bc.shipped_path(),
                        help="npz file to write")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    correction = bc.compute_correction(bc.SHIPPED_SIGMA, bc.SHIPPED_N_GRID, bc.SHIPPED_LAM,
                                       bc.SHIPPED_SUPPORT)
    elapsed = time.perf_counter() - start
    bc.save_correction(correction, args.output)
    print(
        f"wrote {args.output} ({args.output.stat().st_size} bytes): sigma={correction.sigma}, "
        f"n_grid={correction.n_grid}, lam={correction.lam}, support={correction.support}; "
        f"computed in {elapsed:.1f} s; L-infinity CDF error {correction.linf_error():.3e}"
    )


if __name__ == "__main__":
    main()
