"""The demo end to end at a tiny size: a table with NUTS and MHSS rows, and a PNG."""

from __future__ import annotations

import pytest

from pymc_subsample.demo import FIGURE_NAME, main, nuts_budget


def test_demo_prints_table_and_writes_png(tmp_path, capsys):
    out = tmp_path / "demo-out"
    result = main([
        "--rows", "1500", "--dim", "3", "--draws", "200", "--tune", "100",
        "--nuts-draws", "50", "--nuts-tune", "50", "--out", str(out),
    ])
    printed = capsys.readouterr().out
    table = [
        cells for cells in map(str.split, printed.splitlines())
        if cells[:1] in (["NUTS"], ["MHSS-2"]) and cells[1:2] == ["2"]
    ]
    assert [cells[:4] for cells in table] == [  # method, chains, tune, draws
        ["NUTS", "2", "50", "50"],
        ["MHSS-2", "2", "100", "200"],
    ]
    png = out / FIGURE_NAME
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert str(png.resolve()) in printed
    assert "NUTS ran 50 draws after 50 tuning steps" in printed
    assert result.table["method"].tolist() == ["NUTS", "MHSS-2"]


@pytest.mark.parametrize(
    ("rows", "expected"),
    [(10_000, (2000, 1000)), (100_000, (500, 500)), (1_000_000, (100, 100)), (10**8, (100, 100))],
)
def test_nuts_budget_shrinks_with_rows(rows, expected):
    assert nuts_budget(rows, draws=2000, tune=1000) == expected
