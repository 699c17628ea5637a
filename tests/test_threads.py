"""Passes on threads (issue 31, item 2): each block summed alone and the blocks combined in
order, so one thread and two give the same sums to the last bit, from memory and from a
``.npy`` file read ahead, over all rows and over a subsample; the same step and the same
draws for the same ``random_seed``, also with an automatic bound (its cell grid made on a
pass's first block, computed before the others); a block's error raised from the pass; a bad
``PYMC_SUBSAMPLE_THREADS`` refused."""

from __future__ import annotations

import threading

import numpy as np
import pymc as pm
import pytest

import pymc_subsample as pms
from pymc_subsample.datasets import glm_data, glm_model
from pymc_subsample.model.cluster import THREADS_VARIABLE, pass_threads
from pymc_subsample.model.likelihood import SETUP_CHUNK_ROWS, SubsampledLikelihood
from pymc_subsample.model.passes import GenericPass, GLMPass
from pymc_subsample.model.row_sources import ArraySource

#: four blocks of a pass, the last one short
N, D = 3 * SETUP_CHUNK_ROWS + 1234, 3


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    X, y = glm_data(N, D, "logistic", seed=7)
    folder = tmp_path_factory.mktemp("threads")
    np.save(folder / "X.npy", X)
    np.save(folder / "y.npy", y)
    return X, y, folder


def _model(data, source: str):
    X, y, folder = data
    if source == "memory":
        return glm_model(X, y, "logistic")
    if source == "product":  # a predictor quadratic in θ: its curvature in the constants
        return glm_model(X, y, "logistic_product")
    return glm_model(str(folder / "X.npy"), str(folder / "y.npy"), "logistic", tall=True)


def _on(monkeypatch, threads: int) -> None:
    monkeypatch.setenv(THREADS_VARIABLE, str(threads))


@pytest.mark.parametrize(("kind", "source"), [("glm", "memory"), ("glm", "npy"),
                                             ("glm", "product"), ("generic", "memory"),
                                             ("generic", "npy")])
def test_one_thread_and_two_give_the_same_sums(kind, source, data, monkeypatch):
    lik = SubsampledLikelihood(_model(data, source))
    data_pass = GLMPass(lik) if kind == "glm" else GenericPass(lik)
    theta = np.array([0.2, -0.4, 0.1])
    # GLM passes: Corollary 2's constants, whitened by a fixed L, in the same pass
    kwargs = ({"order": 2, "whiten_rows": lambda x: x @ np.diag([0.5, 1.0, 2.0])}
              if kind == "glm" else {})
    names, readers = set(), set()
    block = type(data_pass).block
    monkeypatch.setattr(type(data_pass), "block", lambda self, *a: names.add(
        threading.current_thread().name) or block(self, *a))
    # a file's next blocks are read ahead on a thread of their own
    read_block = ArraySource.read_block
    monkeypatch.setattr(ArraySource, "read_block", lambda self, idx: readers.add(
        threading.current_thread().name) or read_block(self, idx))
    results = {}
    for threads in (1, 2):
        _on(monkeypatch, threads)
        names.clear()
        results[threads] = data_pass.full(theta, **kwargs)
        on_threads = {n.startswith("pms-pass") for n in names}
        assert on_threads == {threads > 1}, names
        assert {n.startswith("pms-read") for n in readers} == ({True} if source == "npy"
                                                              else set())
        readers.clear()
    one, two = results[1], results[2]
    assert one.loglik == two.loglik
    np.testing.assert_array_equal(one.grad, two.grad)
    np.testing.assert_array_equal(one.hess, two.hess)
    if kind == "glm":
        assert one.row_constants.shape == (N,)
        np.testing.assert_array_equal(one.row_constants, two.row_constants)
    # the sums are the sums: against the rows all at once
    X, y, _ = data
    eta = X @ theta + (theta[1] * theta[2] * X[:, 1] * X[:, 2] if source == "product" else 0.0)
    exact = float(np.sum(y * eta - np.logaddexp(0.0, eta)))
    assert one.loglik == pytest.approx(exact, rel=1e-12)
    assert data_pass.n_passes == 2

    # a subsample pass (rows in memory or memory-mapped): its chunks on threads too
    rows = np.sort(np.random.default_rng(1).choice(N, 30_000, replace=False))
    subsample = {}
    for threads in (1, 2):
        _on(monkeypatch, threads)
        names.clear()
        subsample[threads] = data_pass.full(theta, idx_chunks=np.array_split(rows, 3),
                                            weight=N / rows.size)
        assert {n.startswith("pms-pass") for n in names} == {threads > 1}, names
    assert subsample[1].loglik == subsample[2].loglik
    np.testing.assert_array_equal(subsample[1].hess, subsample[2].hess)
    assert data_pass.n_passes == 2


