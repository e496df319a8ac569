"""The ufunc methods of binary elementwise kernels: ``outer``, ``reduce``, ``accumulate``, ``at``.

On the host they run through the real :class:`numpy.ufunc` that Numba built, after gpufuncs'
own dtype rules picked the loop, so they follow NumPy exactly. On ``cuda``, ``outer`` is a
broadcast call and ``reduce`` a pairwise tree of calls (both through the one call path). Only the
kernel's public interface is used here: calls, ``resolve_loop`` and ``compiled``.
"""

from __future__ import annotations

import functools
from typing import Any, Protocol

import numpy as np

from ..spec import IDENTITY, KernelSpec
from ..targets import get_target
from .args import describe, device_arrays_of


class Kernel(Protocol):
    """What the methods use of a kernel: its public interface (``dispatch.kernel.Kernel``)."""

    __name__: str
    spec: KernelSpec
    types: list[str]
    identity: float | None

    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...

    def resolve_loop(self, dtypes: list[Any], dtype: Any = None) -> tuple[np.dtype, np.dtype]: ...

    def compiled(self, target: str) -> Any: ...

NO_VALUE: Any = np._NoValue  # NumPy's own "not given" marker for ``initial``


def require_binary(kernel: Kernel, method: str) -> None:
    """Raise ``TypeError`` unless ``kernel`` is elementwise with two inputs and one output."""
    spec = kernel.spec
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
    a = a if hasattr(a, "reshape") else np.asarray(a)
    b = b if hasattr(b, "shape") else np.asarray(b)
    return kernel(a.reshape((*a.shape, *(1,) * len(b.shape))), b, **kwargs)


def _host_ufunc(kernel: Kernel, target: str) -> Any:
    """The single-threaded ufunc: reduce, accumulate and at run its loop with the output
    aliasing an input (each step needs the previous one), which a loop split across threads
    (the ``parallel`` target) computes wrongly. ``parallel`` is accepted and runs it too."""
    if target not in ("auto", "cpu", "parallel"):
        raise ValueError(f"{kernel.__name__}: target {target!r} is not available for this method "
                         "on host arrays; use 'cpu' or 'parallel'")
    compiled = get_target("cpu").public_object(kernel.compiled("cpu"))
    return getattr(compiled, "ufunc", compiled)


def _host_loop(kernel: Kernel, array: np.ndarray, dtype: Any) -> tuple[np.ndarray, np.dtype]:
    """``array`` cast to the loop gpufuncs' dtype rules choose, and the result dtype."""
    info = describe(array)
    if info.dtype.kind not in "biuf":
        raise TypeError(f"{kernel.__name__}: unsupported dtype {info.dtype} for the input; "
                        f"loops: {', '.join(kernel.types)}")
    loop, result = kernel.resolve_loop([info.dtype], dtype)
    if not np.can_cast(info.dtype, loop, "same_kind"):
        raise TypeError(f"{kernel.__name__}: cannot cast the input from {info.dtype} to the {loop} "
                        "loop with casting='same_kind'")
    return np.asarray(array, dtype=loop), result


def reduce(kernel: Kernel, array: Any, axis: Any = 0, dtype: Any = None, out: Any = None,
           keepdims: bool = False, initial: Any = NO_VALUE, where: Any = True,
           target: str = "auto") -> Any:
    """Reduce ``array`` along ``axis`` by repeated application, like :meth:`numpy.ufunc.reduce`."""
    require_binary(kernel, "reduce")
    if device_arrays_of(array) is not None or target == "cuda":
        unsupported = [name for name, value, default in (("out", out, None), ("where", where, True))
                       if value is not default]
        if unsupported:
            raise TypeError(f"{kernel.__name__}.reduce on cuda does not support "
                            f"{'=, '.join(unsupported)}= (host arrays do)")
        return _device_reduce(kernel, array, axis, dtype, keepdims, initial)
    array = np.asarray(array)
    values, result = _host_loop(kernel, array, dtype)
    ufunc = _host_ufunc(kernel, target)
    if initial is NO_VALUE and kernel.identity is not None and _reduces_nothing(array, axis):
        initial = kernel.identity  # Numba can store only 0 or 1 as a ufunc's own identity
    reduced = ufunc.reduce(values, axis=axis, dtype=values.dtype, keepdims=keepdims,
                           initial=initial, where=where)
    return _finish(reduced, result, out)


