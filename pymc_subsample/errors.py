"""Exceptions raised when a model or a knob cannot be used for subsampling."""

from __future__ import annotations

__all__ = ["SubsamplingModelError"]


class SubsamplingModelError(ValueError):
    """The model cannot be sampled by a subsampling step, and the message says why.

    Every message names the offending variable and what to do instead, e.g. use
    ``pm.sample()`` with NUTS, marginalise a per-row latent variable, or pass a user bound.
    """
