"""``compare``: the table's arithmetic on hand-made runs, then one small end-to-end run."""

from __future__ import annotations

import importlib
import math
import re

import arviz as az
import matplotlib.pyplot as plt
import numpy as np
import pytest

import pymc_subsample as pms
from pymc_subsample.compare import (
    COLUMNS,
    compare,
    mcse_distance,
    nuts_method_name,
    resolve_nuts_sampler,
    summarise_run,
    time_to_ess,
)

N_ROWS = 2000  # the conftest fixture ``logistic_small``
# the module (``pymc_subsample.compare`` as an attribute is the function)
compare_module = importlib.import_module("pymc_subsample.compare")


def _fake_idata(stats: dict[str, np.ndarray], seed: int = 0) -> az.InferenceData:
    rng = np.random.default_rng(seed)
    posterior = {"b": rng.normal(size=(2, 200, 3)), "s": rng.normal(size=(2, 200))}
    return az.from_dict(posterior=posterior, sample_stats=stats)


class TestSummariseRun:
    def test_subsampling_step_reads_n_data_and_accepted(self):
        n_data = np.tile(np.arange(4), (2, 50))
        accepted = np.zeros((2, 200), dtype=bool)
        accepted[:, :50] = True
        idata = _fake_idata({"n_data": n_data, "accepted": accepted})
        row, means, mcse = summarise_run(idata, ["b", "s"], N_ROWS, setup_s=1.5, sampling_s=2.5)

        assert row["rows_per_iter"] == pytest.approx(1.5)
        assert row["accept"] == pytest.approx(0.25)
        assert (row["chains"], row["draws"]) == (2, 200)
        ess = np.concatenate([az.ess(idata, var_names=[v])[v].values.ravel() for v in "bs"])
        assert row["ess_bulk"] == pytest.approx(ess.min())
        assert row["ess_bulk_per_s"] == pytest.approx(ess.min() / 4.0)
        assert row["time_to_ess1000_s"] == pytest.approx(1.5 + 2.5 * 1000 / ess.min())
        rhat = np.concatenate([az.rhat(idata, var_names=[v])[v].values.ravel() for v in "bs"])
        assert row["r_hat"] == pytest.approx(rhat.max())
        post = idata.posterior
        expected_means = np.concatenate(
            [post["b"].mean(("chain", "draw")).values, [float(post["s"].mean())]]
        )
        np.testing.assert_allclose(means, expected_means)
        assert mcse.shape == (4,)

    def test_nuts_rows_are_n_times_leapfrog_steps(self):
        n_steps = np.full((2, 200), 7.0)
        n_steps[1] = 3.0
        rate = np.full((2, 200), 0.8)
        idata = _fake_idata({"n_steps": n_steps, "acceptance_rate": rate})
        row, _, _ = summarise_run(idata, ["b"], N_ROWS, setup_s=0.1, sampling_s=1.0)
        assert row["rows_per_iter"] == pytest.approx(5.0 * N_ROWS)
        assert row["accept"] == pytest.approx(0.8)

    def test_unknown_step_gives_nan_rows_and_nan_setup_gives_nan_rate(self):
        idata = _fake_idata({"other": np.zeros((2, 200))})
        row, _, _ = summarise_run(idata, ["b"], N_ROWS, setup_s=math.nan, sampling_s=1.0)
        assert math.isnan(row["rows_per_iter"])
        assert math.isnan(row["accept"])
        assert math.isnan(row["ess_bulk_per_s"])
        assert math.isnan(row["time_to_ess1000_s"])


def test_time_to_ess_pays_the_setup_once_and_scales_the_sampling():
    assert time_to_ess(2.0, 8.0, 500.0) == pytest.approx(18.0)
    assert time_to_ess(2.0, 8.0, 4000.0) == pytest.approx(4.0)
    assert math.isnan(time_to_ess(math.nan, 8.0, 500.0))
    assert math.isnan(time_to_ess(2.0, 8.0, 0.0))


