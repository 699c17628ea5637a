"""Facts that the README and the docs state once, checked against each other and the code.

The README is the source of the install commands (its Quick start), of the families MHSS bounds
by itself (a table generated from the package's registry), of the sampler statistics and of
what :func:`pymc_subsample.compare` runs; the docs pages include those README sections with
``pymdownx.snippets`` (``--8<-- "README.md:section"``), and the tests below fail when a page
states one of them differently.

Regenerate the README's families table after adding a family::

    PYTHONPATH=. python -m tests.test_docs_facts --write
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from pymc_subsample.bounds import location_scale_families, registered
from pymc_subsample.bounds.automatic import AUTOMATIC_FAMILIES
from pymc_subsample.steps import MHSS, AusterityMH, BarkerMinibatch

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
STEPS = {"MHSS": MHSS, "AusterityMH": AusterityMH, "BarkerMinibatch": BarkerMinibatch}

_INCLUDE = re.compile(r'^\s*--8<--\s+"(?P<file>[^":]+)(?::(?P<section>[-_0-9a-z]+))?"\s*$')
_MARKER = re.compile(r"--8<--\s*\[\s*(?P<kind>start|end)\s*:\s*(?P<name>[-_0-9a-z]+)\s*\]")
_EDITABLE = re.compile(r'pip install -e "\.\[(?P<extras>[^\]]*)\]"')
_PACKAGE = re.compile(r'pip install "pymc-subsample\[(?P<extras>[^\]]*)\]"')


def section(path: Path, name: str) -> str:
    """The lines of ``path`` between its ``--8<-- [start:name]`` and ``[end:name]`` markers."""
    lines = path.read_text(encoding="utf-8").splitlines()
    starts = [i for i, line in enumerate(lines)
              if (m := _MARKER.search(line)) and m["kind"] == "start" and m["name"] == name]
    ends = [i for i, line in enumerate(lines)
            if (m := _MARKER.search(line)) and m["kind"] == "end" and m["name"] == name]
    assert len(starts) == 1 and len(ends) == 1 and starts[0] < ends[0], (
        f"{path.name} needs one [start:{name}] and one [end:{name}] marker, in that order")
    return "\n".join(line for line in lines[starts[0] + 1:ends[0]] if not _MARKER.search(line))


def resolved(path: Path) -> str:
    """A docs page as mkdocs renders its text: snippet includes replaced by what they include."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        m = _INCLUDE.match(line)
        if m is None:
            out.append(line)
            continue
        source = ROOT / m["file"]
        assert source.is_file(), f"{path}: {line.strip()} includes a missing file"
        out.append(section(source, m["section"]) if m["section"]
                   else source.read_text(encoding="utf-8"))
    return "\n".join(out)


def includes(path: Path) -> set[str]:
    """The ``file:section`` includes of a docs page."""
    return {f"{m['file']}:{m['section']}" for line in path.read_text(encoding="utf-8").splitlines()
            if (m := _INCLUDE.match(line))}


def doc_pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def _extras(text: str) -> frozenset[str]:
    return frozenset(e.strip() for e in text.split(",") if e.strip())


# -- install commands ----------------------------------------------------------------------


def quick_start_extras() -> set[frozenset[str]]:
    found = {_extras(m["extras"]) for m in _EDITABLE.finditer(section(README, "quickstart"))}
    assert len(found) == 2, "the README's Quick start installs the package twice"
    return found


def defined_extras() -> set[str]:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return set(pyproject["project"]["optional-dependencies"])


def test_quick_start_extras_exist():
    for extras in quick_start_extras():
        assert extras <= defined_extras()


@pytest.mark.parametrize("page", doc_pages(), ids=lambda p: str(p.relative_to(DOCS)))
def test_docs_install_commands_are_the_readme_quick_start(page):
    """Every ``pip install -e ".[...]"`` a page shows (its includes resolved) installs one of
    the Quick start's two extras sets; ``pip install "pymc-subsample[x]"`` names real extras."""
    text = resolved(page)
    allowed = quick_start_extras()
    for m in _EDITABLE.finditer(text):
        assert _extras(m["extras"]) in allowed, (
            f"{page.relative_to(ROOT)}: {m[0]!r} is not one of the README's Quick start "
            f"commands ({sorted(map(sorted, allowed))}); include README.md:quickstart instead")
    for m in _PACKAGE.finditer(text):
        assert _extras(m["extras"]) <= defined_extras(), f"{page}: {m[0]!r}"
    source = page.read_text(encoding="utf-8")
    assert not _EDITABLE.search(source), (
        f"{page.relative_to(ROOT)} writes an install command of its own: include "
        '--8<-- "README.md:quickstart" instead')


@pytest.mark.parametrize("page", ["index.md", "getting-started.md"])
def test_install_pages_include_the_quick_start(page):
    assert "README.md:quickstart" in includes(DOCS / page)


