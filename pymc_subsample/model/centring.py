"""Non-centred group effects ``s * z[g]``, sampled in the centred coordinates ``u = s·z``.

A non-centred random effect, ``z ~ N(m, c²)`` per group and ``η = Xb + s·z[g]`` with a
positive scale ``s``, makes the linear predictor a product of two parameters: no bound of the
Taylor remainder is affine in ``θ``. The change of variables ``(s, z) → (s, u)``, ``u = s·z``,
is a bijection for ``s > 0`` that turns the predictor into ``Xb + u[g]``, affine, and the
prior into the centred one,

    p(s, u) = p(s) · Π_g N(u_g; s·m, (s·c)²),

whose normalisation carries the Jacobian ``|∂z/∂u| = s^{−G}``. A Markov chain that is exact
for the posterior of ``(b, s, u)`` is exact for that of ``(b, s, z)`` once every state is mapped
back by ``z = u/s``, since the map is one-to-one: the steps run every MH decision, bound and
proposal in ``(b, s, u)`` (:class:`CentredTwin`) and hand PyMC the user's ``z``.

On tall data the centred coordinates are also the better ones: with many rows per group the
posterior of ``(s, z)`` is a thin curved ridge ``z_g ≈ û_g/s``, that of ``(s, u)`` nearly
Gaussian, which is what the Laplace frame and the bounds assume.

Only this pattern is read: ``z`` a free ``Normal`` with constant parameters, ``s`` a scalar free
variable with a log transform (``HalfNormal``, ``Exponential``, ``HalfCauchy``, ``Gamma``,
``LogNormal``, …), and the product ``s * z`` or ``s * z[idx]`` with data indices, in either
order. Other uses of ``z`` (a ``Potential``, another variable's parameter) are rewritten with
``z = u/s``; any other product of parameters is left as written, and the likelihood layer
refuses it naming the variable (:mod:`pymc_subsample.model.glm`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pymc.logprob.transforms import LogTransform
from pytensor.graph.basic import Variable
from pytensor.graph.replace import graph_replace
from pytensor.graph.traversal import ancestors
from pytensor.scalar import Mul
from pytensor.tensor.elemwise import DimShuffle, Elemwise
from pytensor.tensor.random.basic import NormalRV
from pytensor.tensor.subtensor import AdvancedSubtensor, AdvancedSubtensor1, Subtensor
from pytensor.tensor.type_other import NoneTypeT

__all__ = ["CentredTwin", "NonCentredEffect", "centred_twin", "find_non_centred_effects"]

_INDEXING = (AdvancedSubtensor1, AdvancedSubtensor, Subtensor)


@dataclass(frozen=True)
class NonCentredEffect:
    """One product ``s * z`` of a scale and standardised group effects.

    Attributes
    ----------
    scale, effect : TensorVariable
        The user's free variables ``s`` (scalar, log-transformed) and ``z``.
    products : tuple of TensorVariable
        The graph variables ``s * z`` or ``s * z[idx]`` the likelihood reads.
    """

    scale: Variable
    effect: Variable
    products: tuple[Variable, ...]

    @property
    def name(self) -> str:
        """Name of the centred variable ``u = s·z`` in the twin model."""
        return f"{self.scale.name}*{self.effect.name}"


def _strip_dimshuffle(var: Variable) -> Variable:
    while var.owner is not None and isinstance(var.owner.op, DimShuffle):
        var = var.owner.inputs[0]
    return var


def _is_parameter_free(var: Variable, free_rvs: set[Variable]) -> bool:
    return not any(a in free_rvs for a in ancestors([var]))


def _standard_effect(var: Variable, model: pm.Model, free_rvs: set[Variable]) -> bool:
    """``var`` is a free ``Normal`` of at least one axis whose parameters are constants."""
    if var not in free_rvs or var.ndim == 0 or not isinstance(var.owner.op, NormalRV):
        return False
    if model.rvs_to_transforms.get(var) is not None:
        return False
    params = var.owner.op.dist_params(var.owner)
    return all(_is_parameter_free(p, free_rvs) for p in params)


def _positive_scale(var: Variable, model: pm.Model, free_rvs: set[Variable]) -> bool:
    return (var in free_rvs and var.ndim == 0
            and isinstance(model.rvs_to_transforms.get(var), LogTransform))


def _effect_of(var: Variable, model, free_rvs) -> Variable | None:
    """``z`` if ``var`` is ``z`` or ``z[idx]`` (data indices), else ``None``."""
    var = _strip_dimshuffle(var)
    if var.owner is not None and isinstance(var.owner.op, _INDEXING):
        base, *indices = var.owner.inputs
        if not all(_is_parameter_free(i, free_rvs) for i in indices):
            return None
        var = _strip_dimshuffle(base)
    return var if _standard_effect(var, model, free_rvs) else None


def find_non_centred_effects(model: pm.Model) -> list[NonCentredEffect]:
    """The products ``s * z[idx]`` in the model's observed variables, by effect ``z``.

    An effect multiplied by two different scales is not returned (its products stay as
    written and are refused downstream).
    """
    free_rvs = set(model.free_RVs)
    found: dict[Variable, tuple[Variable, list[Variable]]] = {}
    clashing: set[Variable] = set()
    for var in ancestors(model.observed_RVs):
        node = var.owner
        if (node is None or not isinstance(node.op, Elemwise)
                or not isinstance(node.op.scalar_op, Mul) or len(node.inputs) != 2):
            continue
        first, second = node.inputs
        for scale, other in ((first, second), (second, first)):
            scale = _strip_dimshuffle(scale)
            effect = _effect_of(other, model, free_rvs)
            if effect is None or not _positive_scale(scale, model, free_rvs):
                continue
            known_scale, products = found.setdefault(effect, (scale, []))
            if known_scale is not scale:
                clashing.add(effect)
            products.append(var)
            break
    return [NonCentredEffect(scale, effect, tuple(products))
            for effect, (scale, products) in found.items() if effect not in clashing]


def _centred_product(product: Variable, effect: NonCentredEffect, u: Variable) -> Variable:
    """``u`` or ``u[idx]`` standing for ``product`` (``s * z`` or ``s * z[idx]``), with the
    effect's side's own dimension shuffles (``z[g][:, None]``) and the product's shape."""
    for side in product.owner.inputs:
        inner = _strip_dimshuffle(side)
        if inner.owner is not None and isinstance(inner.owner.op, _INDEXING):
            base, *indices = inner.owner.inputs
            if _strip_dimshuffle(base) is effect.effect:
                return _like(product, side, inner, inner.owner.op(u, *indices))
        elif inner is effect.effect:
            return _like(product, side, inner, u)
    return u