class TestNutsSampler:
    def test_auto_prefers_numpyro_when_importable(self, monkeypatch):
        monkeypatch.setattr(compare_module, "numpyro_available", lambda: True)
        assert resolve_nuts_sampler("auto") == "numpyro"
        monkeypatch.setattr(compare_module, "numpyro_available", lambda: False)
        assert resolve_nuts_sampler("auto") == "pymc"
        assert resolve_nuts_sampler("pymc") == "pymc"

    def test_numpyro_without_numpyro_says_how_to_install(self, monkeypatch):
        monkeypatch.setattr(compare_module, "numpyro_available", lambda: False)
        with pytest.raises(ImportError, match=r"pymc-subsample\[jax\]"):
            resolve_nuts_sampler("numpyro")

    def test_unknown_sampler(self):
        with pytest.raises(ValueError, match="nuts_sampler must be one of"):
            resolve_nuts_sampler("nutpie")

    def test_method_names(self):
        assert nuts_method_name("numpyro") == "NUTS (numpyro)"
        assert nuts_method_name("pymc") == "NUTS (pymc)"


def test_mcse_distance_is_max_over_coordinates():
    means, mcse = np.array([1.0, 2.0, 3.0]), np.array([0.3, 0.1, 0.4])
    ref, ref_mcse = np.array([1.0, 2.5, 2.0]), np.array([0.4, 0.1, 0.3])
    expected = max(0.0, 0.5 / np.sqrt(0.02), 1.0 / 0.5)
    assert mcse_distance(means, mcse, ref, ref_mcse) == pytest.approx(expected)


class TestArguments:
    def test_nothing_to_compare(self, logistic_small):
        with pytest.raises(ValueError, match="Nothing to compare"):
            compare(logistic_small[2], {}, nuts=False)

    @pytest.mark.parametrize("name", ["NUTS", "NUTS (pymc)"])
    def test_nuts_names_are_reserved(self, logistic_small, name):
        with pytest.raises(ValueError, match=re.escape(f"'{name}' is used")):
            compare(logistic_small[2], {name: pms.MHSS}, nuts_sampler="pymc")

    def test_spec_must_be_callable_or_step(self, logistic_small):
        with pytest.raises(TypeError, match="zero-argument callable"):
            compare(logistic_small[2], {"MHSS": {"cv_order": 2}})

    def test_reference_must_be_a_method(self, logistic_small):
        with pytest.raises(ValueError, match="reference 'MHSS-3'"):
            compare(logistic_small[2], {"MHSS-2": pms.MHSS}, reference="MHSS-3")


@pytest.fixture(scope="module")
def prebuilt(logistic_small):
    with logistic_small[2]:
        return pms.MHSS(cv_order=1, rng=3)


class _Profiled:
    """A step spec whose step carries a ``setup_profile``, as the steps will."""

    def __call__(self):
        step = pms.MHSS(cv_order=2)
        step.setup_profile = {"map_s": 0.25, "compile_s": 0.5, "full_data_passes": 3}
        return step


