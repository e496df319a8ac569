"""NumPy's gufunc keywords ``axes=``, ``axis=`` and ``keepdims=``, as views around the normal call.

A gufunc computes with each operand's core dimensions last; these keywords only say where they
sit instead. So a call with them is the normal call on permuted views: the inputs and ``out=``
arrays are transposed (views, never copies) to put their core dimensions last, the call is
resolved and run as any other, and the outputs it allocates are transposed back, with the
size-1 dimensions of ``keepdims=True`` put in. The rules and the errors are NumPy's
(``_parse_axes_arg``, ``_parse_axis_arg``, ``_check_axis_support`` and
``_check_keepdims_support`` in NumPy's ``ufunc_object.c``), with the kernel's name in front.

Each operand's remap is NumPy's: ``order[k]`` is the operand's axis that holds dimension ``k``
of the default order (loop dimensions, then core dimensions), so the view is
``operand.transpose(order)``.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.exceptions import AxisError

from ..spec import KernelSpec
from ..targets import DEVICE
from .args import ABSENT, describe, device_arrays_of
from .plan import Call, _alloc_order, describe_input, describe_out

#: The keywords this module handles (gufuncs only: an elementwise kernel refuses them by name,
#: as NumPy's ufuncs do).
KEYWORDS = ("axes", "axis", "keepdims")

Order = tuple[int, ...] | None  # an operand's remap; None where it is the identity


def given(kwargs: dict[str, Any]) -> bool:
    """Whether a call passes any of :data:`KEYWORDS`."""
    return "axes" in kwargs or "axis" in kwargs or "keepdims" in kwargs


def split(spec: KernelSpec, kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(these keywords, the others)``; ``TypeError`` for ``axis`` with ``axes``, as NumPy."""
    if "axes" in kwargs and "axis" in kwargs:
        raise TypeError(f"{spec.name}: cannot specify both 'axis' and 'axes'")
    mine = {k: kwargs[k] for k in KEYWORDS if k in kwargs}
    return mine, {k: v for k, v in kwargs.items() if k not in KEYWORDS}


# -- the remaps -------------------------------------------------------------------------------------
def orders(spec: KernelSpec, keywords: dict[str, Any], ndims: Sequence[int | None], where: int = 0
           ) -> tuple[tuple[Order, ...], int]:
    """Each operand's remap (inputs, then outputs) and the size-1 dimensions ``keepdims``
    keeps in each output (0 without it). ``ndims``: each operand's dimensions, ``None`` for
    an output the call allocates; ``where``: the dimensions of a ``where=`` mask (it takes
    part in the loop's shape)."""
    cores = [len(d) for d in (*spec.layout.inputs, *spec.layout.outputs)]
    kept = _keepdims(spec, keywords["keepdims"], cores) if "keepdims" in keywords else 0
    if kept:  # the outputs keep the inputs' core dimensions, of size 1
        cores[spec.nin:] = [kept] * spec.nout
    if "axis" in keywords:
        items = _axis_items(spec, keywords["axis"], cores)
    for i, (ndim, core) in enumerate(zip(ndims, cores)):  # NumPy checks this before the axes
        if ndim is not None and ndim < core:
            role = "Input" if i < spec.nin else "Output"
            raise ValueError(f"{spec.name}: {role} operand {i if i < spec.nin else i - spec.nin} does "
                             f"not have enough dimensions (has {ndim}, gufunc core with signature "
                             f"{spec.layout.text} requires {core})")
    loop = max((where, *(n - c for n, c in zip(ndims, cores) if n is not None)))
    full = [loop + c if n is None else n for n, c in zip(ndims, cores)]
    if "axis" in keywords:
        found = tuple(None if a is None else _axis_order(spec, a, n) for a, n in zip(items, full))
    elif "axes" in keywords:
        found = tuple(None if t is None else _order(spec, i, t, n)
                      for i, (t, n) in enumerate(zip(_axes_items(spec, keywords["axes"], cores), full)))
    else:
        found = (None,) * len(cores)
    return found, kept


def _keepdims(spec: KernelSpec, keepdims: Any, cores: list[int]) -> int:
    """The core dimensions ``keepdims`` keeps (0 for ``False``), as NumPy allows it."""
    if type(keepdims) is not bool:  # NumPy refuses np.True_ and 1 too
        raise TypeError(f"{spec.name}: 'keepdims' must be a boolean")
    for i, core in enumerate(cores[1:], 1):
        if core != (cores[0] if i < spec.nin else 0):
            role, at = ("input", i) if i < spec.nin else ("output", i - spec.nin)
            raise TypeError(f"{spec.name} does not support keepdims: its signature {spec.layout.text} "
                            f"requires {role} {at} to have {core} core dimensions, but keepdims can "
                            "only be used when all inputs have the same number of core dimensions "
                            "and all outputs have no core dimensions.")
    return cores[0] if keepdims else 0