def test_readme_install_lines():
    """Outside the Quick start the README installs the package from a clone only for
    development, with every extra."""
    quick = section(README, "quickstart")
    rest = README.read_text(encoding="utf-8").replace(quick, "")
    for m in _EDITABLE.finditer(rest):
        assert _extras(m["extras"]) == defined_extras(), m[0]


# -- families ------------------------------------------------------------------------------


def families_table() -> str:
    """The README's families table, from the registry (``bounds.registered()`` and
    ``bounds.location_scale_families()``)."""
    rows = ["| family | written in PyMC as (η affine in the parameters) | bound | holds |",
            "|---|---|---|---|"]
    for fam in (*registered(), *location_scale_families()):
        # two-predictor (sampled scale, shape, dispersion or ν) families are all region-valid
        where = "on a region" if getattr(fam, "region_only", True) else "everywhere"
        written = re.sub(r"\beta\b", "η", fam.description)
        rows.append(f"| `{fam.name}` | {written} | hand-derived | {where} |")
    for name, written in AUTOMATIC_FAMILIES:
        rows.append(f"| `{name}` | {written} | automatic | on a region |")
    return "\n".join(rows)


def registry_names() -> set[str]:
    return {fam.name for fam in (*registered(), *location_scale_families())} | {
        name for name, _ in AUTOMATIC_FAMILIES}


def test_readme_families_table_is_the_registry():
    assert section(README, "families").strip() == families_table(), (
        "the README's families table is out of date: PYTHONPATH=. python -m "
        "tests.test_docs_facts --write")


def test_mhss_families_table_names_every_registered_family():
    """``docs/methods/mhss.md``'s families table (derivative bounds per family) has one row
    per registered family, named in its first column."""
    text = (DOCS / "methods" / "mhss.md").read_text(encoding="utf-8")
    families = text.split("\n## Families", 1)[1].split("\n## ", 1)[0]
    names = re.findall(r"^\| `([a-z_]+)` \|", families, flags=re.M)
    assert sorted(names) == sorted(registry_names())


@pytest.mark.parametrize("page", ["getting-started.md", "choosing.md"])
def test_family_lists_come_from_the_readme(page):
    """Pages that say which families MHSS bounds include the README's table or link to
    mhss.md's, rather than listing them again."""
    text = (DOCS / page).read_text(encoding="utf-8")
    assert "README.md:families" in includes(DOCS / page) or "methods/mhss.md#families" in text
    assert "fixed ν only" not in text and "with fixed ν)" not in text


# -- sampler statistics --------------------------------------------------------------------


def documented_stats() -> dict[str, set[str]]:
    """``{stat: steps}`` from the README's sampler-statistics table."""
    out = {}
    for line in section(README, "stats").splitlines():
        m = re.match(r"\|\s*`([a-z_0-9]+)`\s*\|([^|]*)\|", line)
        if m:
            steps = {s.strip() for s in m[2].split(",")}
            out[m[1]] = set(STEPS) if steps == {"all"} else steps
    return out


def test_every_sample_stat_is_documented_once_for_its_steps():
    actual: dict[str, set[str]] = {}
    for name, step in STEPS.items():
        for stat in step.stats_dtypes_shapes:
            actual.setdefault(stat, set()).add(name)
    assert documented_stats() == actual


def test_getting_started_includes_the_stats_table():
    assert "README.md:stats" in includes(DOCS / "getting-started.md")
    text = resolved(DOCS / "getting-started.md")
    for stat in documented_stats():
        assert f"`{stat}`" in text


# -- what compare runs, and the code snippets ----------------------------------------------


def test_compare_is_described_once():
    """What ``compare`` runs: NumPyro's NUTS when installed, PyMC's otherwise (the README's
    sentence, included by the docs page that shows ``compare``)."""
    text = section(README, "compare")
    assert 'nuts_sampler="numpyro"' in text and "PyMC's NUTS otherwise" in text
    assert "README.md:compare" in includes(DOCS / "getting-started.md")
    for page in doc_pages():
        assert "pm.sample`'s defaults" not in page.read_text(encoding="utf-8"), page


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


@pytest.mark.skipif(shutil.which("ruff") is None, reason="needs ruff")
@pytest.mark.parametrize("path", [README, *doc_pages()], ids=lambda p: p.name)
def test_code_snippets_import_only_what_they_use(path):
    text = resolved(path) if path != README else path.read_text(encoding="utf-8")
    for block in _python_blocks(text):
        run = subprocess.run(
            ["ruff", "check", "--quiet", "--select", "F401", "--stdin-filename", "snippet.py",
             "--no-cache", "-"],
            input=block, capture_output=True, text=True, check=False,
        )
        assert run.returncode == 0, f"{path.name}: unused import in\n{block}\n{run.stdout}"


def _write() -> None:
    text = README.read_text(encoding="utf-8")
    old = section(README, "families")
    README.write_text(text.replace(old, families_table(), 1), encoding="utf-8")


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        _write()
    else:
        print(families_table())
