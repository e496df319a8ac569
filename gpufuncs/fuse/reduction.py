"""Reductions that end a fused function: what NumPy's reduction computes, in one pass.

A fused function may return reductions of its values (``np.log(gaussian(x, m, s)).sum()``,
``np.max(abs(a - b), axis=1)``): the tracer records each as a :class:`Reduction` of a symbol,
with the dtype NumPy accumulates in. A call computes it with one generalized kernel (see
:func:`.emit.reduction_function`) whose core is the reduced axes: each element of the function's
values is computed where it is added in, so the inputs are read once and no array of values is
written. Floating sums are compensated (Neumaier), so they are at least as accurate as NumPy's
pairwise summation, and the order of the additions depends only on the shape: the same bits on
every run. A host reduction over one leading axis that keeps the last, contiguous one runs by
rows instead (:meth:`ReducingPart._columns`), in NumPy's own order for it.
"""

from __future__ import annotations

import functools
import inspect
import math
import operator
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

from ..dispatch import Kernel
from ..dispatch.args import ABSENT, arg_key, describe, keep, lookup
from ..dispatch.kernel import ResolvedCall
from ..dispatch.lazy import call_loop
from ..dispatch.pieces import cut, in_pieces
from ..spec import KernelSpec, parse_layout, parse_loop
from ..targets.base import DEVICE, library_of
from .ops import Unfusable, maximum, minimum

_ABSENT: Any = object()


# NumPy's parameters of each reduction, as its functions and array methods take them.
def _sum_like(a, axis=None, dtype=None, out=None, keepdims=False, initial=_ABSENT, where=_ABSENT):
    pass


def _mean_like(a, axis=None, dtype=None, out=None, keepdims=False, *, where=_ABSENT):
    pass


def _min_like(a, axis=None, out=None, keepdims=False, initial=_ABSENT, where=_ABSENT):
    pass


def _any_like(a, axis=None, out=None, keepdims=False, *, where=_ABSENT):
    pass


def _reduce_like(a, axis=0, dtype=None, out=None, keepdims=False, initial=_ABSENT, where=_ABSENT):
    pass


_PARAMETERS = {"reduce": _reduce_like, "sum": _sum_like, "prod": _sum_like, "min": _min_like,
               "max": _min_like, "mean": _mean_like, "any": _any_like, "all": _any_like}
#: The reductions a fused function may end with, by name (as methods and NumPy's functions).
REDUCTIONS = tuple(name for name in _PARAMETERS if name != "reduce")
#: NumPy's functions of them.
FUNCTIONS: dict[Any, str] = {np.sum: "sum", np.prod: "prod", np.min: "min", np.amin: "min",
                             np.max: "max", np.amax: "max", np.mean: "mean", np.any: "any",
                             np.all: "all"}
#: The ufunc each reduces with (``mean``: a sum, divided by the count).
UFUNCS = {"sum": np.add, "mean": np.add, "prod": np.multiply, "min": np.minimum, "max": np.maximum,
          "any": np.logical_or, "all": np.logical_and}


@dataclass(frozen=True)
class Reduction:
    """``np.<name>`` of symbol ``symbol`` over ``axis`` (``None``: all), accumulated in ``dtype``;
    or, named ``"reduce"``, a reduction by ``combine`` (a binary kernel of ``dtype``'s loop,
    see :func:`combining`) starting from its identity ``start``."""

    name: str
    symbol: int
    axis: tuple[int, ...] | None
    keepdims: bool
    dtype: np.dtype
    combine: Kernel | None = None
    start: Any = None

    @property
    def ufunc(self) -> Any:
        """What reduces partial results: NumPy's ufunc, or the combining kernel."""
        return self.combine if self.combine is not None else UFUNCS[self.name]


class _NoAttribute(Unfusable, AttributeError):
    """An attribute of a reduction's result (code that probes with ``getattr`` finds none)."""


class Reduced:
    """What a reduction returns in a traced function: to be returned, not computed with."""

    def __init__(self, reduction: Reduction) -> None:
        self.reduction = reduction

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise Unfusable(f"the result of {self.reduction.name}() is not fused further: a fused "
                        "function ends with its reductions (compute with the result after the call)")

    def __getattr__(self, name: str) -> Any:
        raise _NoAttribute(f"the attribute .{name} of the result of a reduction is not fused")

    __hash__ = object.__hash__


for _name in ("array_ufunc", "array_function", "getitem", "bool", "float", "int", "neg", "pos", "abs",
              "lt", "le", "gt", "ge", "eq", "ne", "add", "radd", "sub", "rsub", "mul", "rmul", "truediv",
              "rtruediv", "floordiv", "rfloordiv", "mod", "rmod", "pow", "rpow"):
    setattr(Reduced, f"__{_name}__", Reduced._refuse)


def bind(name: str, args: tuple[Any, ...],
         kwargs: dict[str, Any]) -> tuple[Any, tuple[int, ...] | None, bool, Any]:
    """``np.<name>(*args, **kwargs)`` checked as NumPy's parameters: its operand, ``axis`` (a
    tuple, or ``None`` for all), ``keepdims`` and the ``dtype=`` given (``None``: none)."""
    bound = inspect.signature(_PARAMETERS[name]).bind(*args, **kwargs)
    bound.apply_defaults()
    given = bound.arguments
    for keyword in ("out", "initial", "where"):
        if keyword in given and given[keyword] is not _ABSENT and given[keyword] is not None:
            hint = " (give out= to the fused call)" if keyword == "out" else ""
            raise Unfusable(f"{name}({keyword}=...) is not fused{hint}")
    return given["a"], _axis(given["axis"]), bool(given["keepdims"]), given.get("dtype")


# -- reductions by a binary function (``np.hypot.reduce``, ``kernel.reduce``, reduction kernels) ---------
#: NumPy's ufuncs whose ``reduce`` is one of the named reductions (the same dtypes, axes, empty rule).
NAMED = {np.add: "sum", np.multiply: "prod", np.maximum: "max", np.minimum: "min",
         np.logical_or: "any", np.logical_and: "all"}


def _bitwise_and(a, b):
    return a & b


def _bitwise_or(a, b):
    return a | b


def _bitwise_xor(a, b):
    return a ^ b


def _logical_xor(a, b):
    return (a != 0) != (b != 0)


def _hypot(a, b):
    return math.hypot(a, b)


#: NumPy's associative ufuncs (an identity, any order of combination gives the value) that a
#: fused reduction combines with, as scalar functions; their loops are NumPy's.
ASSOCIATIVE = {np.bitwise_and: _bitwise_and, np.bitwise_or: _bitwise_or, np.bitwise_xor: _bitwise_xor,
               np.logical_xor: _logical_xor, np.hypot: _hypot}


