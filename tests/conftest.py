"""Shared fixtures; the data generators and models live in :mod:`pymc_subsample.datasets`."""

from __future__ import annotations

import logging
import os
import re
import warnings


def _test_compile_flags() -> None:
    """PyTensor flags for the test run; must run before PyTensor is imported.

    The tests compile into their own directories, one per pytest-xdist worker: PyTensor
    holds one lock per directory while it compiles a C module, so two workers sharing a cold
    cache compile one after the other; with a directory each, the two cores compile at once.

    Flags the caller set in ``PYTENSOR_FLAGS`` are kept.
    """
    # xdist workers inherit the controller's environment: start from the caller's flags
    flags = os.environ.setdefault("PYMC_SUBSAMPLE_CALLER_PYTENSOR_FLAGS",
                                  os.environ.get("PYTENSOR_FLAGS", ""))
    extra = []
    suffix = f"tests-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}"
    match = re.search(r"(?:^|,)compiledir=([^,]*)", flags)
    if match:
        flags = flags.replace(match.group(0), f"{match.group(0)}/{suffix}", 1)
    else:
        default = ("compiledir_%(short_platform)s-%(processor)s-%(python_version)s-"
                   "%(python_bitwidth)s")
        extra.append(f"compiledir_format={default}-{suffix}")
    os.environ["PYTENSOR_FLAGS"] = ",".join(f for f in (flags, *extra) if f)


_test_compile_flags()


import pytest  # noqa: E402

from pymc_subsample.datasets import glm_data, glm_model  # noqa: E402

logging.getLogger("pymc").setLevel(logging.ERROR)
warnings.filterwarnings("ignore", message=".*BLAS.*")


@pytest.fixture(scope="session")
def logistic_small():
    X, y = glm_data(2000, 3, "logistic", seed=1)
    return X, y, glm_model(X, y, "logistic")
