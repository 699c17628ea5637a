"""A disk cache of an automatic bound's derivative graphs, beside PyTensor's compiled modules.

Building ``∂^α f`` for every ``|α| ≤ k + 2`` of a row term ``f`` and simplifying them with
PyTensor's rewrites (:meth:`~pymc_subsample.bounds.automatic.AutomaticFamily.derivatives`) is
most of the time an automatic family takes to build before the first pass: 1.5 s for a Beta
regression's two predictors, 4.2 s for an ordinal logit's four, every time the same model is
built. The graphs depend on ``f`` alone, so they are kept, pickled, in PyTensor's compile
directory (``pytensor.config.compiledir``), under a hash of ``f``'s printed graph
(``debugprint``, the same on every run), and a later build of the same ``f`` loads them.

The hash also covers PyTensor's version and the source of :mod:`pymc_subsample.bounds`
(where the derivatives are built and the package's own ops define their gradients), so
another PyTensor or an edited module builds its own entries. A loaded entry is used only when
its stored ``f`` is the same computation as the new one
(:func:`pytensor.graph.basic.equal_computations`, constants compared by value) and its
graphs read nothing but ``f``'s inputs and constants, so a hash collision or a model that
prints alike costs a rebuild, never a wrong graph; the derivative graphs then have the stored
inputs replaced by the new ones. A directory that cannot be written, or an entry that cannot
be read (a partial write), means no cache.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import pickle
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pytensor
from pytensor.graph.basic import Constant, Variable, equal_computations
from pytensor.graph.replace import graph_replace
from pytensor.graph.traversal import graph_inputs
from pytensor.printing import debugprint

__all__ = ["derivatives_entry", "load_derivatives", "source_fingerprint", "store_derivatives",
           "write_entry"]

_log = logging.getLogger("pymc_subsample")


@functools.cache
def source_fingerprint(*folders: str) -> str:
    """A hash of the source files of these subpackages of :mod:`pymc_subsample`: a cache's
    entries of one version of them (an edit, even one that leaves the graphs as they were,
    builds them anew)."""
    digest = hashlib.sha256()
    package = Path(__file__).parent.parent
    for folder in folders:
        for path in sorted((package / folder).glob("*.py")):
            digest.update(f"{folder}/{path.name}".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def derivatives_entry(logp: Variable, inputs: Sequence[Variable], order: int,
                      how: str) -> Path:
    """The entry of ``f = logp`` of ``inputs`` and the derivatives' ``order`` and ``how``
    (how they are built)."""
    text = "\n".join([
        source_fingerprint("bounds"), pytensor.__version__, how, str(order),
        repr([str(v.type) for v in inputs]),
        debugprint(logp, file="str", id_type="int", print_type=True),
    ])
    return _directory() / f"{hashlib.sha256(text.encode()).hexdigest()}.pkl"


def _directory() -> Path:
    """Where the entries are: in PyTensor's compile directory."""
    return Path(pytensor.config.compiledir) / "pymc_subsample_derivatives"


def load_derivatives(
    entry: Path, logp: Variable, inputs: Sequence[Variable],
) -> tuple[list[tuple[int, ...]], list[Variable]] | None:
    """``(α's, graphs)`` kept at ``entry`` for ``f = logp``, on ``inputs`` (in
    :func:`derivatives_entry`'s order), or None."""
    try:
        with open(entry, "rb") as file:
            stored_logp, stored_inputs, alphas, graphs = pickle.load(file)
    except FileNotFoundError:
        return None
    except Exception as err:  # noqa: BLE001 (any unreadable entry: build the graphs anew)
        _log.debug("derivative cache entry %s not read: %s", entry, err)
        return None
    if not (len(stored_inputs) == len(inputs)
            and equal_computations([logp], [stored_logp], in_xs=list(inputs),
                                   in_ys=list(stored_inputs))):
        return None
    graphs = graph_replace(list(graphs), dict(zip(stored_inputs, inputs, strict=True)),
                           strict=False)
    known = set(inputs)
    if any(v not in known and not isinstance(v, Constant) for v in graph_inputs(graphs)):
        _log.debug("derivative cache entry %s reads other variables: not used", entry)
        return None
    return list(alphas), list(graphs)


def store_derivatives(
    entry: Path, logp: Variable, inputs: Sequence[Variable],
    alphas: list[tuple[int, ...]], graphs: list[Variable],
) -> None:
    """Keep ``(α's, graphs)`` of ``f = logp``, graphs of ``inputs``, at ``entry`` for
    :func:`load_derivatives` (written whole, then renamed: a reader never sees part of an
    entry)."""
    write_entry(entry, lambda file: pickle.dump((logp, list(inputs), alphas, graphs), file,
                                                protocol=pickle.HIGHEST_PROTOCOL))


def write_entry(entry: Path, write) -> None:
    """``write(file)`` into a new file, renamed ``entry`` once whole (a reader never sees part
    of an entry); any error leaves no entry, only a debug message (no cache is a slower
    build, not an error)."""
    written = None
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=entry.parent, suffix=".part",
                                         delete=False) as file:
            written = file.name
            write(file)
        os.replace(written, entry)
    except Exception as err:  # noqa: BLE001 (no cache is a slower build, not an error)
        _log.debug("cache entry %s not written: %s", entry, err)
        if written is not None:
            Path(written).unlink(missing_ok=True)
