"""A disk cache of compiled functions' rewritten graphs, beside PyTensor's compiled modules.

With PyTensor's compile cache warm, what compiling a function still costs is PyTensor's graph
rewrites, run anew on every build: 2.9 of the 3.6 s an ordinal logit's data pass took to
compile at ``N = 10⁶`` (a profile), while making the function from its rewritten graph
takes a tenth of that or less (``docs/benchmarks.md``, "Compiled functions kept between
builds"). So
:func:`compile_cached` keeps each compiled function's rewritten graph, without the rewrites'
features (which hold every graph they replaced), and the specifications of its inputs and
outputs, pickled in PyTensor's compile directory under a hash of the graph before its
rewrites (``debugprint``), the compile mode, PyTensor's and PyMC's versions and the source
of :mod:`pymc_subsample.model` and :mod:`pymc_subsample.bounds` (the package's rewrites and
ops); a later build of the same graph makes the function from it as
:meth:`pytensor.compile.function.types.Function.copy` does, with no rewrites.

The model's data are not stored: the shared variables the graph reads (``pm.Data``, ``θ̂``)
are pickled as references and loaded as the new build's own (their containers too, so the
function reads their current values), and so are its constants of more than
:data:`REFERENCED_BYTES`, with a hash of each one's bytes. A stored function is used only
when every such constant has the same bytes as the new build's, and the stored graph before
rewrites is the same computation as the new one
(:func:`~pytensor.graph.basic.equal_computations`): a rewrite may have folded a constant of
the data into another (``log y`` of a LogNormal's ``y``), which the stored function holds,
so the same model on other data compiles anew. An entry over :data:`MAX_ENTRY_BYTES` (the
data folded into large constants), a graph with updates or random generators, one whose
large constants hold over :data:`MAX_HASHED_BYTES`, or one that does not pickle is not
stored; an entry that cannot be read is compiled anew.
"""

from __future__ import annotations

import hashlib
import io
import logging
import pickle
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pymc
import pytensor
from pytensor.compile.function.types import Function, FunctionMaker
from pytensor.compile.io import Out
from pytensor.compile.mode import Mode
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.basic import Constant, Variable, clone_get_equiv, equal_computations
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.traversal import graph_inputs
from pytensor.printing import debugprint
from pytensor.tensor.random.type import RandomType

from pymc_subsample.bounds.derivative_cache import source_fingerprint, write_entry

__all__ = ["MAX_ENTRY_BYTES", "REFERENCED_BYTES", "compile_cached"]

_log = logging.getLogger("pymc_subsample")

#: constants of the graph at least this large are stored as references and a hash, not values
REFERENCED_BYTES = 2**16
#: entries larger than this are not stored (a pickle that holds the data)
MAX_ENTRY_BYTES = 64 * 2**20
#: graphs whose large constants hold more than this are compiled as they are: hashing them
#: costs more than the rewrites save (800 MB of a 10⁷ × 10 regression's rows: 0.5 s of
#: SHA-256 a function, against a pass compiled in 0.06 s)
MAX_HASHED_BYTES = 256 * 2**20


def _directory() -> Path:
    return Path(pytensor.config.compiledir) / "pymc_subsample_functions"


def _referenced(outputs: Sequence[Variable]) -> tuple[list[Variable], list[Constant]]:
    """The shared variables and the large constants ``outputs`` read, in the graph's order."""
    leaves = list(graph_inputs(outputs))
    shared = [v for v in leaves if isinstance(v, SharedVariable)]
    large = [v for v in leaves if isinstance(v, Constant) and _nbytes(v) >= REFERENCED_BYTES]
    return shared, large


def _nbytes(constant: Constant) -> int:
    return int(getattr(constant.data, "nbytes", 0))


def _digest(constant: Constant, memo: dict) -> str:
    """A hash of ``constant``'s bytes, once per ``memo`` (one build's: its data do not
    change while it compiles)."""
    known = memo.get(id(constant))
    if known is None or known[0] is not constant:
        data = constant.data
        digest = hashlib.sha256(repr((data.dtype.str, data.shape)).encode())
        digest.update(memoryview(np.ascontiguousarray(data)).cast("B"))
        memo[id(constant)] = (constant, digest.hexdigest())  # the constant kept: its id stays
    return memo[id(constant)][1]


def _entry(inputs: Sequence[Variable], outputs: Sequence[Variable], mode: str) -> Path:
    config = pytensor.config
    text = "\n".join([
        # the package's rewrites and ops, and how it builds its graphs
        source_fingerprint("model", "bounds"), pytensor.__version__, pymc.__version__, mode,
        repr((config.floatX, config.optimizer_excluding, config.optimizer_including,
              config.optimizer_requiring, config.cxx)),
        repr([str(v.type) for v in inputs]),
        debugprint(list(outputs), file="str", id_type="int", print_type=True),
    ])
    return _directory() / f"{hashlib.sha256(text.encode()).hexdigest()}.pkl"


