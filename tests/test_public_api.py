"""The public API: ``pymc_subsample.__all__``, the import paths users are shown, and every
``pymc_subsample.…`` name and ``pymc_subsample/…`` file the README and ``docs/`` mention.

:data:`PUBLIC` is frozen: it lists what the README, the getting-started pages, the API pages of
the steps and the comparison, and the examples import, as they stood before the package was
arranged in layers (issue 32), and must keep working. The names the docs mention are read from
the docs themselves, so a moved module whose docs were not updated fails here.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

import pymc_subsample

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

ALL = ["MHSS", "AusterityMH", "BarkerMinibatch", "Comparison", "Data", "SubsampledLikelihood",
       "SubsamplingModelError", "SubsamplingStep", "UserBound", "compare", "to_inference_data"]

PUBLIC = [
    *(f"pymc_subsample.{name}" for name in ALL),
    *(f"pymc_subsample.steps.{name}"
      for name in ("MHSS", "AusterityMH", "BarkerMinibatch", "SubsamplingStep", "UserBound")),
    "pymc_subsample.steps.mhss.MHSS",
    "pymc_subsample.steps.mhss.UserBound",
    "pymc_subsample.steps.austerity.AusterityMH",
    "pymc_subsample.steps.barker.BarkerMinibatch",
    "pymc_subsample.steps.base.SubsamplingStep",
    "pymc_subsample.compare.compare",
    "pymc_subsample.compare.Comparison",
    "pymc_subsample.compare.summarise_run",
    "pymc_subsample.compare.mcse_distance",
    "pymc_subsample.demo.main",
    "pymc_subsample.demo.nuts_budget",
    "pymc_subsample.errors.SubsamplingModelError",
    *(f"pymc_subsample.datasets.{name}"
      for name in ("glm_data", "glm_model", "write_glm_npy", "random_effects_data",
                   "random_effects_model", "flights_data", "birthdays_data", "gmm_data",
                   "gmm_model", "ill_conditioned_data", "FAMILIES")),
]


def resolve(dotted: str):
    """The object a dotted path names: the longest importable module prefix, then
    attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        # this checkout's module, not one an editable install of another checkout supplies
        assert Path(obj.__file__).resolve().is_relative_to(ROOT), obj.__file__
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(dotted)


def documented_paths() -> list[str]:
    """Every dotted ``pymc_subsample.…`` name and ``from pymc_subsample… import a, b`` in
    the README and ``docs/``."""
    found = set()
    for path in DOCS:
        text = path.read_text()
        found.update(m.rstrip(".") for m in re.findall(r"pymc_subsample(?:\.\w+)+", text))
        for module, names in re.findall(r"from (pymc_subsample[\w.]*) import ([\w, ]+)", text):
            found.update(f"{module}.{name.strip()}" for name in names.split(",") if name.strip())
    return sorted(found)


def documented_files() -> list[str]:
    """Every ``pymc_subsample/…`` file or folder the README and ``docs/`` name."""
    found = set()
    for path in DOCS:
        found.update(re.findall(r"pymc_subsample/[\w/]*(?:\.py)?", path.read_text()))
    return sorted(found)


def test_all_unchanged():
    assert sorted(pymc_subsample.__all__) == sorted(ALL)
    for name in ALL:
        assert getattr(pymc_subsample, name) is not None


@pytest.mark.parametrize("dotted", PUBLIC)
def test_public_path_importable(dotted):
    resolve(dotted)


@pytest.mark.parametrize("dotted", documented_paths())
def test_documented_path_importable(dotted):
    resolve(dotted)


@pytest.mark.parametrize("name", documented_files())
def test_documented_file_exists(name):
    assert (ROOT / name).exists(), name