def combining(combine: Any, values: np.dtype, requested: Any) -> tuple[Kernel, np.dtype, Any]:
    """The combining kernel, accumulation dtype and start (the identity, of that dtype) of a
    reduction of values of dtype ``values`` by ``combine``: a binary gpufuncs kernel with an
    identity, or one of NumPy's :data:`ASSOCIATIVE` ufuncs. ``requested``: ``dtype=``.

    The values are combined in an order of the reduction's own (pieces, then pairs), which
    gives the ufunc's value when it is associative and commutative, as NumPy's ``reduce``
    over several axes (and CuPy's ``ReductionKernel``) assume too."""
    if isinstance(combine, np.ufunc):
        if combine not in ASSOCIATIVE:
            raise Unfusable(f"np.{combine.__name__}.reduce is not fused (fused: the reductions of "
                            f"{', '.join(f'np.{u.__name__}' for u in (*NAMED, *ASSOCIATIVE))})")
        acc = np.asarray(combine.reduce(np.zeros(1, values), dtype=requested)).dtype  # NumPy's TypeError
        return _numpy_combining(combine, acc), acc, np.asarray(combine.identity).astype(acc)[()]
    spec = combine.spec
    if spec.is_gufunc or spec.nin != 2 or spec.nout != 1:
        raise Unfusable(f"{spec.name}.reduce needs a binary elementwise kernel of one output")
    if spec.identity is None:
        raise Unfusable(f"{spec.name}.reduce in a fused function needs a kernel with an identity "
                        "(declare identity=, the value a reduction starts from)")
    loop = call_loop(spec, [values, values], requested)  # (a lazy kernel's: the call on partials adds it)
    acc = loop.compiled.inputs[0]
    if not (loop.compiled.inputs[1] == acc == loop.outputs[0]):
        raise Unfusable(f"{spec.name}.reduce: its loop for {values} ({loop.signature}) "
                        "does not give values of the type it takes")
    return combine, acc, np.asarray(spec.identity).astype(acc)[()]


@functools.cache
def _numpy_combining(ufunc: np.ufunc, dtype: np.dtype) -> Kernel:
    """A kernel of ``ufunc``'s loop for ``dtype``: what the fused reductions call to combine."""
    from numba.np.numpy_support import from_dtype

    t = from_dtype(dtype)
    spec = KernelSpec(name=ufunc.__name__, pyfunc=ASSOCIATIVE[ufunc],
                      loops=(parse_loop(f"{t}({t}, {t})", 2, False),), layout=None, reference=ufunc,
                      tolerances={}, doc=f"np.{ufunc.__name__} of {dtype}", identity=ufunc.identity,
                      arg_names=("a", "b"))
    return Kernel(spec)


def _axis(axis: Any) -> tuple[int, ...] | None:
    if axis is None:
        return None
    if isinstance(axis, tuple):
        return tuple(operator.index(a) for a in axis)
    return (operator.index(axis),)


def accumulated(name: str, source: np.dtype, dtype: Any) -> np.dtype:
    """The dtype NumPy's ``np.<name>`` of values of ``source`` accumulates and returns in."""
    if name in ("any", "all"):
        return np.dtype(np.bool_)
    if name in ("min", "max"):
        if source.kind == "c":
            raise Unfusable(f"{name}() of complex values is not fused")
        return source
    if dtype is not None:
        return np.dtype(dtype)
    if name == "mean":
        return np.dtype(np.float64) if source.kind in "biu" else source
    return np.sum(np.zeros(1, source)).dtype  # int8 -> int64, uint8 -> uint64, bool -> int64


# -- the call -------------------------------------------------------------------------------------
#: A host reduction to one value of at least this many values is computed in :data:`PIECES`
#: pieces, which ``parallel`` and ``auto`` run on several cores (``cpu`` too, for the same bits;
#: fewer run on one core: at 2**15 float32 values the pieces made a sum 33 us, from 17, on two).
SPLIT = 1 << 17
PIECES = 64


#: The options of a call that a plan may be kept for (``out=None``; :func:`_plan_key`).
_PLANNED_OPTIONS = frozenset({"out", "target"})


def _plan_key(values: list[Any], options: dict[str, Any], axis: Any, keepdims: bool | None,
              finishing: Finishing | None) -> tuple[Any, ...] | None:
    """What a call with ``values`` decides on, for the plans of earlier calls: each
    argument's key as the call path keys it (its class, dtype, shape, contiguity, and
    device where there are several; a scalar's type), the axes and ``keepdims`` asked for,
    the target and the finish; ``None`` for a call with ``out=`` or other options."""
    if options and (options.get("out") is not None or not options.keys() <= _PLANNED_OPTIONS):
        return None
    if len(values) == 1:  # (the commonest: no map and unpacking)
        return options.get("target"), axis, keepdims, id(finishing), arg_key(values[0])
    return (options.get("target"), axis, keepdims, id(finishing), *map(arg_key, values))


def _is_scalar(value: Any) -> bool:
    return isinstance(value, (int, float, complex, np.generic)) or (
        type(value) is np.ndarray and value.ndim == 0)


def _broadcast_shape(arrays: list[Any]) -> tuple[int, ...]:
    """The shape ``arrays`` broadcast to. (``np.shape`` of a CuPy array is a dispatch through
    ``__array_function__`` of some microseconds: its ``shape`` where it has one.)"""
    shapes = [tuple(v.shape) if hasattr(v, "shape") else np.shape(v) for v in arrays]
    if all(s == shapes[0] for s in shapes):
        return shapes[0]
    return np.broadcast_shapes(*shapes)


def _axes(axis: tuple[int, ...] | None, ndim: int) -> tuple[int, ...]:
    """``axis`` as NumPy normalizes it for an array of ``ndim`` dimensions."""
    if axis is None:
        return tuple(range(ndim))
    normalized = tuple(np.lib.array_utils.normalize_axis_index(a, ndim) for a in axis)
    if len(set(normalized)) != len(normalized):
        raise ValueError("duplicate value in 'axis'")
    return normalized


@dataclass(frozen=True)
class Finishing:
    """A reduction kernel's finishing step for results of one dtype: ``apply(result)`` runs
    it on a computed result; ``kernel``, an elementwise kernel of one argument (or ``None``),
    computes the same step, and the one-launch GPU reduction runs it in its last block."""

    apply: Callable[[Any], Any]
    kernel: Kernel | None