def test_same_seed_same_step_and_draws_on_one_thread_and_two(data, monkeypatch):
    """The whole MHSS setup (reference point, control variates, row constants) and the draws
    that follow do not depend on the number of threads."""
    draws, steps = {}, {}
    for threads in (1, 2):
        _on(monkeypatch, threads)
        with _model(data, "memory"):
            step = pms.MHSS(progressbar=False)
            idata = pm.sample(60, tune=60, chains=1, cores=1, step=step, random_seed=3,
                              progressbar=False, compute_convergence_checks=False)
        draws[threads], steps[threads] = idata.posterior["b"].values, step
    np.testing.assert_array_equal(steps[1].theta_hat, steps[2].theta_hat)
    np.testing.assert_array_equal(steps[1].setup.reference.row_constants,
                                  steps[2].setup.reference.row_constants)
    np.testing.assert_array_equal(draws[1], draws[2])


class _FailingPass:
    """A pass whose third block fails, to see its error come out of the pass."""

    def __init__(self, lik):
        self.lik = lik

    def thread_copy(self):
        return _FailingPass(self.lik)

    def block(self, chunk):
        if chunk[0] == 2 * SETUP_CHUNK_ROWS:
            raise ZeroDivisionError("block 3")
        return chunk.size


@pytest.mark.parametrize(("chunk_rows", "readers"), [(SETUP_CHUNK_ROWS // 4, 2),
                                                     (SETUP_CHUNK_ROWS // 3, 1)])
def test_a_zarr_pass_reads_its_blocks_on_as_many_threads_each_chunk_once(
        data, tmp_path, monkeypatch, chunk_rows, readers):
    """From Zarr, two threads read the blocks ahead on two reader threads where the store's
    chunks tile the blocks (decoding costs as much as the arithmetic), on one where a chunk
    holds rows of two blocks (kept from one block's read for the next); every chunk is read
    once, and the sums are one thread's to the last bit."""
    zarr = pytest.importorskip("zarr")
    from pymc_subsample.model.row_sources import ZarrSource

    X, y, _ = data
    stores = []
    for name, values in (("X", X), ("y", y)):
        store = zarr.open_array(tmp_path / f"{name}.zarr", mode="w", shape=values.shape,
                                dtype=values.dtype, chunks=(chunk_rows, *values.shape[1:]))
        store[:] = values
        stores.append(store)
    lik = SubsampledLikelihood(glm_model(*stores, "logistic", tall=True))
    data_pass = GLMPass(lik)
    reads, readers_seen = [], set()
    read_chunks = ZarrSource._read_chunks

    def counted(self, first, stop):
        readers_seen.add(threading.current_thread().name)
        reads.extend((self.n_rows, self.shape[1:], k) for k in range(first, stop))
        return read_chunks(self, first, stop)

    monkeypatch.setattr(ZarrSource, "_read_chunks", counted)
    theta = np.array([0.2, -0.4, 0.1])
    sums = {}
    for threads in (1, 2):
        _on(monkeypatch, threads)
        reads.clear(), readers_seen.clear()
        sums[threads] = data_pass.full(theta)
        assert len(reads) == len(set(reads)) == 2 * -(-N // chunk_rows)  # X's and y's
        assert all(n.startswith("pms-read") for n in readers_seen)
        assert len(readers_seen) == (readers if threads == 2 else 1), readers_seen
    assert sums[1].loglik == sums[2].loglik
    np.testing.assert_array_equal(sums[1].hess, sums[2].hess)


def test_an_error_in_a_block_is_raised_from_the_pass(data, monkeypatch):
    _on(monkeypatch, 2)
    lik = SubsampledLikelihood(_model(data, "memory"))
    with pytest.raises(ZeroDivisionError, match="block 3"):
        sum(size for _, size in lik.map_row_blocks(_FailingPass(lik)))


class _ThreadRecordingPass:
    """A pass that records the thread each block ran on."""

    def __init__(self, lik, seen):
        self.lik, self.seen = lik, seen

    def thread_copy(self):
        return _ThreadRecordingPass(self.lik, self.seen)

    def block(self, chunk):
        self.seen.append((int(chunk[0]), threading.get_ident()))
        return chunk.size


@pytest.mark.parametrize("subsample", [False, True])
def test_a_pass_with_its_first_block_alone(data, monkeypatch, subsample):
    """``first_alone`` (an automatic bound's cell grid is made on the first block): that
    block on the calling thread before any other starts, the others on the pass's threads."""
    _on(monkeypatch, 2)
    lik = SubsampledLikelihood(_model(data, "memory"))
    chunks = list(lik.row_chunks()) if subsample else None
    for first_alone in (True, False):
        seen: list[tuple[int, int]] = []
        total = sum(size for _, size in lik.map_row_blocks(
            _ThreadRecordingPass(lik, seen), chunks=chunks, first_alone=first_alone))
        assert total == N and len(seen) == -(-N // SETUP_CHUNK_ROWS)
        on_threads = {ident for _, ident in (seen[1:] if first_alone else seen)}
        assert threading.get_ident() not in on_threads
        if first_alone:
            assert seen[0] == (0, threading.get_ident())


def test_cell_suprema_do_not_depend_on_the_order_of_the_blocks(monkeypatch):
    """An automatic bound's blocks after the first (which made the cell grid) give the same
    suprema to the last bit in any order: a block's choice of cells or its rows' own boxes
    depends on its own rows only. Here block 3 meets more cells than half its rows, most of
    them made by block 1 when it runs first (counting only the cells still to make, block 3
    took the cells after block 1 and its own boxes before it)."""
    import pytensor.tensor as pt

    from pymc_subsample.bounds import automatic
    from pymc_subsample.bounds.automatic import AutomaticFamily

    monkeypatch.setattr(automatic, "GROUP_MIN_ROWS", 1_000)
    p, y = pt.vector("p", dtype="float64"), pt.vector("y", dtype="int64")
    auto = AutomaticFamily(y * p - pt.exp(p) - pt.gammaln(y + 1), [p], [y], "poisson", "")
    rng = np.random.default_rng(1)
    rows = 8_000
    hats = rng.choice(np.linspace(-1.0, 1.0, 50), 4 * rows)
    ys = rng.integers(0, 6, 4 * rows)
    apart = 1.5 + 0.01 * np.arange(1_100)  # rows of cells of their own
    hats[rows : rows + 600] = apart[:600]
    hats[3 * rows : 3 * rows + 1_100] = apart
    norms = np.full(4 * rows, 2e-4)
    blocks = np.array_split(np.arange(4 * rows), 4)
    suprema = []
    for order in ([0, 1, 2, 3], [0, 3, 2, 1]):
        auto._cells.grids.clear()  # a new pass
        by_block = {}
        for k in order:
            at = blocks[k]
            by_block[k] = auto.all_suprema(1, (norms[at],), ys[at], (hats[at],), 5.0,
                                           (ys[at],))
        suprema.append(by_block)
    assert any(g is not None and g.n_cells for g in auto._cells.grids.values())
    for k in range(4):
        for alpha, s_alpha in suprema[0][k].items():
            np.testing.assert_array_equal(s_alpha, suprema[1][k][alpha])


def test_automatic_bounds_same_draws_on_one_thread_and_two(monkeypatch):
    """An automatic bound's row constants (its cell grid made from the first block, the
    other blocks on the pass's threads in any order) and a seeded run's draws do not depend
    on the threads: a zero-inflated negative binomial."""
    from tests.row_models import zero_inflated_negative_binomial

    constants, draws = [], []
    for threads in (1, 2):
        _on(monkeypatch, threads)
        with zero_inflated_negative_binomial(N):
            step = pms.MHSS(progressbar=False)
            idata = pm.sample(40, tune=40, chains=1, cores=1, step=step, random_seed=5,
                              progressbar=False, compute_convergence_checks=False)
        assert not step._reference_pass.speculative_constants
        constants.append(step.row_constants)
        draws.append(np.concatenate([idata.posterior[v].values.ravel()
                                     for v in ("b", "psi", "alpha")]))
    np.testing.assert_array_equal(constants[0], constants[1])
    np.testing.assert_array_equal(draws[0], draws[1])


def test_the_threads_setting(monkeypatch):
    monkeypatch.delenv(THREADS_VARIABLE, raising=False)
    assert pass_threads() >= 1
    _on(monkeypatch, 3)
    assert pass_threads() == 3
    for bad in ("0", "two", "-1", "1.5"):
        monkeypatch.setenv(THREADS_VARIABLE, bad)
        with pytest.raises(ValueError, match=THREADS_VARIABLE):
            pass_threads()