def compile_cached(inputs: Sequence[Variable], outputs: Variable | Sequence[Variable],
                   mode_name: str, mode: Mode, build: Callable[[], Function],
                   digests: dict | None = None) -> Function:
    """``build()``, a function of ``inputs`` to ``outputs`` compiled in ``mode`` (the
    package's mode named ``mode_name``), or the same function made from the rewritten graph a
    build of the same graph stored before. ``digests``: the hashes of large constants made
    so far in this build (kept there)."""
    graphs = list(outputs) if isinstance(outputs, list | tuple) else [outputs]
    shared, large = _referenced(graphs)
    if (any(isinstance(v.type, RandomType) for v in shared)
            or sum(_nbytes(c) for c in large) > MAX_HASHED_BYTES):
        return build()
    memo = {} if digests is None else digests
    hashes = [_digest(c, memo) for c in large]
    entry = _entry(inputs, graphs, mode_name)
    fn = _load(entry, list(inputs), graphs, shared, large, hashes, mode)
    if fn is not None:
        return fn
    fn = build()
    _store(entry, list(inputs), graphs, shared, large, hashes, fn)
    return fn


def _referenced_objects(inputs, shared, large) -> dict[str, list]:
    """What an entry refers to instead of holding: the inputs, the shared variables and
    their containers, the large constants."""
    return {"input": list(inputs), "shared": list(shared),
            "container": [v.container for v in shared], "constant": list(large)}


def _store(entry: Path, inputs, graphs, shared, large, hashes, fn: Function) -> None:
    """Keep ``fn``'s rewritten graph: a bare copy of it (the rewrites' features hold every
    graph they replaced, 5 of a Beta pass's 6.5 MB), with the specifications of its inputs
    and outputs, as :meth:`pytensor.compile.function.types.Function.copy` makes them."""
    maker = fn.maker
    if maker.fgraph.update_mapping or any(i.update is not None for i in maker.inputs):
        return
    ids = {id(obj): (kind, k)
           for kind, objects in _referenced_objects(inputs, shared, large).items()
           for k, obj in enumerate(objects)}
    try:
        fgraph = maker.fgraph
        memo = clone_get_equiv(fgraph.inputs, fgraph.outputs, copy_inputs=False,
                               copy_orphans=False)
        bare = FunctionGraph(fgraph.inputs, [memo[o] for o in fgraph.outputs], clone=False)
        ins = list(maker.inputs)  # their variables are the inputs, their values containers
        outs = [o.borrow for o in maker.outputs]

        class Pickler(pickle.Pickler):
            def persistent_id(self, obj):
                return ids.get(id(obj))

        payload = io.BytesIO()
        Pickler(payload, protocol=pickle.HIGHEST_PROTOCOL).dump(
            (len(inputs), len(shared), hashes, graphs, bare, ins, outs, maker.unpack_single))
    except Exception as err:  # noqa: BLE001 (no cache is a slower build, not an error)
        _log.debug("function cache entry %s not pickled: %s", entry, err)
        return
    if payload.tell() <= MAX_ENTRY_BYTES:
        write_entry(entry, lambda file: file.write(payload.getbuffer()))


def _load(entry: Path, inputs, graphs, shared, large, hashes,
          mode: Mode) -> Function | None:
    """The function stored at ``entry`` for this graph, made from its rewritten graph in
    ``mode``'s linker, or None (no entry, an unreadable one, another graph or other data)."""
    referenced = _referenced_objects(inputs, shared, large)

    class Unpickler(pickle.Unpickler):
        def persistent_load(self, pid):
            kind, k = pid
            return referenced[kind][k]

    try:
        with open(entry, "rb") as file:
            (n_inputs, n_shared, digests, stored, fgraph, ins, outs,
             unpack_single) = Unpickler(file).load()
    except FileNotFoundError:
        return None
    except Exception as err:  # noqa: BLE001 (any unreadable entry: compile anew)
        _log.debug("function cache entry %s not read: %s", entry, err)
        return None
    if ((n_inputs, n_shared) != (len(inputs), len(shared))
            or digests != hashes
            or not equal_computations(graphs, stored)):
        _log.debug("function cache entry %s is another graph: not used", entry)
        return None
    out_specs = [Out(o, borrow=borrow) for o, borrow in zip(fgraph.outputs, outs, strict=True)]
    try:
        maker = FunctionMaker(ins, out_specs[0] if unpack_single else out_specs, mode=mode,
                              fgraph=fgraph, accept_inplace=True, no_fgraph_prep=True,
                              on_unused_input="ignore")
        return maker.create([spec.value for spec in ins])
    except Exception as err:  # noqa: BLE001 (a graph that does not link: compile anew)
        _log.debug("function cache entry %s not linked: %s", entry, err)
        return None
