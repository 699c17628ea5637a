"""The pure acceptance kernels: one accept/reject decision from numbers, arrays and a
``numpy.random.Generator``, and the row-index samplers. NumPy and SciPy only: nothing here
imports PyMC or PyTensor (an import-linter contract in ``pyproject.toml``)."""