def accumulate(kernel: Kernel, array: Any, axis: int = 0, dtype: Any = None, out: Any = None,
               target: str = "auto") -> Any:
    """Running reduction along ``axis``, like :meth:`numpy.ufunc.accumulate` (host targets)."""
    require_binary(kernel, "accumulate")
    values, result = _host_loop(kernel, np.asarray(array), dtype)
    accumulated = _host_ufunc(kernel, target).accumulate(values, axis=axis, dtype=values.dtype)
    return _finish(accumulated, result, out)


def at(kernel: Kernel, array: np.ndarray, indices: Any, b: Any, target: str = "auto") -> None:
    """In place ``array[indices] = kernel(array[indices], b)``, unbuffered (host targets)."""
    require_binary(kernel, "at")
    if not isinstance(array, np.ndarray):
        raise TypeError(f"{kernel.__name__}.at needs a NumPy array to modify in place, "
                        f"got {type(array).__name__}")
    if kernel.spec.loop_for(array.dtype) is None:
        raise TypeError(f"{kernel.__name__}.at: the array's dtype {array.dtype} has no loop; "
                        f"loops: {', '.join(kernel.types)}")
    if not array.flags.writeable:
        raise ValueError(f"{kernel.__name__}.at: the array is read-only")
    _host_ufunc(kernel, target).at(array, indices, np.asarray(b, dtype=array.dtype))


def _reduces_nothing(array: np.ndarray, axis: Any) -> bool:
    axes = range(array.ndim) if axis is None else np.atleast_1d(axis)
    return any(array.shape[ax] == 0 for ax in axes)


def _finish(values: Any, result: np.dtype, out: Any) -> Any:
    """Cast to the result dtype, or copy into ``out`` (validated by NumPy's copyto)."""
    if out is None:
        return values.astype(result) if values.dtype != result else values
    target = out[0] if isinstance(out, tuple) else out
    np.copyto(target, values, casting="same_kind")
    return target


def _device_reduce(kernel: Kernel, array: Any, axis: Any, dtype: Any, keepdims: bool,
                   initial: Any) -> Any:
    """Pairwise tree of kernel calls along one axis of a device array (log2(n) launches).

    The pairing differs from NumPy's left-to-right order, like ``numpy.add.reduce``'s pairwise
    summation: exact for associative kernels, within rounding otherwise. ``initial`` is combined
    with the tree's result as the first argument (NumPy's place for it), ``dtype`` picks the loop
    of every call.
    """
    shape = tuple(array.shape)
    if not isinstance(axis, int | np.integer):
        raise ValueError(f"{kernel.__name__}.reduce on cuda reduces one integer axis, got {axis!r}")
    if not shape:
        raise ValueError(f"{kernel.__name__}.reduce on cuda: cannot reduce a 0-d array")
    axis = int(axis) % len(shape)
    if shape[axis] == 0:
        raise ValueError(f"{kernel.__name__}.reduce on cuda: cannot reduce an empty axis")
    options = {"target": "cuda"} if dtype is None else {"target": "cuda", "dtype": dtype}

    def part(values: Any, start: int, stop: int) -> Any:
        return values[(slice(None),) * axis + (slice(start, stop),)]

    n = shape[axis]
    if n == 1 and initial is NO_VALUE:  # nothing to combine: a new array all the same, like NumPy
        array = _device_copy(type(kernel))(array, **options)
    while n > 1:
        half = n // 2
        head = kernel(part(array, 0, half), part(array, half, 2 * half), **options)
        if n % 2:  # fold the odd last element into the last pair's result, in place
            last = part(head, half - 1, half)
            kernel(last, part(array, n - 1, n), out=last, **options)
        array, n = head, half
    if initial is not NO_VALUE:
        array = kernel(initial, array, **options)
    kept = (*shape[:axis], 1, *shape[axis + 1:])
    return array.reshape(kept if keepdims else shape[:axis] + shape[axis + 1:])


@functools.cache
def _device_copy(kind: type) -> Kernel:
    """``x -> x`` as a kernel: a new device array of the input's kind (and the loop's dtype)."""
    return kind(IDENTITY)
