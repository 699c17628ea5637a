"""The import-linter contracts in ``pyproject.toml`` hold for the package, and a wrong import
breaks them: checked on a copy of the package in a temporary folder, with ``import pymc`` added
to a kernel (the forbidden contract) or ``bounds`` importing ``steps`` (an upward import, the
layers contract)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))

pytestmark = pytest.mark.skipif(not Path(LINT).exists(), reason="import-linter not installed")


def lint(tree: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(tree))
    return subprocess.run([LINT, "--config", str(tree / "pyproject.toml"), "--no-cache"],
                          cwd=tree, env=env, capture_output=True, text=True, timeout=300)


def copy_tree(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "pymc_subsample", tmp_path / "pymc_subsample",
                    ignore=shutil.ignore_patterns("__pycache__", "*.npz"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def add_import(module: Path, line: str) -> None:
    module.write_text(f"{module.read_text()}\n{line}  # noqa\n")


def test_package_keeps_its_contracts(tmp_path):
    result = lint(copy_tree(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 kept, 0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        ("kernels/mhss.py", "import pymc", "kernels are NumPy/SciPy only"),
        ("kernels/indexing.py", "import pytensor.tensor", "kernels are NumPy/SciPy only"),
        ("bounds/levels.py", "import pymc_subsample.steps.base", "layers"),
        ("model/frame.py", "from pymc_subsample.steps import MHSS", "layers"),
    ],
)
def test_wrong_import_breaks_a_contract(tmp_path, module, line, contract):
    tree = copy_tree(tmp_path)
    add_import(tree / "pymc_subsample" / module, line)
    result = lint(tree)
    assert result.returncode != 0, result.stdout
    assert f"{contract}" in result.stdout and "BROKEN" in result.stdout, result.stdout