def _axis_items(spec: KernelSpec, axis: Any, cores: list[int]) -> list[int | None]:
    """``axis=`` as each operand's axis (``None`` for one without core dimensions)."""
    distinct = {d for dims in (*spec.layout.inputs, *spec.layout.outputs) for d in dims}
    if len(distinct) != 1:
        raise TypeError(f"{spec.name}: axis can only be used with a single shared core dimension, "
                        f"not with the {len(distinct)} distinct ones implied by signature "
                        f"{spec.layout.text}.")
    value = _integer(spec, axis)
    return [value if core else None for core in cores]


def _axis_order(spec: KernelSpec, axis: int, ndim: int) -> Order:
    """NumPy's remap for ``axis=``: that axis moves last (only it, whatever the core count)."""
    axis = _normalized(spec, axis, ndim)
    order = (*range(axis), *range(axis + 1, ndim), axis)
    return None if axis == ndim - 1 else order


def _axes_items(spec: KernelSpec, axes: Any, cores: list[int]) -> list[tuple[Any, ...] | None]:
    """``axes=`` as a tuple per operand (``None`` for outputs left out, as NumPy allows where no
    output has core dimensions)."""
    if type(axes) is not list:
        raise TypeError(f"{spec.name}: axes should be a list.")
    nop, outputs = len(cores), spec.layout.outputs
    if len(axes) != nop and (len(axes) != spec.nin or any(outputs)):
        raise ValueError(f"{spec.name}: axes should be a list with an entry for all {nop} inputs and "
                         "outputs; entries for outputs can only be omitted if none of them has "
                         "core axes.")
    items: list[tuple[Any, ...] | None] = [None] * nop
    for i, (item, core) in enumerate(zip(axes, cores)):
        if isinstance(item, tuple):
            if len(item) != core:
                raise AxisError(f"{spec.name}: operand {i} has {core} core dimensions, but "
                                f"{len(item)} dimensions are specified by axes tuple.")
            items[i] = item
        elif core == 1:
            items[i] = (item,)
        else:
            try:
                _integer(spec, item)
            except TypeError:
                raise TypeError(f"{spec.name}: axes item {i} should be a tuple.") from None
            raise AxisError(f"{spec.name}: operand {i} has {core} core dimensions, but the axes "
                            "item is a single integer.")
    return items


def _order(spec: KernelSpec, index: int, axes: tuple[Any, ...], ndim: int) -> Order:
    """NumPy's remap of operand ``index`` whose core dimensions are its ``axes``: they go last,
    in that order, after the others in theirs."""
    core = tuple(_normalized(spec, _integer(spec, a), ndim) for a in axes)
    for k, a in enumerate(core):
        if a in core[:k]:
            raise ValueError(f"{spec.name}: axes item {index} has value {a} repeated")
    order = (*(a for a in range(ndim) if a not in core), *core)
    return None if order == tuple(range(ndim)) else order


def _integer(spec: KernelSpec, value: Any) -> int:
    if isinstance(value, bool | np.bool_):  # as NumPy's PyArray_PyIntAsInt
        raise TypeError(f"{spec.name}: an integer is required")
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"{spec.name}: {type(value).__name__!r} object cannot be interpreted as an "
                        "integer") from None
    if not -2**31 <= value < 2**31:
        raise ValueError(f"{spec.name}: integer won't fit into a C int")
    return value


def _normalized(spec: KernelSpec, axis: int, ndim: int) -> int:
    if not -ndim <= axis < ndim:
        raise AxisError(axis, ndim, spec.name)
    return axis % ndim


# -- views ------------------------------------------------------------------------------------------
def transposed(value: Any, order: Order) -> Any:
    """``value`` with its axes in ``order`` (a view; lists become arrays first)."""
    if order is None:
        return value
    if isinstance(value, np.ndarray):
        return value.transpose(order)
    info = describe(value)
    if info is None or info.role != DEVICE:
        return np.asarray(value).transpose(order)
    return _device_view(value, tuple(info.shape[a] for a in order), tuple(info.strides[a] for a in order))


def dropped(value: Any, count: int) -> Any:
    """``value`` without its last ``count`` dimensions, of size 1 (a view)."""
    if not count:
        return value
    if isinstance(value, np.ndarray):
        return value[(..., *(0,) * count)]
    info = describe(value)
    return _device_view(value, info.shape[:-count], info.strides[:-count])


def appended(value: Any, count: int) -> Any:
    """``value`` with ``count`` more dimensions of size 1, last (a view; a NumPy scalar becomes
    an array, as NumPy's ``keepdims`` gives)."""
    if not count:
        return value
    info = describe(value)
    if info.role != DEVICE:  # (adding dimensions of size 1 never copies)
        return value.reshape((*info.shape, *(1,) * count))
    return _device_view(value, (*info.shape, *(1,) * count),
                        (*info.strides, *(info.dtype.itemsize,) * count))


def _device_view(value: Any, shape: tuple[int, ...], strides: tuple[int, ...]) -> Any:
    return device_arrays_of(value).view(value, shape, strides)


