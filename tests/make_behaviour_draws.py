"""Store the fixed-seed draws the behaviour test compares against.

Run once before a change that must not change behaviour (a restructuring), from the
repository root:

    python tests/make_behaviour_draws.py

It writes ``tests/data/behaviour_draws.npz`` (see :mod:`tests.behaviour`).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from tests.behaviour import PATH, behaviour_draws  # noqa: E402

if __name__ == "__main__":
    draws = behaviour_draws()
    np.savez(PATH, **draws)
    print(f"wrote {len(draws)} arrays to {PATH}")
