"""The demo end to end at a tiny size: a table with NUTS and MHSS rows, and a PNG."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytensor
import pytest

from pymc_subsample.compare import numpyro_available
from pymc_subsample.demo import (
    BLAS_NOTICE,
    DEFAULT_ROWS,
    FIGURE_NAME,
    _parser,
    main,
    nuts_budget,
)

ROOT = Path(__file__).resolve().parent.parent


def test_demo_prints_table_and_writes_png(tmp_path, capsys):
    """With whichever NUTS "auto" picks (NumPyro when installed, as in the README)."""
    sampler = "numpyro" if numpyro_available() else "pymc"
    out = tmp_path / "demo-out"
    result = main([
        "--rows", "1500", "--dim", "3", "--draws", "200", "--tune", "100",
        "--nuts-draws", "50", "--nuts-tune", "50", "--out", str(out),
    ])
    printed = capsys.readouterr().out
    table = [
        cells for cells in map(str.split, printed.splitlines())
        if cells[:2] == ["NUTS", f"({sampler})"] or cells[:2] == ["MHSS-2", "2"]
    ]
    assert [cells[-13:-10] for cells in table] == [  # chains, tune, draws
        ["2", "50", "50"],
        ["2", "100", "200"],
    ]
    png = out / FIGURE_NAME
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert str(png.resolve()) in printed
    assert "NUTS ran 50 draws after 50 tuning steps" in printed
    assert "time_to_ess1000_s" in printed
    assert f"NUTS ({sampler})" in printed and "Time to a bulk ESS of 1000" in printed
    assert result.table["method"].tolist() == [f"NUTS ({sampler})", "MHSS-2"]
    assert (BLAS_NOTICE in printed) == (not pytensor.config.blas__ldflags)
    assert "could not link to a BLAS" not in printed and "Warning" not in printed


def test_no_library_warnings_on_import_and_blas_check(tmp_path):
    """What the demo does before its first line of output, in a fresh process with every
    warning shown and an empty ArviZ cache (so ArviZ's once-a-day notice is due): importing
    the package and reading PyTensor's BLAS flags print no FutureWarning or BLAS warning."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    code = ("import pymc_subsample, pymc_subsample.demo as d; "
            "print(d.blas_notice() or 'BLAS linked')")
    run = subprocess.run([sys.executable, "-W", "default", "-c", code], capture_output=True,
                         text=True, env=env, cwd=tmp_path, timeout=300, check=True)
    assert run.stdout.strip() in (BLAS_NOTICE, "BLAS linked")
    noise = [line for line in run.stderr.splitlines()
             if "FutureWarning" in line or "BLAS" in line or "ArviZ is undergoing" in line]
    assert noise == [], run.stderr


def test_default_is_the_quick_run():
    args = _parser().parse_args([])
    assert int(args.rows) == DEFAULT_ROWS == 100_000
    assert args.nuts_sampler == "auto"


@pytest.mark.parametrize(
    ("rows", "expected"),
    [(10_000, (2000, 1000)), (100_000, (300, 300)), (1_000_000, (100, 100)), (10**8, (100, 100))],
)
def test_nuts_budget_shrinks_with_rows(rows, expected):
    assert nuts_budget(rows, draws=2000, tune=1000) == expected
