"""Setup functions that skip C compilation (issue 29, cold start): the data passes and the
prior's gradient run as NumPy calls up to NUMPY_PASS_ROWS rows (a GLM's pass whatever N:
issue 31, its threads), give the same values as the compiled C functions, and pickle (spawned
workers, Dask clusters); the NumPy mode's row gathering and matrix–vector ops are NumPy's
indexing and product."""

import cloudpickle
import numpy as np
import pymc as pm
import pytest
from pytensor.tensor.elemwise import Elemwise

from pymc_subsample.model import likelihood as likelihood_module
from pymc_subsample.model.likelihood import SubsampledLikelihood
from pymc_subsample.model.passes import GLMPass


def _model(n=3000, normal=True):
    """A logistic regression (a GLM), with a Normal of sampled σ beside it (no GLM) or not."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((n, 3))
    with pm.Model() as m:
        b = pm.Normal("b", 0, 2, shape=3)
        s = pm.HalfNormal("s", 1.0)
        pm.Bernoulli("y", logit_p=pm.Data("X", x) @ b, observed=rng.random(n) < 0.4)
        if normal:
            pm.Normal("z", mu=pm.Data("X2", x) @ b, sigma=s, observed=rng.standard_normal(n))
    return m


def _uses_c(fn) -> bool:
    fn = getattr(fn, "fn", fn)
    return bool(getattr(fn.maker.linker, "c_thunks", True))


@pytest.mark.parametrize("glm", [True, False])
def test_passes_run_in_numpy_and_match_the_compiled_ones(monkeypatch, glm):
    from pymc_subsample.model.passes import GenericPass

    make = GLMPass if glm else GenericPass
    model = _model(normal=not glm)
    numpy_lik = SubsampledLikelihood(model)
    numpy_pass = make(numpy_lik)
    fn = getattr(numpy_pass._fn, "fn", numpy_pass._fn)
    assert not _uses_c(fn)
    assert all(node.op.nfunc_spec is not None for node in fn.maker.fgraph.apply_nodes
               if isinstance(node.op, Elemwise))
    monkeypatch.setattr(likelihood_module, "NUMPY_PASS_ROWS", 0)
    monkeypatch.setattr(GLMPass, "gil_free_pass", False)
    c_lik = SubsampledLikelihood(model)
    c_pass = make(c_lik)
    assert _uses_c(c_pass._fn)
    theta = np.random.default_rng(5).normal(size=numpy_lik.dim) * 0.3
    ours, ref = numpy_pass.full(theta), c_pass.full(theta)
    np.testing.assert_allclose(ours.loglik, ref.loglik, rtol=1e-12)
    np.testing.assert_allclose(ours.grad, ref.grad, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(ours.hess, ref.hess, rtol=1e-8, atol=1e-8)
    v, g = numpy_lik.logp0_and_grad(theta)
    v_c, g_c = c_lik.logp0_and_grad(theta)
    assert v == pytest.approx(v_c, rel=1e-12)
    np.testing.assert_allclose(g, g_c, rtol=1e-12)
    # per-iteration functions are C whatever N
    assert _uses_c(numpy_lik._logp0_fn)


def test_numpy_mode_functions_pickle():
    lik = SubsampledLikelihood(_model(500, normal=False))
    data_pass = GLMPass(lik)
    theta = np.zeros(lik.dim)
    again = cloudpickle.loads(cloudpickle.dumps(data_pass))
    assert again.full(theta).loglik == pytest.approx(data_pass.full(theta).loglik, rel=1e-14)


def test_fill_is_rewritten_for_any_broadcast():
    """``second(x, y)`` with ``y`` wider than ``x`` (a hurdle's gradient): the NumPy form has
    the shape of both, and the rewrite does not fail (PyTensor would log it and keep the op)."""
    import pytensor
    import pytensor.tensor as pt
    from pytensor.tensor.basic import second

    from pymc_subsample.model.likelihood import _NUMPY_MODE

    x = pt.matrix("x", shape=(None, 1))
    y = pt.constant(np.array([[0.0, 0.0, 0.0, 1.0]]))
    fn = pytensor.function([x], second(x, y), mode=_NUMPY_MODE)
    assert not any(isinstance(n.op, Elemwise) for n in fn.maker.fgraph.apply_nodes)
    np.testing.assert_array_equal(fn(np.ones((3, 1))), np.tile([0.0, 0.0, 0.0, 1.0], (3, 1)))


def test_prior_runs_as_ufunc_calls_and_matches_the_compiled_one():
    """The per-iteration log p0 runs as direct ufunc calls (no C code), equal to the compiled
    function at random points (log transforms, a Gamma's shape, an int8 constant), pickles,
    and falls back to C for an op without a ufunc."""
    import pickle

    import pytensor.tensor as pt

    from pymc_subsample.model.ufunc_linker import UfuncLinker

    rng = np.random.default_rng(2)
    x = rng.standard_normal((200, 3))
    with pm.Model() as model:
        b = pm.Normal("b", 0, 2, shape=3)
        s = pm.HalfNormal("s", 1.0)
        nu = pm.Gamma("nu", 2.0, 0.1)
        pm.Potential("shrink", -pt.sum(b**2) * pt.constant(np.int8(3)) / nu)
        pm.StudentT("y", nu=nu, mu=pm.Data("X", x) @ b, sigma=s, observed=x[:, 0])
    lik = SubsampledLikelihood(model)
    assert isinstance(lik._logp0_fn.maker.linker, UfuncLinker)
    compiled = lik.compile([lik.theta], lik.logp0_graph)
    for theta in rng.normal(size=(5, lik.dim)):
        assert lik.logp0(theta) == pytest.approx(float(compiled(theta)), rel=1e-12)
    theta = rng.normal(size=lik.dim)
    assert float(pickle.loads(pickle.dumps(lik._logp0_fn))(theta)) == lik.logp0(theta)
    # log1mexp has no NumPy ufunc: compiled to C, not evaluated element by element
    fallback = lik.compile([lik.theta], pt.sum(pt.log1mexp(-pt.exp(lik.theta))), ufuncs=True)
    assert not isinstance(fallback.maker.linker, UfuncLinker)


def test_the_family_check_is_numpy_calls_beside_a_compiled_pass(monkeypatch):
    """The model's own row terms, compared with the family's on the rows a pass checks, are a
    function of their own in NumPy calls (they release the GIL) even where the pass itself is
    compiled to C; its sums are the family's, and a disagreement is refused."""
    from pymc_subsample.errors import SubsamplingModelError

    monkeypatch.setattr(likelihood_module, "NUMPY_PASS_ROWS", 0)
    monkeypatch.setattr(GLMPass, "gil_free_pass", False)  # a family whose pass is C code
    lik = SubsampledLikelihood(_model(3000, normal=False))
    data_pass = GLMPass(lik)
    assert _uses_c(data_pass._fn)
    assert not _uses_c(data_pass._check_fn)
    theta = np.random.default_rng(5).normal(size=lik.dim) * 0.3
    idx = np.arange(100, 2100, dtype=np.int64)
    (model_sum,) = data_pass._check_fn(theta, idx)
    family_sum, _ = data_pass.rows(theta, idx, check=True)
    assert float(model_sum) == pytest.approx(family_sum, rel=1e-12)
    copy = data_pass.thread_copy()
    assert copy._check_fn is not data_pass._check_fn
    assert float(copy._check_fn(theta, idx)[0]) == float(model_sum)
    check_fn = data_pass._check_fn
    monkeypatch.setattr(data_pass, "_check_fn", lambda th, rows: [check_fn(th, rows)[0] + 1.0])
    with pytest.raises(SubsamplingModelError, match="'y' was read as a GLM"):
        data_pass.rows(theta, idx, check=True)
    data_pass.rows(theta, idx, check=False)  # no check, no comparison


def test_the_family_check_reads_each_row_once(monkeypatch):
    """A list of subsample rows is checked the first time a pass reads it (the reference
    fit's Newton steps read the same list at each step), all rows on the first full pass,
    then nothing."""
    monkeypatch.setenv("PYMC_SUBSAMPLE_THREADS", "1")
    lik = SubsampledLikelihood(_model(3000, normal=False))
    data_pass = GLMPass(lik)
    checked, check_fn = [], data_pass._check_fn

    def counted(theta, rows):
        checked.append(rows.size)
        return check_fn(theta, rows)

    data_pass._check_fn = counted
    theta = np.zeros(lik.dim)
    chunks = [np.arange(0, 500), np.arange(700, 1200)]
    data_pass.full(theta, idx_chunks=chunks)
    data_pass.full(theta + 0.1, idx_chunks=chunks)
    assert checked == [500, 500]
    data_pass.full(theta, idx_chunks=[np.arange(0, 100)])
    assert checked == [500, 500, 100]
    data_pass.full(theta)
    assert sum(checked[3:]) == lik.n_rows
    data_pass.full(theta)
    data_pass.full(theta, idx_chunks=chunks)
    assert sum(checked) == 1100 + lik.n_rows


def test_a_glm_pass_runs_in_numpy_whatever_n(monkeypatch):
    """Above NUMPY_PASS_ROWS too, with its rows gathered by TakeRows and η = Xθ by MatVec."""
    from pymc_subsample.model.numpy_pass_ops import MatVec, TakeRows

    monkeypatch.setattr(likelihood_module, "NUMPY_PASS_ROWS", 0)
    data_pass = GLMPass(SubsampledLikelihood(_model(normal=False)))
    fn = getattr(data_pass._fn, "fn", data_pass._fn)
    assert not _uses_c(fn)
    ops = {type(node.op) for node in fn.maker.fgraph.apply_nodes}
    assert {TakeRows, MatVec} <= ops


@pytest.mark.parametrize("idx", [
    np.arange(5, 25), np.arange(0, 40), np.array([7]), np.array([], dtype=np.int64),
    np.array([3, 4, 6, 7]), np.array([3, 2, 1]), np.array([-3, -2, -1]), np.array([-1, 0]),
    np.array([38, 39, 40]), np.array([5, 5, 6]), np.array([4, 6, 6]),
])
def test_take_rows_and_mat_vec_are_numpys(idx):
    """Consecutive blocks, gaps, repeats, reversed and negative indices: the same rows (a new
    array, never a view), and out-of-range indices raise as NumPy's indexing does."""
    import pytensor
    import pytensor.tensor as pt

    from pymc_subsample.model.likelihood import _NUMPY_MODE
    from pymc_subsample.model.numpy_pass_ops import MatVec, TakeRows

    x = np.random.default_rng(1).normal(size=(40, 3))
    theta = np.array([0.5, -1.0, 2.0])
    xs, rows, th = pt.matrix("x"), pt.vector("idx", dtype="int64"), pt.vector("theta")
    fn = pytensor.function([xs, rows, th], [xs[rows], xs[rows] @ th], mode=_NUMPY_MODE)
    assert {TakeRows, MatVec} <= {type(node.op) for node in fn.maker.fgraph.apply_nodes}
    idx = idx.astype(np.int64)
    if idx.size and (idx.max() >= len(x) or idx.min() < -len(x)):
        with pytest.raises(IndexError):
            fn(x, idx, theta)
        return
    taken, product = fn(x, idx, theta)
    np.testing.assert_array_equal(taken, x[idx])
    assert not np.shares_memory(taken, x)
    np.testing.assert_allclose(product, x[idx] @ theta, rtol=1e-15, atol=1e-15)
