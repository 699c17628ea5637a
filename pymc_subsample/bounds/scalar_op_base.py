"""What the scalar ops of the automatic bound share: identity by their ``__props__``, and C
code for a polynomial (:mod:`pymc_subsample.bounds.special_ops`,
:mod:`pymc_subsample.bounds.dispersion_ops`)."""

from __future__ import annotations

from collections.abc import Sequence

from pytensor.scalar import basic as ps

__all__ = ["PropsScalarOp", "horner_code"]


class PropsScalarOp(ps.ScalarOp):
    """A scalar op told apart by its ``__props__`` (a derivative's order, a number of inputs).

    PyTensor's ``ScalarOp`` compares its type and output types only, so two orders of one
    derivative op would be merged as one node by the graph's rewrites.
    """

    def __eq__(self, other) -> bool:
        return type(self) is type(other) and self._props() == other._props()

    def __hash__(self) -> int:
        return hash((type(self), self._props()))

    def c_code_cache_version(self) -> tuple[int, ...]:
        return (1,)


def horner_code(coef: Sequence[float], var: str) -> str:
    """C expression of the polynomial ``coef`` (lowest degree first) in ``var``, by Horner's
    scheme; every coefficient written with ``repr`` so that C reads the same double."""
    code = repr(float(coef[-1]))
    for c in coef[-2::-1]:
        code = f"({code}) * {var} + {float(c)!r}"
    return code