def inverse(order: Order) -> Order:
    """The remap that undoes ``order``."""
    return None if order is None else tuple(int(i) for i in np.argsort(order))


# -- the call ---------------------------------------------------------------------------------------
class AxesCall:
    """A call with ``axes=``, ``axis=`` or ``keepdims=``, resolved: the normal resolved call of
    its views (``inner``), and how to make them from the arguments and the results back.

    Kept per call signature as any resolved call: the remaps depend only on the keywords and
    on the operands' dimensions, both in the key (lists, NumPy's only form of ``axes``, are
    keyed as tuples that remember they were lists: see :func:`.args.keywords_key`).
    """

    __slots__ = ("_in", "_inner", "_kept", "_nin", "_nout", "_outs", "_outs_from", "_results",
                 "_sizes", "_stop", "plan", "target")

    def __init__(self, spec: KernelSpec, call: Call, args: tuple[Any, ...], kwargs: dict[str, Any],
                 keywords: dict[str, Any], resolve: Callable[..., Any]) -> None:
        nin, nsizes = spec.nin, len(call.sizes)
        outs = call.outs or (None,) * spec.nout
        infos = [describe_input(spec, v, i)[0] for i, v in enumerate(call.inputs)]
        ndims = [len(info.shape) for info in infos]
        shapes = [None if o is None else describe_out(spec, o).shape for o in outs]
        mask = 0 if call.where is True else _ndim(call.where)
        found, kept = orders(spec, keywords, ndims + [None if s is None else len(s) for s in shapes], mask)
        self._nin, self._nout, self._kept = nin, spec.nout, kept
        self._sizes, self._stop = slice(nin, nin + nsizes), nin + nsizes
        self._in, self._outs = found[:nin], found[nin:]
        self._results = tuple(inverse(o) for o in self._outs)
        self._outs_from = None if call.outs is None else ("args" if call.out_positional else "out")
        for i, (shape, order) in enumerate(zip(shapes, self._outs)):
            _check_kept(spec, i, shape, order, kept)
        try:
            inner_args, out_views = self._views(args, call.outs)
        except TypeError as exc:  # a device array that has no views
            raise TypeError(f"{spec.name}: {exc}") from None
        inner_kwargs = {k: v for k, v in kwargs.items() if k != "out"}
        if inner_kwargs.get("order", "K") in ("K", "A"):  # as the arguments ask, not their views
            inner_kwargs["order"] = _alloc_order("K", infos)
        if out_views is not ABSENT:
            inner_kwargs["out"] = out_views
        self._inner = resolve(inner_args, inner_kwargs)
        self.plan, self.target = self._inner.plan, self._inner.target

    def _views(self, args: tuple[Any, ...], outs: tuple[Any, ...] | None) -> tuple[tuple[Any, ...], Any]:
        """The inner call's positional arguments and ``out=`` (``ABSENT`` for none)."""
        views = tuple(transposed(a, o) for a, o in zip(args[: self._nin], self._in))
        inner_args = (*views, *args[self._sizes])
        if outs is None:
            return inner_args, ABSENT
        return inner_args, tuple(None if out is None else dropped(transposed(out, order), self._kept)
                                 for out, order in zip(outs, self._outs))

    def _run(self, args: tuple[Any, ...], out: Any, where: Any, kwargs: dict[str, Any]) -> Any:
        if self._outs_from is None:
            outs = None
        else:
            outs = args[self._stop:] if self._outs_from == "args" else out
            outs = outs if type(outs) is tuple else (outs,)
            outs = (*outs, *(None,) * (self._nout - len(outs)))
        inner_args, out_views = self._views(args, outs)
        rest = {k: v for k, v in kwargs.items() if k not in KEYWORDS}
        results = self._inner._run(inner_args, out_views, where, rest)
        if self._nout == 1:
            results = (results,)
        done = tuple(self._back(r, order) if outs is None or outs[i] is None else outs[i]
                     for i, (r, order) in enumerate(zip(results, self._results)))
        return done[0] if self._nout == 1 else done

    def _back(self, result: Any, order: Order) -> Any:
        """A new output, its core dimensions (and kept ones) where the keywords put them."""
        return transposed(appended(result, self._kept), order)


def _ndim(value: Any) -> int:
    info = describe(value)
    return np.ndim(value) if info is None else len(info.shape)


def _check_kept(spec: KernelSpec, index: int, shape: tuple[int, ...] | None, order: Order,
                kept: int) -> None:
    """``ValueError`` unless the dimensions ``keepdims`` keeps in an ``out=`` have size 1."""
    if shape is None or not kept:
        return
    axes = order[-kept:] if order is not None else tuple(range(len(shape) - kept, len(shape)))
    if any(shape[a] != 1 for a in axes):
        raise ValueError(f"{spec.name}: out= output {index} has shape {shape}, but with keepdims=True "
                         f"its axes {axes} hold the kept core dimensions, of size 1")