class ReducingPart:
    """One returned reduction, computed by a kernel per choice of which arguments are arrays."""

    def __init__(self, reduction: Reduction, arguments: tuple[int, ...], dtypes: list[np.dtype],
                 name: str, names: tuple[str, ...],
                 make_body: Callable[[tuple[bool, ...]], Callable[..., Any]]) -> None:
        self.reduction, self.arguments, self.name, self.names = reduction, arguments, name, names
        self._dtypes, self._make_body = dtypes, make_body
        self._kernels: dict[tuple[tuple[bool, ...], bool, bool, bool], Kernel] = {}
        #: The elementwise kernel of the values reduced (see ``Fused.reduced``).
        self.values: Kernel | None = None
        #: The single-pass GPU reductions, made on first use: by the finish they apply (or None).
        self._one_launch: dict[Kernel | None, Any] = {}
        #: What calls decided, by everything they decided on (see :func:`_plan_key`):
        #: ``plan(values)`` runs the reduction the way they chose, and the steps after it (the
        #: deciding is most of a small reduction's time, on the host as on the GPU).
        self._plans: dict[tuple[Any, ...], Callable[[list[Any]], Any]] = {}

    def __call__(self, args: tuple[Any, ...], options: dict[str, Any], axis: Any = _ABSENT,
                 keepdims: bool | None = None, finishing: Finishing | None = None) -> Any:
        """The reduction of a call with ``args``; ``axis`` and ``keepdims``, where given,
        in place of the traced ones (a reduction kernel's call gives its own), finished by
        ``finishing`` where it is given (not with ``out=``)."""
        r = self.reduction
        values = [args[i] for i in self.arguments]
        key = _plan_key(values, options, axis, keepdims, finishing)
        plan = None if key is None else lookup(self._plans, key)
        if plan is not None:
            return plan(values)
        arrays = tuple(not _is_scalar(v) for v in values)
        if not any(arrays):  # a reduction of scalars: of a 0-d array
            arrays = (True, *arrays[1:])
        shape = _broadcast_shape([v for v, a in zip(values, arrays) if a])
        axes = _axes(r.axis if axis is _ABSENT else _axis(axis), len(shape))
        keepdims = r.keepdims if keepdims is None else bool(keepdims)
        kept = [d for d in range(len(shape)) if d not in axes]
        reduced = sorted(axes)
        count = math.prod(shape[d] for d in reduced)
        if count == 0 and r.name in ("min", "max"):
            raise ValueError(f"zero-size array to reduction operation {r.ufunc.__name__} "
                             "which has no identity")
        out = options.pop("out", None)
        self._refuse_subclasses(values)
        on_device = self._on_device(values, options)
        # The finish in the one launch where there is one (a launch less), else applied after.
        fold = None if finishing is None or r.name == "mean" or r.dtype.kind == "b" else finishing.kernel
        run: Callable[[list[Any]], Any] | None = None
        if on_device:
            run = self._in_one_launch(values, arrays, shape, kept, options, fold)
            if run is None:  # (the GPU's pieces: decided on every call)
                key = None
        if run is None:
            fold = None
            if not on_device and _by_columns(values, arrays, shape, reduced):
                def run(values: list[Any]) -> Any:
                    return self._columns(values, arrays, shape, kept, reduced[0], options)
            elif not on_device and key is not None and not _in_pieces(shape, kept, reduced):
                run = self._rows(values, arrays, shape, kept, reduced, options)
            else:
                def run(values: list[Any]) -> Any:
                    return self._by_cores(values, arrays, shape, kept, reduced, options, on_device)
        apply = None if finishing is None or fold is not None else finishing.apply

        def plan(values: list[Any], out: Any = None) -> Any:
            done = self._finish(run(values), count, axes, shape, keepdims, out)
            return done if apply is None else apply(done)

        if key is not None:  # (a call with out= has none: see _plan_key)
            keep(self._plans, key, plan)
        return plan(values, out)

    def planned(self, args: tuple[Any, ...],
                options: dict[str, Any]) -> Callable[[tuple[Any, ...]], Any] | None:
        """What a call of this reduction with ``args`` (the fused function's) and ``options``
        (``target=`` at most) kept as its plan, as a function of the fused function's
        arguments, for later calls with arguments of the same keys; ``None`` where it kept
        none (a GPU reduction in pieces decides on every call)."""
        arguments = self.arguments
        plan = lookup(self._plans, _plan_key([args[i] for i in arguments], options, _ABSENT, None, None))
        if plan is None:
            return None
        if arguments == tuple(range(len(args))):
            return lambda args: plan(list(args))
        return lambda args: plan([args[i] for i in arguments])

    def _by_cores(self, values: list[Any], arrays: tuple[bool, ...], shape: tuple[int, ...],
                  kept: list[int], reduced: list[int], options: dict[str, Any], on_device: bool) -> Any:
        """The reduction by a kernel whose core is the reduced axes (see :func:`_core_view`):
        on the GPU in pieces, on the host in :data:`PIECES` pieces for a long reduction to one
        value, else a row of the loop per result."""
        r = self.reduction
        operands = [_core_view(v, shape, kept, reduced) if a else _scalar(v) for v, a in zip(values, arrays)]
        if on_device:
            kernel = self._kernel(arrays, on_device=True)
            return self._combine_rows(in_pieces(kernel, operands, arrays, options, r.dtype), len(kept))
        if _in_pieces(shape, kept, reduced):
            return np.reshape(self._split(operands, arrays, options), [shape[d] for d in kept])
        result = self._host_call(operands, arrays, options)
        if len(reduced) > 2:  # the kernel's core took the last two reduced axes; the others remain
            result = _reduce_trailing(r, result, len(kept))
        return result

    def _rows(self, values: list[Any], arrays: tuple[bool, ...], shape: tuple[int, ...], kept: list[int],
              reduced: list[int], options: dict[str, Any]) -> Callable[[list[Any]], Any]:
        """:meth:`_by_cores`' host reduction by rows as a plan's step, for values like these:
        the kernel and its resolved call are chosen once, here. Each later call's core views
        are laid out as these are (their layouts follow from the arguments', which the plan's
        key holds), so they are of the call signature resolved here, as the kernel's own keyed
        call would find it; a small reduction's time was mostly this choosing."""
        r = self.reduction
        trailing = len(kept) if len(reduced) > 2 else None  # see _by_cores

        cores = [_core_view(v, shape, kept, reduced) if a else v for v, a in zip(values, arrays)]
        kernel, one_row = self._host_kernel(cores, arrays)
        core = _row_view if one_row else _core_view
        # (a kernel of one-row cores sums the whole row: its values 0 to length)
        whole_row = (_LO, np.int64(cores[arrays.index(True)].shape[-1])) if one_row else ()
        if one_row and not kept and options.get("target", "auto") in ("parallel", "auto"):
            def rows(values: list[Any]) -> list[Any]:
                return [_row_view(v, shape, kept, reduced) if a else _scalar(v)
                        for v, a in zip(values, arrays)]

            split = self._in_subtrees(kernel, rows(values), int(whole_row[1]), options)
            if split is not None:
                return lambda values: split(rows(values))

        def views(values: list[Any]) -> tuple[Any, ...]:
            if len(values) == 1:  # (the commonest: no generator; one argument is an array, see __call__)
                return (core(values[0], shape, kept, reduced), *whole_row)
            return (*(core(v, shape, kept, reduced) if a else _scalar(v) for v, a in zip(values, arrays)),
                    *whole_row)

        operands = views(values)
        resolved = kernel.resolve(*operands, **options)
        if not isinstance(resolved, ResolvedCall):  # (a call handed to an argument's library)
            def run(values: list[Any]) -> Any:
                return self._by_cores(values, arrays, shape, kept, reduced, options, False)
            return run

        def run(values: list[Any]) -> Any:
            result = resolved._run(views(values), ABSENT, ABSENT, {})
            return result if trailing is None else _reduce_trailing(r, result, trailing)

        return run

    def _in_subtrees(self, kernel: Kernel, operands: list[Any], length: int,
                     options: dict[str, Any]) -> Callable[[list[Any]], Any] | None:
        """A host reduction of one row of ``length`` values to one value on the cores (see
        :func:`numpy_subtrees`, a part for each of Numba's threads, up to :data:`PIECES`),
        ``None`` for a row too short to share (:data:`SHARED_FROM`): ``split(operands)``
        (the row views and scalars, laid out as ``operands``, whose call is resolved here, as
        :meth:`_rows` resolves its) runs ``kernel`` (of one-row cores) on the subtrees' parts
        of the row, a loop element each, under ``parallel``, and adds their sums as NumPy's
        pairwise summation adds them, in the dtype of the sum: NumPy's bits, as on one core."""
        share = min(numba.get_num_threads(), length // SUBTREE, PIECES) if length >= SHARED_FROM else 1
        if share < 2:
            return None
        parts: list[tuple[int, int]] = []  # (2 ** depth of them at most: the tree's levels cut whole)
        tree = numpy_subtrees(0, length, share.bit_length() - 1, parts)
        lo, count = (np.array(p, np.int64) for p in zip(*parts))
        zero = self.reduction.dtype.type(0)
        # (the row broadcast against the parts: passed whole to every loop element)
        resolved = kernel.resolve(*operands, lo, count, **{**options, "target": "parallel"})
        if not isinstance(resolved, ResolvedCall):  # pragma: no cover - host rows are NumPy's
            return None

        def split(operands: list[Any]) -> Any:
            return zero + _added(tree, resolved._run((*operands, lo, count), ABSENT, ABSENT, {}))

        return split

    def _columns(self, values: list[Any], arrays: tuple[bool, ...], shape: tuple[int, ...],
                 kept: list[int], axis: int, options: dict[str, Any]) -> Any:
        """A host reduction over one ``axis`` that keeps the last (see :func:`_by_columns`):
        each array as ``(*kept but the last, axis, last)`` views, the kernel's core ``(m, k)``,
        summed row after row into ``k`` columns (see :func:`.emit._columns`)."""
        order = (*kept[:-1], axis, kept[-1])
        operands = [np.transpose(_broadcast(v, shape), order) if a else _scalar(v)
                    for v, a in zip(values, arrays)]
        return self._host_call(operands, arrays, options, columns=True)

    def _in_one_launch(self, values: list[Any], arrays: tuple[bool, ...], shape: tuple[int, ...],
                       kept: list[int], options: dict[str, Any],
                       finish: Kernel | None = None) -> Callable[[list[Any]], Any] | None:
        """A reduction to one value of C-contiguous CuPy arrays of the whole shape (and
        scalars) in one launch (see :mod:`gpufuncs.targets.cuda.single_pass`): ``run(values)``
        gives the 0-d CuPy array for values like these, ``finish`` (an elementwise kernel of
        one argument) applied where given; ``None`` where that does not apply (it takes the
        pieces instead, as a call with ``stream=`` or ``device=`` does: the one launch runs
        on the current stream)."""
        r, n = self.reduction, math.prod(shape)
        if r.dtype.kind == "c" or n == 0 or math.prod(shape[d] for d in kept) != 1 or self.values is None:
            return None
        if options.keys() - {"target"} or options.get("target", "cuda") not in ("auto", "cuda"):
            return None
        loop = self.values.spec.loops[0].inputs
        for v, a, dtype in zip(values, arrays, loop):
            if a and not (library_of(type(v)) == "cupy" and tuple(v.shape) == shape and v.dtype == dtype
                          and v.flags.c_contiguous):
                return None
        launch = self._one_launch.get(finish)
        if launch is None:
            launch = self._one_launch[finish] = _single_pass(r, self.values, finish)
        # A reduction by a combining kernel starts from its identity, as NumPy's does
        # (np.hypot.reduce([-3.0]) is 3.0); the others' first values are what an identity gives.
        start = r.start if r.name == "reduce" else None
        zeros = tuple(d.type(0) for d in loop)
        # (a finish gives its output's dtype: a reduction of booleans is not finished here)
        stored = _kept_as(r.dtype) if finish is None else finish.spec.loops[0].outputs[0]
        viewed = None if finish is not None or stored == r.dtype else r.dtype

        def run(values: list[Any]) -> Any:
            operands = [v if a else _scalar(v) for v, a in zip(values, arrays)]
            result = launch(operands, zeros, n, stored, start)
            return result if viewed is None else result.view(viewed)

        return run

    def _refuse_subclasses(self, values: list[Any]) -> None:
        """NumPy's array subclasses reduce differently (a masked array skips its masked values,
        a matrix keeps two dimensions): refused, never reduced as plain arrays."""
        for v in values:
            if isinstance(v, np.ndarray) and type(v) is not np.ndarray:
                raise TypeError(f"fused function {self.name!r}: reductions of {type(v).__name__} "
                                "(a subclass of numpy.ndarray) are not fused, since NumPy's own "
                                "reduction of one may differ (a mask, a matrix's shape); pass "
                                "np.asarray(...) or reduce the fused elementwise result")

    def _on_device(self, values: list[Any], options: dict[str, Any]) -> bool:
        """Whether the call runs on the GPU (refusing device arrays it cannot take as they are)."""
        devices = [v for v in values if _on_device(v)]
        for v in devices:  # (NumPy's functions reach CuPy's: views of the others would be copies)
            if library_of(type(v)) != "cupy":
                raise TypeError(f"fused function {self.name!r}: reductions of {type(v).__name__} device "
                                "arrays are not fused yet (CuPy's and host arrays are); reduce "
                                "the fused elementwise function's result instead")
        return options.get("target") == "cuda" or bool(devices)

    def _split(self, operands: list[Any], arrays: tuple[bool, ...], options: dict[str, Any]) -> Any:
        """A host reduction to one value in :data:`PIECES` pieces (each core cut into equal
        chunks of its rows where it has that many, else of its last axis: loop elements that
        ``parallel`` spreads over the cores) and the remainder, their results combined exactly
        (floating sums by ``math.fsum``). The pieces depend on the shape only: the same bits on
        every run, whatever the number of cores. Whole rows keep a C array's pieces C-ordered,
        which the vectorized kernel reads (a (1000, 1000) array cut by columns took 8x
        NumPy's sum: pieces of 15 columns, read by strides)."""
        m, n = next(v for v, a in zip(operands, arrays) if a).shape[-2:]
        axis, length = (-2, m) if m >= PIECES else (-1, n)
        if length < PIECES:
            return self._combine([self._host_call(operands, arrays, options)])
        if options.get("target", "auto") == "auto":
            # The pieces are there for the cores: ``auto`` alone measures a generalized kernel's
            # call by its loop elements, 64 pieces here, and takes ``cpu`` below ALWAYS_CPU.
            options = {**options, "target": "parallel"}
        size = length // PIECES
        pieces = [cut(v, axis, PIECES, size) if a else v for v, a in zip(operands, arrays)]
        parts = [self._host_call(pieces, arrays, options, pieces=True)]
        if length % PIECES:
            rest = [(v[..., PIECES * size:, :] if axis == -2 else v[..., PIECES * size:]) if a else v
                    for v, a in zip(operands, arrays)]
            parts.append(self._host_call(rest, arrays, options, pieces=True))
        return self._combine(parts)

    def _combine_rows(self, parts: Any, kept: int) -> Any:
        """``parts`` (host or CuPy, ``(*kept, ...)``) reduced over its axes after the ``kept``
        ones: floating sums in ``float64`` (``complex128``), rounded once to the accumulation
        dtype; the others with the reduction's own method (exact)."""
        r = self.reduction
        axes = tuple(range(kept, parts.ndim))
        if not axes:
            return parts
        if r.name in ("sum", "mean") and r.dtype.kind in "fc":
            wide = np.complex128 if r.dtype.kind == "c" else np.float64
            return parts.sum(axis=axes, dtype=wide).astype(r.dtype)
        if r.combine is not None:
            return _reduce_trailing(r, parts, kept)
        method = "sum" if r.name == "mean" else r.name
        return getattr(parts, method)(axis=axes, **({"dtype": r.dtype} if method in ("sum", "prod") else {}))

    def _combine(self, parts: list[Any]) -> Any:
        r = self.reduction
        flat = [np.reshape(p, -1) for p in parts]
        values = flat[0] if len(flat) == 1 else np.concatenate(flat)
        # (fsum of a list of Python floats: a NumPy array's items are NumPy scalars, 3x slower)
        if r.name in ("sum", "mean") and r.dtype.kind == "f":
            return r.dtype.type(math.fsum(values.tolist()))
        if r.name in ("sum", "mean") and r.dtype.kind == "c":
            return r.dtype.type(complex(math.fsum(values.real.tolist()), math.fsum(values.imag.tolist())))
        return r.ufunc.reduce(values, dtype=r.dtype)

    def _finish(self, result: Any, count: int, axes: tuple[int, ...], shape: tuple[int, ...],
                keepdims: bool, out: Any) -> Any:
        """``mean``'s division, ``keepdims``' shape (``shape`` with ones on ``axes``), a scalar
        for a 0-d result, ``out=``."""
        r = self.reduction
        if r.name == "mean":
            result = _mean(result, count)
        if keepdims:
            result = np.reshape(result, [1 if d in axes else n for d, n in enumerate(shape)])
        if isinstance(result, np.ndarray) and result.ndim == 0:
            result = result[()]
        return result if out is None else _into(out, result, r)

    def source(self) -> str:
        """The text of the kernel that host calls with array arguments run."""
        return self._make_body((True,) * len(self.arguments)).source

    def _host_call(self, operands: list[Any], arrays: tuple[bool, ...], options: dict[str, Any],
                   columns: bool = False, pieces: bool = False) -> Any:
        """The host kernel's call on these core views (see :meth:`_host_kernel`): cores of one
        row as the rows, where its kernel takes those."""
        kernel, one_row = self._host_kernel(operands, arrays, columns, pieces)
        if not one_row:
            return kernel(*operands, **options)
        rows = [v[..., 0, :] if a else v for v, a in zip(operands, arrays)]
        return kernel(*rows, _LO, np.int64(rows[arrays.index(True)].shape[-1]), **options)

    def _host_kernel(self, operands: list[Any], arrays: tuple[bool, ...], columns: bool = False,
                     pieces: bool = False) -> tuple[Kernel, bool]:
        """The host kernel for these core views: the one for C-ordered cores where every
        array's is (loads the compiler can vectorize), else the one for any strides. Checked
        on every call, as the views are made per call: a kernel compiled for C-ordered cores
        reads a strided one wrongly, without a word. ``pieces``: the cores are pieces of one
        reduction (see :meth:`_split`), whose rows are not summed as NumPy sums a row; other
        cores of one row are, by a kernel of their own, whose core is the row (see
        :func:`.emit.reduction_function`): returned with whether that is the kernel."""
        ordered = all(_c_ordered_core(v) for v, a in zip(operands, arrays) if a)
        one_row = (not (columns or pieces) and sums_rows_as_numpy(self.reduction)
                   and next(v for v, a in zip(operands, arrays) if a).shape[-2] == 1)
        kernel = self._kernel(arrays, on_device=False, c_ordered=ordered, columns=columns, one_row=one_row)
        return kernel, one_row

    def _kernel(self, arrays: tuple[bool, ...], on_device: bool, c_ordered: bool = False,
                columns: bool = False, one_row: bool = False) -> Kernel:
        """The kernel for arguments that are arrays where ``arrays`` says so: GPU threads add
        one value at a time (``on_device``), host loops a block of values at a time;
        ``c_ordered``: for core views in C order only (see :meth:`_host_kernel`); ``columns``:
        ``(m,k)->(k)``, reducing the first core axis (see :meth:`_columns`); ``one_row``: the
        host body for cores of one row (see :func:`.emit.reduction_function`)."""
        key = (arrays, on_device, c_ordered, columns, one_row)
        found = self._kernels.get(key)
        if found is None:
            found = self._kernels[key] = Kernel(self._spec(arrays, on_device, c_ordered, columns, one_row))
        return found

    def _spec(self, arrays: tuple[bool, ...], on_device: bool, c_ordered: bool, columns: bool,
              one_row: bool) -> KernelSpec:
        from numba.np.numpy_support import from_dtype

        core = {(False, False): "[:, :]", (False, True): "[:, ::1]", (True, False): "[:]",
                (True, True): "[::1]"}[one_row, c_ordered]
        types = [f"{from_dtype(d)}{core}" if a else str(from_dtype(d)) for d, a in zip(self._dtypes, arrays)]
        part = ["int64", "int64"] if one_row else []  # (lo and length: the part of the row summed)
        signature = f"void({', '.join([*types, *part])}, {from_dtype(self.reduction.dtype)}[:])"
        core_layout, result = ("(m,k)", "(k)") if columns else ("(n)", "()") if one_row else ("(m,n)", "()")
        cores = [*(core_layout if a else "()" for a in arrays), *("()",) * len(part)]
        layout = ",".join(cores) + "->" + result
        nargs = len(arrays) + len(part) + 1
        body = self._make_body(arrays, blocked=not on_device, columns=columns, one_row=one_row)
        return KernelSpec(name=self.name, pyfunc=body,
                          loops=(parse_loop(signature, nargs, True, nout=1),), layout=parse_layout(layout),
                          reference=None, tolerances={}, doc="",
                          arg_names=(*self.names, *(("lo", "length") if one_row else ()), "out"))


#: Types whose values are never on a GPU: no need to ask :func:`describe` (a call's cost).
_HOST_TYPES = (np.ndarray, np.generic, float, int, complex, bool)


def _on_device(value: Any) -> bool:
    if isinstance(value, _HOST_TYPES):
        return False
    if library_of(type(value)) == "cupy":  # always on a GPU
        return True
    arg = describe(value)
    return arg is not None and arg.role == DEVICE


def _broadcast(value: Any, shape: tuple[int, ...]) -> Any:
    """``value`` broadcast to ``shape``: a view, never a copy."""
    # Each of NumPy's functions on a CuPy array is a dispatch of some microseconds: none where
    # nothing changes, as for the commonest call, the whole of one array. (Subclasses and other
    # array-likes still go through broadcast_to, which gives a plain array, as before.)
    plain = type(value) is np.ndarray or library_of(type(value)) == "cupy"
    return value if plain and value.shape == shape else np.broadcast_to(value, shape)


def sums_rows_as_numpy(reduction: Reduction) -> bool:
    """Whether a host reduction of cores of one row has a body of its own, that sums each row
    as NumPy does (:func:`.emit._row_as_numpy`): a float32 or float64 sum or mean."""
    return reduction.name in ("sum", "mean") and reduction.dtype in (np.float32, np.float64)


def _in_pieces(shape: tuple[int, ...], kept: list[int], reduced: list[int]) -> bool:
    """Whether a host reduction is computed in :data:`PIECES` pieces: one value of many."""
    return math.prod(shape[d] for d in reduced) >= SPLIT and math.prod(shape[d] for d in kept) == 1


def _by_columns(values: list[Any], arrays: tuple[bool, ...], shape: tuple[int, ...],
                reduced: list[int]) -> bool:
    """Whether a host reduction runs by columns (see :meth:`ReducingPart._columns`): one
    reduced axis, not the last, and the first array steps through the last axis by a shorter
    stride than through the reduced one (a C array's rows: ``x.sum(axis=0)``), where the
    reduction by cores would read each column by its stride."""
    if len(reduced) != 1 or reduced[0] == len(shape) - 1 or shape[-1] < 2:
        return False
    first = _broadcast(next(v for v, a in zip(values, arrays) if a), shape)
    return abs(first.strides[-1]) < abs(first.strides[reduced[0]])


def _single_pass(r: Reduction, values: Kernel, finish: Kernel | None = None) -> Any:
    """The one-launch GPU reduction of ``r`` of the values that ``values`` computes: each
    value cast to the accumulation dtype (truth for ``any``/``all``), combined by ``r``'s
    step (floating sums and means: compensated, see the single-pass module), ``finish``
    applied to the result where given."""
    from ..targets.cuda.single_pass import SinglePass

    kind = _kept_as(r.dtype).type
    if r.dtype.kind == "b":
        def value(args):
            return kind(values(*args) != 0)
    else:
        def value(args):
            return kind(values(*args))
    def finished(result):
        return finish(result)

    return SinglePass(value, _step(r), _kept_as(r.dtype), None if finish is None else finished)


def _kept_as(dtype: np.dtype) -> np.dtype:
    """The dtype a GPU reduction keeps values of ``dtype`` in: booleans as bytes."""
    return np.dtype(np.uint8) if dtype.kind == "b" else dtype


def _step(r: Reduction) -> Any:
    """``r``'s combination of two accumulated values as a scalar function (``None`` for a
    floating sum, which the single-pass reduction compensates)."""
    kind, name, combine = _kept_as(r.dtype).type, r.name, r.combine
    if name in ("sum", "mean") and r.dtype.kind == "f":
        return None
    steps = {"sum": lambda a, b: kind(a + b), "mean": lambda a, b: kind(a + b),
             "prod": lambda a, b: kind(a * b), "min": lambda a, b: minimum(a, b),
             "max": lambda a, b: maximum(a, b), "any": lambda a, b: kind(a | b),
             "all": lambda a, b: kind(a & b), "reduce": lambda a, b: kind(combine(a, b))}
    return steps[name]


def _reduce_trailing(r: Reduction, values: Any, kept: int) -> Any:
    """``values`` (host or CuPy, ``(*kept, ...)``) reduced over its axes after the ``kept``
    ones by ``r``'s ufunc, or by its combining kernel over those axes as one (a kernel's
    ``reduce`` on the GPU takes them so)."""
    if r.combine is None:
        return r.ufunc.reduce(values, axis=tuple(range(kept, values.ndim)), dtype=r.dtype)
    return r.combine.reduce(values.reshape((*values.shape[:kept], -1)), axis=-1, dtype=r.dtype)


def _core_view(value: Any, shape: tuple[int, ...], kept: list[int], reduced: list[int]) -> Any:
    """``value`` broadcast to ``shape``, its reduced axes last, with exactly two of them (the
    kernel's core; more are reduced again after the call): a view, never a copy."""
    view = _broadcast(value, shape)
    if not kept and len(reduced) == 1:  # (the commonest, a 1-D array reduced: its one row)
        return view[None, :]
    order = (*kept, *reduced)
    if order != tuple(range(len(shape))):
        view = np.transpose(view, order)
    if len(reduced) == 0:
        return view[..., None, None]
    return view[..., None, :] if len(reduced) == 1 else view


#: The first value a kernel of one-row cores sums (``lo``: see :func:`.emit.reduction_function`).
_LO = np.int64(0)

#: A row of this many values or more reduced to one value is summed on the cores (``parallel`` or
#: ``auto``) in parts of its pairwise tree (:func:`numpy_subtrees`), a part a thread, each of
#: :data:`SUBTREE` values or more. Measured on the 2-core machine, float32 log-likelihood / float64
#: ``x.sum()``, us, one core against two: at 2^15 values 29 / 8.3 against 21 / 10.6, at 2^16 52 /
#: 11.8 against 33 / 12.4, at 10^5 77 / 19.3 against 46 / 15.7 (a plain sum gains later: the
#: threads' start is its whole time below 2^16).
SHARED_FROM = 1 << 16
SUBTREE = 1 << 13


def numpy_subtrees(lo: int, n: int, depth: int, parts: list[tuple[int, int]]) -> Any:
    """NumPy's pairwise summation of the ``n`` values from ``lo`` (see :func:`pairwise_next`)
    cut ``depth`` levels down: the parts ``(first, length)`` appended to ``parts`` in order
    (a part of at most :data:`BLOCK` values is not cut), and the tree returned, a part's index
    or a pair of trees. The row's sum is the parts' sums added as the tree says (:func:`_added`):
    NumPy's own additions, in its order."""
    if depth == 0 or n <= BLOCK:
        parts.append((lo, n))
        return len(parts) - 1
    half = n // 2
    half -= half % 8
    return numpy_subtrees(lo, half, depth - 1, parts), numpy_subtrees(lo + half, n - half, depth - 1, parts)


def _added(tree: Any, sums: np.ndarray) -> Any:
    """The sums of :func:`numpy_subtrees`' parts added as its ``tree`` says (NumPy scalars of
    their dtype: each addition rounded to it, as in NumPy's loop)."""
    if isinstance(tree, int):
        return sums[tree]
    return _added(tree[0], sums) + _added(tree[1], sums)


def _row_view(value: Any, shape: tuple[int, ...], kept: list[int], reduced: list[int]) -> Any:
    """:func:`_core_view` of a reduction whose core is one row: the row (a core ``(n)``)."""
    if not kept and len(reduced) == 1:  # (the commonest, a 1-D array reduced: itself)
        return _broadcast(value, shape)
    return _core_view(value, shape, kept, reduced)[..., 0, :]


def _c_ordered_core(view: Any) -> bool:
    """Whether the core of ``view`` (its last two axes) lies in C order, as a kernel declared
    for C-ordered cores indexes it (axes of one element may have any stride)."""
    *_, m, n = view.shape
    *_, sm, sn = view.strides
    item = view.itemsize
    return (n <= 1 or sn == item) and (m <= 1 or sm == n * item)


def _scalar(value: Any) -> Any:
    return value[()] if isinstance(value, np.ndarray) else value


def _mean(total: Any, count: int) -> Any:
    """NumPy's ``mean`` from the sum, as ``numpy._core._methods._mean`` finishes it."""
    if count == 0:
        warnings.warn("Mean of empty slice.", RuntimeWarning, stacklevel=4)
    if isinstance(total, np.ndarray) and total.ndim:
        return np.true_divide(total, count, out=total, casting="unsafe")
    if isinstance(total, (np.ndarray, np.generic)):
        return total.dtype.type(total / count)
    return (total / count).astype(total.dtype, copy=False)  # a device array's library's division


def _into(out: Any, result: Any, r: Reduction) -> Any:
    """``result`` written into ``out``, checked first as NumPy checks a reduction's ``out=``."""
    shape = np.shape(result)
    if tuple(out.shape) != shape:
        raise ValueError(f"{r.name}: out= has shape {tuple(out.shape)}, the result has shape {shape}")
    if not np.can_cast(np.result_type(result), out.dtype, "same_kind"):
        raise TypeError(f"Cannot cast ufunc '{r.ufunc.__name__}' output from {np.result_type(result)!r} "
                        f"to {out.dtype!r} with casting rule 'same_kind'")
    out[...] = result
    return out


# -- compensated sums: njit helpers the reduction kernels call ----------------------------------------
@numba.njit(fastmath={"reassoc"})
def wide_block_sum(values, m, zero):
    """The plain sum of ``values[:m]`` (``float32`` or ``complex64``) in ``zero``'s wider type,
    in the order the compiler's vector lanes give (fixed by the compiled code: the same bits
    on every run). Every value is exact in the wider type and a block is short, so the order
    costs nothing NumPy's pairwise summation keeps; a loop in one fixed order (eight running
    sums, as NumPy sums a block) runs at a fraction of the speed."""
    total = zero
    for j in range(m):
        total += values[np.uint64(j)]
    return total


@intrinsic
def _eight_lanes(typingctx: Any, values: Any, whole: Any) -> Any:
    """``(r0, ..., r7)``: ``r_k = values[k] + values[8 + k] + values[16 + k] + ...`` over the
    first ``whole`` values (a multiple of 8, at least 8; ``values`` a contiguous float32 or
    float64 array, a kernel's scratch), each lane's adds in that order: NumPy's eight running
    sums of a block, added as eight-wide vectors (LLVM keeps the eight scalar sums of the same
    loop in scalars: 1.5x NumPy's time for rows of 1,000 values)."""
    if not (isinstance(values, types.Array) and values.ndim == 1 and values.layout == "C"
            and values.dtype in (types.float32, types.float64)):
        return None
    dtype = values.dtype

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        array, count = args
        pointer = context.make_array(values)(context, builder, array).data
        item = context.get_value_type(dtype)
        vector = ir.VectorType(item, 8)
        align = context.get_abi_sizeof(item)

        def load(at: Any) -> Any:
            return builder.load(builder.bitcast(builder.gep(pointer, [at]), vector.as_pointer()), align=align)

        running = cgutils.alloca_once_value(builder, load(count.type(0)))
        with cgutils.for_range_slice(builder, count.type(8), count, count.type(8)) as (at, _):
            builder.store(builder.fadd(builder.load(running), load(at)), running)
        lanes = builder.load(running)
        return context.make_tuple(builder, sig.return_type,
                                  [builder.extract_element(lanes, ir.IntType(32)(k)) for k in range(8)])

    return types.UniTuple(dtype, 8)(values, whole), codegen


#: The pairwise helpers take the kernels' stack arrays (:func:`..targets.cpu.loops.scratch`), which
#: no reference counts keep (as the kernels' bodies, they compile without them), and LLVM
#: inlines them (Numba's own ``inline="always"`` made a fused sum's first call 0.1 s longer).
_stack_helper = numba.njit(_nrt=False)


#: From this many values a block's eight running sums are one vector (:func:`_eight_lanes`): a
#: vector load of values just stored one by one waits for the stores (store-to-load forwarding
#: fails), a few ns that a row of 10 values does not make up.
_VECTOR_LANES_FROM = 32


@_stack_helper
def numpy_block_sum(values, n):
    """``values[:n]`` (``0 < n <= BLOCK``) summed as the base case of NumPy's pairwise
    summation: fewer than 8 values one after the other from ``-0.0``, else eight running sums
    over every eighth value, added as a tree, then the values past the last eight."""
    if n < 8:  # (from values[0]: -0.0 + v is v)
        s = values[0]
        for j in range(1, n):
            s += values[np.uint64(j)]
        return s
    whole = n - n % 8
    if whole >= _VECTOR_LANES_FROM:
        r0, r1, r2, r3, r4, r5, r6, r7 = _eight_lanes(values, whole)
    else:
        r0, r1, r2, r3 = values[0], values[1], values[2], values[3]
        r4, r5, r6, r7 = values[4], values[5], values[6], values[7]
        for j in range(8, whole, 8):
            u = np.uint64(j)
            r0, r1, r2, r3 = r0 + values[u], r1 + values[u + 1], r2 + values[u + 2], r3 + values[u + 3]
            r4, r5, r6, r7 = r4 + values[u + 4], r5 + values[u + 5], r6 + values[u + 6], r7 + values[u + 7]
    s = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    for j in range(whole, n):
        s += values[np.uint64(j)]
    return s


# NumPy's pairwise summation of a row of n values, without recursion, for a kernel that computes
# the row's values block by block (the values are not stored: a row is read once). NumPy sums n
# <= BLOCK values as numpy_block_sum does and splits a longer row at n // 2 rounded down to a
# multiple of 8, the sum of the halves' sums. pairwise_begin gives the length of the first
# block (the first leaf of that tree); the kernel fills it and hands it to pairwise_leaf, and
# asks pairwise_next for the next one, left to right; when that is 0, pairwise_total is the
# sum. ``tree`` (int64, of PAIRWISE_TREE) holds the count of pending entries, the count of
# partial sums, then the entries: a length to split or sum, or -1, the add of the two latest
# partial sums (in ``sums``, of PAIRWISE_SUMS). Each split pends its two halves and their add:
# at most two entries a level, and a row of n values has fewer than 64 levels.

#: The sizes of the ``tree`` and ``sums`` scratch arrays of the pairwise helpers.
PAIRWISE_TREE, PAIRWISE_SUMS = 2 + 2 * 64, 64


@_stack_helper
def pairwise_begin(tree, sums, n):
    """Start the pairwise summation of a row of ``n`` values (see above): the length of its
    first block (0 for none). A row of one block has nothing pending (it is most rows)."""
    tree[0], tree[1] = 0, 0
    if n <= BLOCK:
        return n
    tree[0], tree[2] = 1, n
    return pairwise_next(tree, sums)


@_stack_helper
def pairwise_next(tree, sums):
    """The length of the next block of the row (0: the row is summed), after adding the
    partial sums whose halves are both summed."""
    while tree[0]:
        top = tree[0] + 1  # the last entry; its slot is the first free one once it is taken
        size = tree[top]
        tree[0] -= 1
        if size < 0:
            held = tree[1] - 1
            sums[held - 1] += sums[held]
            tree[1] = held
        elif size <= BLOCK:
            return size
        else:
            half = size // 2
            half -= half % 8
            tree[top], tree[top + 1], tree[top + 2] = -1, size - half, half  # (left half first)
            tree[0] += 3
    return 0


@_stack_helper
def pairwise_leaf(tree, sums, values, n):
    """Sum the block ``values[:n]`` that :func:`pairwise_next` asked for."""
    sums[tree[1]] = numpy_block_sum(values, n)
    tree[1] += 1


@_stack_helper
def pairwise_total(tree, sums, zero):
    """The row's sum once :func:`pairwise_next` answered 0, added to the reduction's identity
    ``zero`` as NumPy's ``add.reduce`` adds it (zeros of either sign sum to ``+0.0``)."""
    return zero + sums[0] if tree[1] else zero


@numba.njit(inline="always")
def _finite(value):
    """Whether a real or complex value is finite: by comparisons, which raise no flag (Numba's
    ``math.isfinite`` computes ``x - x``, which raises the invalid flag for an infinity)."""
    return abs(value.real) < math.inf and abs(value.imag) < math.inf


@numba.njit
def compensated_add(s, c, v):
    """``s + v`` and the running compensation ``c`` of Neumaier's summation (the rounding
    error of each addition, added back at the end: see :func:`compensated_total`)."""
    t = s + v
    if not _finite(t):  # (inf - inf would raise the invalid flag NumPy's sum does not)
        return t, c
    if abs(s) >= abs(v):
        c += (s - t) + v
    else:
        c += (v - t) + s
    return t, c


@numba.njit
def compensated_total(s, c):
    # A sum that reached inf or NaN is that, with no compensation added.
    return s + c if _finite(s) else s


#: Values per block of a host reduction kernel's floating sum: NumPy's pairwise summation's
#: (``PW_BLOCKSIZE``).
BLOCK = 128

#: The values a host reduction computes in one pass of its fill loop (``emit._row_as_numpy``): a
#: multiple of the vector loops' step (512-bit vectors of float32, four at a time).
STEP = 64


#: How far ahead (in values of a row) a host reduction's fill loops prefetch the arrays they
#: read: without it, a fused log-likelihood of 10^7 float32 values (40 MB, past the caches)
#: took 1.40 ns a value on the 2-core machine against 0.74 at 10^6; with it, 0.74 at both
#: (512 to 8192 values ahead measured alike). The elementwise loops keep up without it.
AHEAD = 1024


#: Running values of a host reduction kernel's float64 (complex128) sum, ``min`` and ``max``:
#: value ``j`` of each row of this many goes into lane ``j``, a loop over contiguous lanes,
#: which vectorizes (one running value, or eight in scalars, do not).
LANES = 64


@numba.njit(inline="always")
def lane_add(lane_s, lane_e, lane, v, zero):
    """Add ``v`` into the running sum ``lane_s[lane]``, and its exact rounding error (Knuth's
    TwoSum) into ``lane_e[lane]``. A lane whose sum is not finite (an infinity or NaN among
    its values, or an overflow) keeps it and no error term: TwoSum of an infinity computes
    inf - inf (NaN, and the invalid flag, where NumPy's sum is inf). The error term is computed
    from finite stand-ins (zeros there), chosen by selects, which raise nothing and keep the
    loop vectorized; no infinity enters it (with one, complex128 lanes raised invalid, though
    no operation of the source computes inf - inf). ``zero``: of ``v``'s type."""
    s = lane_s[lane]
    t = s + v
    finite_sum = _finite(t)
    t_or_0, s_or_0, v_or_0 = (t, s, v) if finite_sum else (zero, zero, zero)
    back = t_or_0 - s_or_0
    lane_e[lane] += (s_or_0 - (t_or_0 - back)) + (v_or_0 - back)
    lane_s[lane] = t


@numba.njit
def lanes_total(lane_s, lane_e, zero, used):
    """The sum :func:`lane_add` kept in the first ``used`` lanes (folded to that many, see
    ``emit._folded``): their sums and errors added with Neumaier's compensation (an infinity
    or NaN among them is the sum, as in NumPy's)."""
    s = c = zero
    for j in range(used):
        s, c = compensated_add(s, c, lane_s[np.uint64(j)])
    for j in range(used):
        s, c = compensated_add(s, c, lane_e[np.uint64(j)])
    return compensated_total(s, c)


#: The lanes a host reduction's lanes are folded into before they are combined one by one.
FOLDED = 8


#: The helpers by the names the reduction kernels' text uses.
COMPENSATED = {f.py_func.__name__: f
               for f in (compensated_add, compensated_total, wide_block_sum, lane_add, lanes_total,
                         pairwise_begin, pairwise_next, pairwise_leaf, pairwise_total)}