def _like(product: Variable, side: Variable, inner: Variable, new: Variable) -> Variable:
    """``new`` in place of ``inner`` under the dimension shuffles between ``side`` and
    ``inner``, padded on the left to the product's dimensions (the scale's broadcast)."""
    shuffles = []
    while side is not inner:
        shuffles.append(side.owner.op)
        side = side.owner.inputs[0]
    for op in reversed(shuffles):
        new = op(new)
    return pt.shape_padleft(new, product.type.ndim - new.type.ndim)


def _replace(outputs: list[Variable], products: dict, rest: dict) -> list[Variable]:
    """``outputs`` with the products replaced first, then any other use of ``z`` by ``u/s``
    (only the nodes that depend on them are rebuilt: the other variables stay the same)."""
    for replace in (products, rest):
        below = set(ancestors(outputs))
        present = {k: v for k, v in replace.items() if k in below}
        if present:
            outputs = graph_replace(outputs, present, strict=False)
    return list(outputs)


@dataclass
class CentredTwin:
    """A model in which every non-centred effect ``z`` is replaced by ``u = s·z``.

    The twin's free variables are the user's, in the same order and shapes, with each ``z``
    replaced by its ``u``; it shares the user's data (no copy) and has no deterministics.
    :meth:`to_twin` and :meth:`to_user` map raveled points between the two (``O(G)``).

    Attributes
    ----------
    model : pymc.Model
        The twin model.
    effects : list of NonCentredEffect
    """

    model: pm.Model
    effects: list[NonCentredEffect]
    #: per effect, the raveled slices of log s and of z (= of u in the twin)
    _slices: list[tuple[slice, slice]]
    #: the user's value-variable name of each free variable
    _value_names: dict[Variable, str]

    def to_twin(self, theta: np.ndarray) -> np.ndarray:
        """``(…, log s, z, …) → (…, log s, s·z, …)`` on a raveled point."""
        out = np.array(theta, dtype=np.float64, copy=True)
        for log_scale, effect in self._slices:
            out[effect] = np.exp(out[log_scale][0]) * out[effect]
        return out

    def to_user(self, theta: np.ndarray) -> np.ndarray:
        """``(…, log s, u, …) → (…, log s, u/s, …)`` on a raveled point."""
        out = np.array(theta, dtype=np.float64, copy=True)
        for log_scale, effect in self._slices:
            out[effect] = out[effect] * np.exp(-out[log_scale][0])
        return out

    def point_to_twin(self, point: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """A user's point (value-variable names) as a point of the twin."""
        twin = dict(point)
        for effect in self.effects:
            log_scale = self._value_names[effect.scale]
            z = twin.pop(self._value_names[effect.effect])
            twin[effect.name] = np.exp(np.asarray(point[log_scale])) * np.asarray(z)
        return twin


def centred_twin(model: pm.Model, value_vars: list[Variable]) -> CentredTwin | None:
    """The centred twin of ``model``, or ``None`` when it has no non-centred effect.

    ``value_vars`` are the user's value variables in the order the step ravels them.
    """
    effects = find_non_centred_effects(model)
    if not effects:
        return None
    centred: dict[Variable, Variable] = {}
    products: dict[Variable, Variable] = {}
    rest: dict[Variable, Variable] = {}
    for effect in effects:
        z, s = effect.effect, effect.scale
        loc, sigma = z.owner.op.dist_params(z.owner)
        # u = s·z: N(s·m, (s·c)²), whose normalisation is the Jacobian s^(−G)
        size = z.owner.op.size_param(z.owner)
        u = pm.Normal.dist(s * loc, s * sigma,
                           size=None if isinstance(size.type, NoneTypeT) else size)
        u.name = effect.name
        centred[z] = u
        for product in effect.products:
            products[product] = _centred_product(product, effect, u)
        rest[z] = u / s

    others = [rv for rv in model.free_RVs if rv not in centred]
    rebuilt_free = _replace(others, products, rest)
    rebuilt_observed = _replace(list(model.observed_RVs), products, rest)
    rebuilt_potentials = _replace(list(model.potentials), products, rest)
    free_map = dict(zip(others, rebuilt_free, strict=True))

    twin = pm.Model(model=None)
    value_names: dict[Variable, str] = {}
    rv_of_value = {model.rvs_to_values[rv]: rv for rv in model.free_RVs}
    for value in value_vars:
        rv = rv_of_value[value]
        value_names[rv] = value.name
        if rv in centred:
            twin.register_rv(centred[rv], centred[rv].name, default_transform=None,
                             transform=None)
            continue
        new = free_map[rv]
        if new is not rv:
            new.name = rv.name
        twin.register_rv(new, rv.name, default_transform=None,
                         transform=model.rvs_to_transforms.get(rv),
                         initval=model.rvs_to_initial_values.get(rv))
    for rv, new in zip(model.observed_RVs, rebuilt_observed, strict=True):
        new.name = rv.name
        twin.create_value_var(new, default_transform=None, transform=None,
                              value_var=model.rvs_to_values[rv])
        twin.add_named_variable(new)
        twin.observed_RVs.append(new)
    for pot, new in zip(model.potentials, rebuilt_potentials, strict=True):
        new.name = pot.name
        twin.add_named_variable(new)
        twin.potentials.append(new)
    for data in model.data_vars:
        twin.add_named_variable(data)
        twin.data_vars.append(data)

    slices = []
    starts, start = {}, 0
    initial = model.initial_point()
    for value in value_vars:
        size = int(np.prod(initial[value.name].shape, dtype=int))
        starts[value] = slice(start, start + size)
        start += size
    for effect in effects:
        slices.append((starts[model.rvs_to_values[effect.scale]],
                       starts[model.rvs_to_values[effect.effect]]))
    return CentredTwin(twin, effects, slices, value_names)
