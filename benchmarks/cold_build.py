"""Which C modules PyTensor compiles while MHSS is built and while it samples its first draws.

Builds ``pms.MHSS()`` on the demo's model (a logistic regression, 10⁵ × 10) or on a Student-t
regression with sampled ν, then runs ``pm.sample`` for 20 + 20 draws, and lists every call of
PyTensor's C compiler with its seconds, the phase (build or sampling), the function of the
package that asked for it and the op classes in the module. Run it with an empty compile
directory to see a first run's compiling (a warm cache compiles nothing):

    PYTENSOR_FLAGS="base_compiledir=$(mktemp -d)" python benchmarks/cold_build.py
    PYTENSOR_FLAGS="base_compiledir=$(mktemp -d)" python benchmarks/cold_build.py \\
        --model student_t_nu --rows 1e6
"""

from __future__ import annotations

import argparse
import logging
import re
import time
import traceback

import pytensor.link.c.cmodule as cmodule

_calls: list[tuple[float, str, str]] = []
_compile_str = cmodule.GCC_compiler.compile_str


def _timed_compile_str(module_name, src_code, *args, **kwargs):
    """PyTensor's compiler call, timed and attributed to the package function that asked."""
    start = time.perf_counter()
    out = _compile_str(module_name, src_code, *args, **kwargs)
    ours = [f.name for f in traceback.extract_stack() if "pymc_subsample" in f.filename]
    ops = ",".join(sorted(set(re.findall(r"Op class (\w+)", src_code)))) or module_name[:16]
    _calls.append((time.perf_counter() - start, ours[-1] if ours else "(PyMC)", ops))
    return out


cmodule.GCC_compiler.compile_str = staticmethod(_timed_compile_str)


def _model(name: str, rows: int):
    import numpy as np
    import pymc as pm

    from pymc_subsample.datasets import glm_data, glm_model

    if name == "logistic":
        return glm_model(*glm_data(rows, 10, "logistic", seed=0), "logistic")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, 10))
    y = x @ (0.3 * rng.standard_normal(10)) + rng.standard_t(4, rows)
    with pm.Model() as model:
        b = pm.Normal("b", 0, 10, shape=10)
        sigma = pm.HalfNormal("sigma", 2)
        nu = pm.Gamma("nu", 2, 0.1)
        pm.StudentT("y", nu=nu, mu=pm.Data("X", x) @ b, sigma=sigma, observed=y)
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("logistic", "student_t_nu"), default="logistic")
    parser.add_argument("--rows", type=float, default=1e5)
    args = parser.parse_args()
    import pymc as pm

    import pymc_subsample as pms

    logging.getLogger("pymc").setLevel(logging.ERROR)
    with _model(args.model, int(args.rows)):
        start = time.perf_counter()
        step = pms.MHSS(progressbar=False)
        built = time.perf_counter() - start
        n_build = len(_calls)
        start = time.perf_counter()
        pm.sample(20, tune=20, chains=1, step=step, progressbar=False, random_seed=1,
                  compute_convergence_checks=False)
        sampled = time.perf_counter() - start
    print(f"built in {built:.2f} s, 20 + 20 draws in {sampled:.2f} s")
    for i, (seconds, asker, ops) in enumerate(_calls):
        print(f"{'build' if i < n_build else 'sample':6s} {seconds:6.2f} s  {asker:24s} {ops}")
    print(f"C compiler: {len(_calls)} calls, {sum(c[0] for c in _calls):.2f} s")


if __name__ == "__main__":
    main()
