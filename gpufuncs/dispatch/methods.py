"""The ufunc methods of binary elementwise kernels: ``outer``, ``reduce``, ``accumulate``, ``at``.

Like NumPy's, each method first defers to an argument that overrides ``__array_ufunc__`` (Dask,
xarray) with its own method name (NEP 13). On the host they run through the real
:class:`numpy.ufunc` that Numba built, after gpufuncs' own dtype rules picked the loop, so NumPy
itself validates ``axis``, ``out=``, ``where=`` and wraps subclasses. On ``cuda``, ``outer`` is a
broadcast call and ``reduce`` a kernel of pieces (see :mod:`.pieces`) or, for device arrays other
than CuPy's, a pairwise tree of calls (all through the one call path). Only the
kernel's public interface is used here: calls, ``resolve_loop`` and ``compiled``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
from numba.np.numpy_support import from_dtype

from ..spec import COPY, KernelSpec, parse_layout, parse_loop
from ..targets import get_target
from ..targets.base import library_of
from . import pieces
from .args import arg_key, defer, describe, device_arrays_of, keep, lookup, overriding, refuse_target
from .plan import resolve_loop

try:
    from numpy.lib.array_utils import normalize_axis_tuple
except ImportError:  # NumPy 1.26
    from numpy.core.numeric import normalize_axis_tuple


class Kernel(Protocol):
    """What the methods use of a kernel: its public interface (``dispatch.kernel.Kernel``)."""

    __name__: str
    spec: KernelSpec
    types: list[str]
    identity: float | None

    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...

    def resolve_loop(self, dtypes: list[Any], dtype: Any = None) -> Any: ...

    def learn_loop(self, dtypes: list[Any], dtype: Any = None) -> Any: ...

    def compiled(self, target: str) -> Any: ...

NO_VALUE: Any = np._NoValue  # NumPy's own "not given" marker for ``initial``


def require_binary(kernel: Kernel, method: str) -> None:
    """Raise ``TypeError`` unless ``kernel`` is elementwise with two inputs, and ``ValueError``
    (as NumPy) for a kernel of several outputs, which only ``outer`` takes."""
    spec = kernel.spec
    if spec.nout > 1 and method != "outer":  # NumPy's own error, for np.divmod.reduce too
        raise ValueError(f"{kernel.__name__}.{method} is available only for kernels returning a "
                         f"single value; it returns {spec.nout}")
    if spec.layout is not None:
        why = f"it is a generalized kernel with layout {spec.layout.text!r}"
    elif spec.nin != 2:
        why = f"it takes {spec.nin} input(s)"
    else:
        return
    raise TypeError(f"{kernel.__name__}.{method} is not available: {method} is defined only for "
                    f"binary elementwise kernels (two inputs, one output), and {why}")


def outer(kernel: Kernel, a: Any, b: Any, **kwargs: Any) -> Any:
    """``kernel(a[..., None, ...], b)``: every pair of elements, like :meth:`numpy.ufunc.outer`."""
    require_binary(kernel, "outer")
    keywords = {k: v for k, v in kwargs.items() if k != "target"}
    deferred = _defer(kernel, "outer", (a, b), kwargs.get("out"), keywords, kwargs.get("target", "auto"))
    if deferred is not NO_VALUE:
        return deferred
    for position, operand in (("first", a), ("second", b)):
        if isinstance(operand, np.matrix):  # NumPy's own refusal, word for word in substance
            raise TypeError(f"{kernel.__name__}.outer() was passed a numpy matrix as {position} "
                            "argument; convert it to an ndarray (matrix.A) first")
    a = a if hasattr(a, "reshape") else np.asarray(a)
    b = b if hasattr(b, "shape") else np.asarray(b)
    return kernel(a.reshape((*a.shape, *(1,) * len(b.shape))), b, **kwargs)


def _defer(kernel: Kernel, method: str, inputs: tuple[Any, ...], out: Any, kwargs: dict[str, Any],
           target: str) -> Any:
    """The result of an override's ``__array_ufunc__`` for ``method``, or :data:`NO_VALUE`
    when no argument (``out`` included) overrides it."""
    outs = () if out is None else (out if isinstance(out, tuple) else (out,))
    candidates = overriding(f"{kernel.__name__}.{method}", [*inputs, *outs])
    if not candidates:
        return NO_VALUE
    refuse_target(kernel.__name__, target, candidates[0])
    if out is not None:
        kwargs = {**kwargs, "out": outs}  # NumPy hands overrides out= as a tuple
    return defer(kernel.__name__, kernel, method, candidates, inputs, kwargs)


def _given(**values: tuple[Any, Any]) -> dict[str, Any]:
    """The keywords whose value is not their default (``name=(value, default)``), as NumPy
    passes them to ``__array_ufunc__``."""
    return {k: v for k, (v, default) in values.items() if v is not default}


def _host_ufunc(kernel: Kernel, target: str) -> Any:
    """The single-threaded ufunc: reduce, accumulate and at run its loop with the output
    aliasing an input (each step needs the previous one), which a loop split across threads
    (the ``parallel`` target) computes wrongly. ``parallel`` is accepted and runs it too."""
    if target not in ("auto", "cpu", "parallel"):
        raise ValueError(f"{kernel.__name__}: target {target!r} is not available for this method "
                         "on host arrays; use 'cpu' or 'parallel'")
    compiled = get_target("cpu").public_object(kernel.compiled("cpu"))
    return getattr(compiled, "ufunc", compiled)


def _host_array(array: Any) -> np.ndarray:
    """``array`` as NumPy's methods take it: arrays as they are (subclasses too: NumPy wraps
    the result like the input), anything else converted."""
    return array if isinstance(array, np.ndarray) else np.asarray(array)


def _host_loop(kernel: Kernel, dtype: np.dtype, requested: Any, out: Any) -> tuple[np.dtype, np.dtype]:
    """The loop dtype and result dtype gpufuncs' rules choose for input ``dtype``, ``dtype=``
    ``requested`` and ``out=`` ``out`` (see :func:`_operands`)."""
    if dtype.kind not in "biufc":
        raise TypeError(f"{kernel.__name__}: unsupported dtype {dtype} for the input; "
                        f"loops: {', '.join(kernel.types)}")
    operands = _operands(dtype, requested, out)
    if kernel.spec.lazy:  # the loop such a call adds
        kernel.learn_loop(list(operands), requested)
    return _host_loop_of(kernel.spec, operands, None if requested is None else np.dtype(requested))


@functools.lru_cache(maxsize=256)
def _host_loop_of(spec: KernelSpec, operands: tuple[np.dtype, np.dtype],
                  requested: np.dtype | None) -> tuple[np.dtype, np.dtype]:
    """:func:`_host_loop` for a spec (a lazy kernel's changes with each loop it learns) and
    dtypes: decided once (most of a small reduction's time was this resolution)."""
    found = resolve_loop(spec, list(operands), requested)
    loop, result = found.compiled.inputs[0], found.outputs[0]
    dtype = operands[1]
    if not np.can_cast(dtype, result, "same_kind"):
        raise TypeError(f"{spec.name}: cannot cast the input from {dtype} to the {result} "
                        "loop with casting='same_kind'")
    return loop, result


def _operands(dtype: np.dtype, requested: Any, out: Any) -> tuple[np.dtype, np.dtype]:
    """The dtypes a reduction's or accumulation's loop is resolved for, as NumPy's reduce and
    accumulate resolve it: the values' twice, or, with ``out=`` and no ``dtype=``, the output's
    in the first input's place (it is the accumulator). So float32 values summed into an int64
    or float64 ``out=`` are summed in float64 (16777216 + 1 is 16777217), into an int16 or
    float16 one in float32."""
    given = _the_out(out)
    if requested is None and given is not None and not np.isscalar(given):
        info = given if isinstance(given, np.ndarray) else describe(given)
        if info is not None:
            return np.dtype(info.dtype), dtype
    return dtype, dtype


def _the_out(out: Any) -> Any:
    """``out=`` as the one array it names (NumPy takes a tuple of one too)."""
    return out[0] if isinstance(out, tuple) and len(out) == 1 else out


def _numpy(kernel: Kernel, method: str, run: Callable[[], Any]) -> Any:
    """``run()``, NumPy's errors renamed after the kernel (same kind: ``AxisError`` stays one)."""
    try:
        return run()
    except (TypeError, ValueError, IndexError) as exc:
        kind = next(k for k in (np.exceptions.AxisError, TypeError, ValueError, IndexError)
                    if isinstance(exc, k))
        raise kind(f"{kernel.__name__}.{method}: {exc}") from exc


def _as_result(values: Any, result: np.dtype, out: Any) -> Any:
    """A new result in the result dtype (float16 for float16 input); ``out`` as NumPy gave it."""
    if out is not None or values.dtype == result:
        return values
    return values.astype(result)


def reduce(kernel: Kernel, array: Any, axis: Any = 0, dtype: Any = None, out: Any = None,
           keepdims: bool = False, initial: Any = NO_VALUE, where: Any = True,
           target: str = "auto") -> Any:
    """Reduce ``array`` along ``axis`` by repeated application, like :meth:`numpy.ufunc.reduce`."""
    require_binary(kernel, "reduce")
    given = _given(axis=(axis, 0), dtype=(dtype, None), keepdims=(keepdims, False),
                   initial=(initial, NO_VALUE), where=(where, True))
    key = None
    if out is None and where is True and initial is NO_VALUE and not isinstance(array, np.ndarray):
        key = (kernel, target, axis, dtype, keepdims, arg_key(array))
        plan = lookup(_PLANS, key)
        if plan is not None:
            return plan(array)
    deferred = _defer(kernel, "reduce", (array,), out, given, target)
    if deferred is not NO_VALUE:
        return deferred
    if device_arrays_of(array) is not None or target == "cuda":
        return _device_reduce(kernel, array, axis, dtype, out, keepdims, initial, where, key)
    array = _host_array(array)
    loop, result = _host_loop(kernel, array.dtype, dtype, out)
    ufunc = _host_ufunc(kernel, target)
    if initial is NO_VALUE and kernel.identity is not None and (
            where is not True or _reduces_nothing(kernel, array, axis)):
        # NumPy starts from a ufunc's identity exactly there; Numba stores only 0 or 1 as one.
        initial = kernel.identity
    reduced = _numpy(kernel, "reduce", lambda: ufunc.reduce(
        array, axis=axis, dtype=loop, out=out, keepdims=keepdims, initial=initial, where=where))
    return _as_result(reduced, result, out)


def accumulate(kernel: Kernel, array: Any, axis: int = 0, dtype: Any = None, out: Any = None,
               target: str = "auto") -> Any:
    """Running reduction along ``axis``, like :meth:`numpy.ufunc.accumulate` (host targets)."""
    require_binary(kernel, "accumulate")
    deferred = _defer(kernel, "accumulate", (array,), out, _given(axis=(axis, 0), dtype=(dtype, None)),
                      target)
    if deferred is not NO_VALUE:
        return deferred
    array = _host_array(array)
    loop, result = _host_loop(kernel, array.dtype, dtype, out)
    ufunc = _host_ufunc(kernel, target)
    given = _the_out(out)
    if array.ndim and isinstance(given, np.ndarray) and given.shape != array.shape:
        # NumPy's own check misses a 0-d out= (NumPy 2.4 then writes past it and crashes).
        raise ValueError(f"{kernel.__name__}.accumulate: out= has shape {given.shape}, the "
                         f"accumulation has shape {array.shape}")
    accumulated = _numpy(kernel, "accumulate",
                         lambda: ufunc.accumulate(array, axis=axis, dtype=loop, out=out))
    return _as_result(accumulated, result, out)


def at(kernel: Kernel, array: np.ndarray, indices: Any, b: Any, target: str = "auto") -> None:
    """In place ``array[indices] = kernel(array[indices], b)``, unbuffered (host targets)."""
    require_binary(kernel, "at")
    if _defer(kernel, "at", (array, indices, b), None, {}, target) is not NO_VALUE:
        return
    if not isinstance(array, np.ndarray):
        raise TypeError(f"{kernel.__name__}.at needs a NumPy array to modify in place, "
                        f"got {type(array).__name__}")
    if array.dtype.kind != "f":
        # NumPy would store the float result into integers, truncating it without a word.
        raise TypeError(f"{kernel.__name__}.at: the array's dtype {array.dtype} is not floating; "
                        f"loops: {', '.join(kernel.types)}")
    info = describe(b)
    b = np.asarray(b) if info is None else b
    result = kernel.resolve_loop([array.dtype, info.dtype if info is not None else b.dtype]).outputs[0]
    if not np.can_cast(result, array.dtype, "same_kind"):
        raise TypeError(f"{kernel.__name__}.at: cannot store the {result} result into the "
                        f"{array.dtype} array with casting='same_kind'")
    if not array.flags.writeable:
        raise ValueError(f"{kernel.__name__}.at: the array is read-only")
    if result == np.float16:
        b = np.asarray(b, dtype=np.float16)  # the float16 loop reads float16, as NumPy's does
    ufunc = _host_ufunc(kernel, target)
    _numpy(kernel, "at", lambda: ufunc.at(array, indices, b))


def _reduces_nothing(kernel: Kernel, array: np.ndarray, axis: Any) -> bool:
    """Whether some reduced axis is empty (then NumPy starts from the identity)."""
    if array.ndim == 0 or 0 not in array.shape:
        return False  # (NumPy reduces a 0-d array to its value, whatever axis 0 or -1 means)
    axes = range(array.ndim) if axis is None else _numpy(
        kernel, "reduce", lambda: normalize_axis_tuple(axis, array.ndim))
    return any(array.shape[ax] == 0 for ax in axes)


#: Reductions of whole arrays that ran in one launch, by everything they decided on (the
#: kernel, target, axis, dtype, keepdims and the array's key as the call path keys it: class,
#: dtype, shape, contiguity, device where several): ``plan(array)`` runs the launch for an
#: array like it (a call's CPU time is most of a small GPU reduction's). Emptied when full.
_PLANS: dict[tuple[Any, ...], Callable[[Any], Any]] = {}


def _device_reduce(kernel: Kernel, array: Any, axis: Any, dtype: Any, out: Any, keepdims: bool,
                   initial: Any, where: Any, key: tuple[Any, ...] | None = None) -> Any:
    """``kernel`` applied along the ``axis`` axes of a device array (or of a host array on
    ``cuda``), as :meth:`numpy.ufunc.reduce` with its keywords.

    CuPy's arrays and host arrays: the reduced axes moved last and flattened, then in pieces
    (:func:`_in_pieces`). Other device arrays: a pairwise tree of kernel calls (log2(n)
    launches) per axis. Either order differs from NumPy's left to right, like
    ``numpy.add.reduce``'s pairwise summation: exact for associative and commutative kernels,
    within rounding otherwise. ``where=`` puts the kernel's identity where it is false (a
    kernel without one is refused), ``initial`` is combined with the result as the first
    argument (NumPy's place for it), ``dtype`` picks the loop of every call, ``out=`` receives
    the result once it is computed (checked first). A call that runs in one launch is kept
    in :data:`_PLANS` under ``key`` where one is given (a call without ``out=``, ``where=``
    or ``initial``).
    """
    name = kernel.__name__
    shape = tuple(array.shape)
    if not shape:
        raise ValueError(f"{name}.reduce on cuda: cannot reduce a 0-d array")
    axes = tuple(range(len(shape))) if axis is None else _numpy(
        kernel, "reduce", lambda: normalize_axis_tuple(axis, len(shape)))
    if any(shape[a] == 0 for a in axes):
        raise ValueError(f"{name}.reduce on cuda: cannot reduce an empty axis")
    ones = tuple(1 if d in axes else n for d, n in enumerate(shape))  # keepdims' shape
    result_shape = ones if keepdims else tuple(n for d, n in enumerate(shape) if d not in axes)
    out = _device_out(kernel, out, result_shape)
    if dtype is None and out is not None:  # NumPy's rule: out= is the accumulator (_operands)
        values = np.dtype(array.dtype if isinstance(array, np.ndarray) else describe(array).dtype)
        dtype = kernel.resolve_loop(list(_operands(values, None, out))).inputs[0]
    options = {"target": "cuda"} if dtype is None else {"target": "cuda", "dtype": dtype}
    if where is not True:
        array = _where_identity(kernel, array, where, initial, options)
    # NumPy starts a reduction from the kernel's identity where it has one (hypot of a
    # single -3.0 is 3.0, a sum of -0.0 is 0.0): combined as the initial value.
    starts = initial is not NO_VALUE or kernel.identity is not None
    loop = _in_pieces_loop(kernel, array, dtype) if axes else None
    if not axes:
        if not starts:  # nothing to combine: a new array all the same, like NumPy
            array = _device_copy(type(kernel))(array, **options)
    elif loop is not None:  # (the start is the first value of the last level: no launch of its own)
        start = None if not starts else loop.type(kernel.identity if initial is NO_VALUE else initial)
        if len(axes) == len(shape) and _in_one_launch(array):
            plan = _one_launch_plan(kernel, loop, start, result_shape)
            if key is not None:  # (there is none for a call with out=)
                keep(_PLANS, key, plan)
            return _into(kernel, plan(array), out)
        moved = np.moveaxis(array, axes, range(-len(axes), 0))
        array = _in_pieces(kernel, moved.reshape((*moved.shape[: moved.ndim - len(axes)], -1)), loop, start)
        starts = False
    else:
        for ax in sorted(axes, reverse=True):  # (the axes before ``ax`` keep their numbers)
            array = _tree(kernel, array, ax, options, not starts)
    if starts:
        if initial is NO_VALUE:  # the identity in the result's dtype (a float 0.0 keeps ints ints)
            initial = (array.dtype if isinstance(array, np.ndarray) else describe(array).dtype).type(
                kernel.identity)
        array = kernel(initial, array, **options)
    if tuple(array.shape) != result_shape:  # (a new array: no need of a view of it)
        array = array.reshape(result_shape)
    return _into(kernel, array, out)


def _into(kernel: Kernel, result: Any, out: Any) -> Any:
    """``result``, or ``out`` with it copied in where ``out=`` was given (cast unsafely, as
    NumPy's reduce casts into its out=: a float64 sum into an int64 out= truncates)."""
    if out is None:
        return result
    _device_copy(type(kernel))(result, out=out, target="cuda", casting="unsafe")
    return out


def _one_launch_plan(kernel: Kernel, loop: np.dtype, start: Any,
                     result_shape: tuple[int, ...]) -> Callable[[Any], Any]:
    """``plan(array)``: ``kernel`` reduced over all of ``array`` (a C-contiguous CuPy array
    with values) in one launch from ``start``, in the loop of ``loop``, shaped as
    ``result_shape`` (ones where ``keepdims``)."""
    launch, zeros = _single_pass(kernel, loop), (loop.type(0),)

    def plan(array: Any) -> Any:
        result = launch([array], zeros, array.size, loop, start)
        return result if not result_shape else result.reshape(result_shape)

    return plan


def _in_pieces_loop(kernel: Kernel, array: Any, dtype: Any) -> np.dtype | None:
    """The dtype of the loop that reduces ``array`` in pieces, or ``None`` where the pieces
    do not apply: arrays other than NumPy's and CuPy's (no ``as_strided`` here), loops that
    raise or change the dtype between their inputs and their output."""
    if not isinstance(array, np.ndarray) and library_of(type(array)) != "cupy":
        return None
    if kernel.spec.lazy:
        kernel.learn_loop([array.dtype, array.dtype], dtype)
    return _pieces_loop(kernel.spec, array.dtype, None if dtype is None else np.dtype(dtype))


@functools.lru_cache(maxsize=256)
def _pieces_loop(spec: KernelSpec, values: np.dtype, dtype: np.dtype | None) -> np.dtype | None:
    """:func:`_in_pieces_loop` for a spec (a lazy kernel's changes with each loop it learns)
    and dtypes: decided once (a call's CPU time on the GPU's fast path)."""
    loop = resolve_loop(spec, [values, values], dtype)
    if loop.runs is None and loop.inputs == (loop.outputs[0],) * 2:
        return loop.outputs[0]
    return None


def _device_out(kernel: Kernel, out: Any, shape: tuple[int, ...]) -> Any:
    """``out=`` (an array, or a tuple of one, as NumPy takes it) checked against the result's
    ``shape`` before anything runs; ``None`` where none is given."""
    if isinstance(out, tuple):
        if len(out) != 1:
            raise ValueError(f"{kernel.__name__}.reduce: out= takes one array, got {len(out)}")
        out = out[0]
    if out is None:
        return None
    if tuple(out.shape) != shape:
        raise ValueError(f"{kernel.__name__}.reduce: out= has shape {tuple(out.shape)}, the "
                         f"reduction has shape {shape}")
    return out


def _where_identity(kernel: Kernel, array: Any, where: Any, initial: Any, options: dict[str, Any]) -> Any:
    """``array`` (a new array of its kind) with the kernel's identity where ``where`` is false,
    which leaves those elements out of the reduction, as NumPy's ``where=`` does."""
    name = kernel.__name__
    if kernel.identity is None:
        if initial is NO_VALUE:  # NumPy's own refusal
            raise ValueError(f"{name}.reduce: reduction operation '{name}' does not have an "
                             "identity, so to use a where mask one has to specify 'initial'")
        raise TypeError(f"{name}.reduce on cuda: where= needs the kernel's identity (declared "
                        "with identity=), which it puts where the mask is false; host arrays "
                        "take initial= instead")
    copy = _device_copy(type(kernel))
    filled = copy(array, **options)
    copy(kernel.identity, out=filled, **options)
    copy(array, out=filled, where=where, **options)
    return filled


def _in_one_launch(array: Any) -> bool:
    """Whether a reduction of all of ``array`` runs in one launch (see
    :mod:`gpufuncs.targets.cuda.single_pass`): a C-contiguous CuPy array with values."""
    return library_of(type(array)) == "cupy" and array.size > 0 and array.flags.c_contiguous


@functools.cache
def _single_pass(kernel: Kernel, dtype: np.dtype) -> Any:
    """The one-launch reduction of values of ``dtype`` by ``kernel``."""
    from ..targets.cuda.single_pass import SinglePass

    kind = dtype.type

    def value(args):
        return kind(args[0])

    def combine(a, b):
        return kind(kernel(a, b))

    return SinglePass(value, combine, dtype)


def _in_pieces(kernel: Kernel, values: Any, dtype: np.dtype, start: Any = None) -> Any:
    """``kernel`` applied along the last axis of ``values``: its pieces reduced, a GPU thread
    each (see :mod:`.pieces`), then their results, until one is left per row. One or two
    launches per level, each level some 64 times shorter: four levels for 10^8 values.
    ``start`` (a scalar of ``dtype``, or ``None``): the first value the last level combines,
    NumPy's ``initial``."""
    lead, options = values.ndim - 1, {"target": "cuda"}
    while values.ndim > lead:
        core = values[..., None, :]
        if start is not None and pieces.count(core.shape) < 2:  # the last level
            return _reducer(kernel, np.dtype(dtype), True)(core, start, **options)
        values = pieces.in_pieces(_reducer(kernel, np.dtype(dtype), False), [core], (True,), options, dtype)
    return values


@functools.cache
def _reducer(kernel: Kernel, dtype: np.dtype, starts: bool) -> Kernel:
    """The generalized kernel ``(m,n)->()`` of ``dtype`` applying ``kernel`` left to right
    over its core (``kernel`` is called in its body: a device function on the GPU); where it
    ``starts``, ``(m,n),()->()``, from its second argument."""
    combine = kernel

    def reduce_core(values, out):
        total = values[0, 0]
        for j in range(1, values.shape[1]):
            total = combine(total, values[0, j])
        for i in range(1, values.shape[0]):
            for j in range(values.shape[1]):
                total = combine(total, values[i, j])
        out[0] = total

    def reduce_from(values, start, out):
        total = start
        for i in range(values.shape[0]):
            for j in range(values.shape[1]):
                total = combine(total, values[i, j])
        out[0] = total

    t = from_dtype(dtype)
    arguments = ("values", "start", "out") if starts else ("values", "out")
    signature = f"void({t}[:, :], {t}, {t}[:])" if starts else f"void({t}[:, :], {t}[:])"
    spec = KernelSpec(name=f"{kernel.__name__}_reduce", pyfunc=reduce_from if starts else reduce_core,
                      loops=(parse_loop(signature, len(arguments), True, nout=1),),
                      layout=parse_layout("(m,n),()->()" if starts else "(m,n)->()"), reference=None,
                      tolerances={}, doc="", arg_names=arguments)
    return type(kernel)(spec)


def _tree(kernel: Kernel, array: Any, axis: int, options: dict[str, Any], copy_one: bool) -> Any:
    """Pairwise tree of kernel calls along ``axis`` (log2(n) launches); a new array where the
    axis has one element and ``copy_one``."""

    def part(values: Any, start: int, stop: int) -> Any:
        return values[(slice(None),) * axis + (slice(start, stop),)]

    n = array.shape[axis]
    if n == 1 and copy_one:  # nothing to combine: a new array all the same, like NumPy
        array = _device_copy(type(kernel))(array, **options)
    while n > 1:
        half = n // 2
        head = kernel(part(array, 0, half), part(array, half, 2 * half), **options)
        if n % 2:  # fold the odd last element into the last pair's result, in place
            last = part(head, half - 1, half)
            kernel(last, part(array, n - 1, n), out=last, **options)
        array, n = head, half
    return array


@functools.cache
def _device_copy(kind: type) -> Kernel:
    """``x -> x`` as a kernel: a new device array of the input's kind and dtype."""
    return kind(COPY)