def test_end_to_end(logistic_small, prebuilt, tmp_path):
    """One small run with PyMC's NUTS (its setup dominates, so all checks share it)."""
    figures_before = plt.get_fignums()
    figure = tmp_path / "sub" / "forest.png"
    result = compare(
        logistic_small[2],
        {"MHSS-2": _Profiled(), "MHSS-1 built": prebuilt},
        draws=150,
        tune=100,
        chains=2,
        nuts_sampler="pymc",
        nuts_draws=60,
        nuts_tune=50,
        random_seed=1,
        figure=figure,
    )

    # what ran
    nuts = "NUTS (pymc)"
    table = result.table
    assert tuple(table.columns) == COLUMNS
    assert table["method"].tolist() == [nuts, "MHSS-2", "MHSS-1 built"]
    assert table[["tune", "draws"]].values.tolist() == [[50, 60], [100, 150], [100, 150]]
    assert (table["chains"] == 2).all()
    assert result.reference == nuts
    assert result.nuts_sampler == "pymc"
    assert result.n_rows == N_ROWS
    assert list(result.idata) == table["method"].tolist()

    # setup is timed only for steps built here; their setup profiles are kept
    by_method = table.set_index("method")
    assert by_method.loc[nuts, "setup_s"] > 0
    assert by_method.loc["MHSS-2", "setup_s"] > 0
    assert math.isnan(by_method.loc["MHSS-1 built", "setup_s"])
    assert math.isnan(by_method.loc["MHSS-1 built", "ess_bulk_per_s"])
    assert math.isnan(by_method.loc["MHSS-1 built", "time_to_ess1000_s"])
    assert (by_method["sampling_s"] > 0).all()
    assert result.setup_profiles["MHSS-2"] == {
        "map_s": 0.25, "compile_s": 0.5, "full_data_passes": 3
    }
    if hasattr(prebuilt, "setup_profile"):  # kept for built steps too, as a copy
        assert result.setup_profiles["MHSS-1 built"] == prebuilt.setup_profile
        assert result.setup_profiles["MHSS-1 built"] is not prebuilt.setup_profile
    assert set(result.setup_profiles) <= {"MHSS-2", "MHSS-1 built"}
    for name in (nuts, "MHSS-2"):
        setup, sampling = by_method.loc[name, "setup_s"], by_method.loc[name, "sampling_s"]
        assert by_method.loc[name, "time_to_ess1000_s"] == pytest.approx(
            setup + sampling * 1000 / by_method.loc[name, "ess_bulk"]
        )

    # rows, acceptance and distance come from each run's own stats
    nuts_stats = result.idata[nuts].sample_stats
    assert by_method.loc[nuts, "rows_per_iter"] == pytest.approx(
        N_ROWS * float(nuts_stats["n_steps"].mean())
    )
    for name in ("MHSS-2", "MHSS-1 built"):
        stats = result.idata[name].sample_stats
        assert by_method.loc[name, "rows_per_iter"] == pytest.approx(float(stats["n_data"].mean()))
        assert by_method.loc[name, "accept"] == pytest.approx(float(stats["accepted"].mean()))
        assert np.isfinite(by_method.loc[name, "z_vs_ref"])
    assert math.isnan(by_method.loc[nuts, "z_vs_ref"])
    assert (by_method["ess_tail"] > 0).all() and (by_method["r_hat"] > 0.9).all()

    # the forest plot is a PNG, drawn without pyplot
    assert result.figure == figure
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plt.get_fignums() == figures_before

    # the printed table shows missing values as "-"
    text = str(result)
    assert text.splitlines()[0].split() == list(COLUMNS)
    assert "NaN" not in text and " - " in text


def test_without_nuts_reference_is_chosen_by_name(logistic_small, prebuilt, tmp_path):
    result = compare(
        logistic_small[2],
        {"a": prebuilt, "b": prebuilt},
        nuts=False,
        reference="a",
        draws=60,
        tune=20,
        chains=1,
        random_seed=2,
    )
    table = result.table.set_index("method")
    assert math.isnan(table.loc["a", "z_vs_ref"]) and np.isfinite(table.loc["b", "z_vs_ref"])
    assert math.isnan(table.loc["a", "r_hat"])  # one chain: no R-hat
    assert result.figure is None
    path = result.plot(tmp_path / "standardised.png")
    assert path.stat().st_size > 0


def test_numpyro_nuts(logistic_small):
    """NumPyro's NUTS through pm.sample: named, timed in full, with its stats read."""
    pytest.importorskip("numpyro")
    result = compare(
        logistic_small[2], {}, chains=2, nuts_draws=60, nuts_tune=60, random_seed=4
    )  # "auto" picks NumPyro when it is installed
    nuts = "NUTS (numpyro)"
    assert result.nuts_sampler == "numpyro" and result.reference == nuts
    row = result.table.set_index("method").loc[nuts]
    assert (row["chains"], row["tune"], row["draws"]) == (2, 60, 60)
    assert row["setup_s"] > 0 and row["sampling_s"] > 0
    stats = result.idata[nuts].sample_stats
    assert row["rows_per_iter"] == pytest.approx(N_ROWS * float(stats["n_steps"].mean()))
    assert 0 < row["accept"] <= 1
    assert row["time_to_ess1000_s"] == pytest.approx(
        row["setup_s"] + row["sampling_s"] * 1000 / row["ess_bulk"]
    )
    assert result.setup_profiles == {}
    # the posterior agrees with the one PyMC's NUTS samples
    means = result.idata[nuts].posterior["b"].mean(("chain", "draw")).values
    assert np.all(np.abs(means) < 5)
