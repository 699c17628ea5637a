"""Exceptions raised when a model or a knob cannot be used for subsampling."""

from __future__ import annotations

import operator

__all__ = ["SubsamplingModelError", "positive_int"]


class SubsamplingModelError(ValueError):
    """The model cannot be sampled by a subsampling step, and the message says why.

    Every message names the offending variable and what to do instead, e.g. use
    ``pm.sample()`` with NUTS, marginalise a per-row latent variable, or pass a user bound.
    """


def positive_int(name: str, value, meaning: str) -> int:
    """``value`` as an ``int ≥ 1``, else an error naming the knob and what it means.

    Raises
    ------
    TypeError
        If ``value`` is not an integer.
    ValueError
        If it is below 1.
    """
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer; got {value!r}") from None
    if value < 1:
        raise ValueError(f"{name} must be a positive integer ({meaning}); got {name}={value}")
    return value
