"""Running one validated call on device arrays: operands, streams, outputs, strides, launch.

The steps, in order:

1. every device array becomes an :class:`~.arrays.Operand`; the launch stream is ``stream=``,
   else the current stream of the first device input's library (CuPy, torch), else the stream
   a Numba array is bound to or a ``__cuda_array_interface__`` names, else the legacy default;
2. the launch stream waits (an event, on the GPU: the host never blocks) for every producer
   stream that differs from it, so inputs written on another stream are complete;
3. host scalars (and one-element host arrays) are passed by value in the loop dtype; a larger host
   array mixed with device arrays is copied to the device once;
4. outputs: ``out=`` arrays are written in place (any strides); new ones come from the first
   input's library or the target's pool, gufunc outputs stored order-major;
5. loop dimensions are collapsed across all operands; when one contiguous dimension is left the
   kernel runs on the flat path (element ``i`` at offset ``i``), else on the strided path.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...dispatch import _is_device_array
from ...spec import IDENTITY, KernelSpec
from ..base import Plan
from .arrays import (
    Operand,
    allocate,
    c_strides,
    current_stream,
    describe,
    detached,
    extent,
    has_cai,
    stream_handle,
    to_device,
)
from .compile import CudaKernels
from .runtime import LEGACY_HANDLES, SimCore, SimPointer, get_runtime

_ONE = np.uint8(1)  # ``where`` when nothing is masked: passed by value, folded by the compiler


class _Args:
    """Kernel arguments with their type keys: flat ``cuda.core`` values, or simulator objects."""

    def __init__(self, simulated: bool, shape: tuple[int, ...], n: int) -> None:
        self.keys: list[Any] = []
        self.values: list[Any] = []
        self.simulated = simulated
        self.shape, self.n = shape, n  # the (collapsed) loop shape; () on the flat path

    def operand(self, op: Operand | Any, strides: tuple[int, ...], core: int) -> None:
        if not isinstance(op, Operand):  # a scalar by value: no strides
            self.keys += [("s", op.dtype.char), 0]
            self.values.append(op)
            if self.simulated:
                self.values.append(())
            return
        dtype = np.dtype(np.uint8) if op.dtype == np.bool_ else op.dtype
        if core:
            self._core(op, dtype, strides, core)
        else:
            self.keys.append(("p", dtype.char))
            self.values.append(SimPointer(op.ptr, dtype) if self.simulated else op.ptr)
        self.ints(strides)

    def _core(self, op: Operand, dtype: np.dtype, strides: tuple[int, ...], core: int) -> None:
        core_shape, core_strides = op.shape[len(op.shape) - core:], op.strides[len(op.shape) - core:]
        self.keys.append(("a", dtype.char, 1 + core))
        if self.simulated:
            self.values.append(SimCore(op.ptr, dtype, core_shape, core_strides))
            return
        extent = 1 + sum((n - 1) * s for n, s in zip(self.shape, strides)) if self.shape else self.n
        item = dtype.itemsize
        self.values += [0, 0, extent * math.prod(core_shape), item, op.ptr, extent, *core_shape,
                        item, *core_strides]

    def ints(self, values: tuple[int, ...]) -> None:
        self.keys.append(len(values))
        if self.simulated:
            self.values.append(values)
        else:
            self.values.extend(values)

    def count(self, n: int) -> None:
        self.keys.append("n")
        self.values.append(n)


def _same_stream(a: int, b: int) -> bool:
    return a == b or (a in LEGACY_HANDLES and b in LEGACY_HANDLES)


def _resolve_stream(stream: Any, operands: list[Operand]) -> int:
    if stream is not None:
        return stream_handle(stream)
    for op in operands:
        handle = current_stream(op)
        if handle is not None:
            return handle
    return 0


def _describe_all(objs: list[Any], stream: Any) -> tuple[list[Any], int]:
    """Operands for the device arrays among ``objs`` (others unchanged) and the launch stream."""
    described, pending = [], []
    for i, obj in enumerate(objs):
        if not _is_device_array(obj):
            described.append(obj)
        elif _dlpack_only(obj):
            pending.append(i)  # DLPack needs our stream to order the producer's work before it
            described.append(obj)
        else:
            described.append(describe(obj))
    handle = _resolve_stream(stream, [d for d in described if isinstance(d, Operand)])
    for i in pending:
        described[i] = describe(objs[i], consumer=handle)
    return described, handle


def _dlpack_only(obj: Any) -> bool:
    return not has_cai(obj) and not getattr(type(obj), "__cuda_ndarray__", False)


def _wait_for_producers(operands: list[Any], handle: int, launch_stream: Any) -> None:
    runtime = get_runtime()
    waited: set[int] = set()
    for op in operands:
        if isinstance(op, Operand) and op.stream is not None and not _same_stream(op.stream, handle):
            if op.stream not in waited:
                launch_stream.wait(runtime.stream(op.stream))
                waited.add(op.stream)


def _by_value(value: Any, dtype: np.dtype, core: int) -> Any | None:
    """A host scalar or one-element host array as a scalar of ``dtype``; else ``None``.

    Operands with ``core`` dimensions are arrays to the kernel body, whatever their size."""
    if core:
        return None
    if isinstance(value, np.ndarray):
        return dtype.type(value.reshape(())[()]) if value.size == 1 else None
    return dtype.type(value)


def _loop_strides(op: Any, ndim: int, core: int) -> list[int]:
    """Element strides of ``op`` over the loop dimensions (0 where it broadcasts)."""
    if not isinstance(op, Operand):
        return [0] * ndim
    nd = len(op.shape) - core
    item = op.dtype.itemsize
    strides = [0] * (ndim - nd)
    for n, s in zip(op.shape[:nd], op.strides[:nd]):
        if n == 1:
            strides.append(0)
        elif s % item:
            raise ValueError(f"a device array with strides {op.strides} that are not multiples of "
                             f"its itemsize {item} is not supported")
        else:
            strides.append(s // item)
    return strides


def _contiguous(operands: list[Any], loop_shape: tuple[int, ...]) -> bool:
    """Every array operand C-contiguous over the whole loop (element ``i`` at offset ``i``)."""
    for op in operands:
        if isinstance(op, Operand) and (op.shape != loop_shape or
                                        op.strides != c_strides(loop_shape, op.dtype.itemsize)):
            return False
    return True


def collapse(shape: tuple[int, ...],
             strides: list[list[int]]) -> tuple[tuple[int, ...], list[tuple[int, ...]]]:
    """Drop unit dimensions and merge adjacent ones that every operand steps through evenly."""
    keep = [d for d, n in enumerate(shape) if n != 1]
    if not keep:
        return (), [() for _ in strides]
    last = keep[-1]
    merged_shape = [shape[last]]
    merged = [[s[last]] for s in strides]
    for d in reversed(keep[:-1]):
        if all(s[d] == m[0] * merged_shape[0] for s, m in zip(strides, merged)):
            merged_shape[0] *= shape[d]
        else:
            merged_shape.insert(0, shape[d])
            for s, m in zip(strides, merged):
                m.insert(0, s[d])
    return tuple(merged_shape), [tuple(m) for m in merged]


def launch(kernels: CudaKernels, loop_dtype: np.dtype, args: list[Any], cores: list[int],
           n_outputs: int, where: Any, loop_shape: tuple[int, ...], stream: Any) -> None:
    """Launch the kernel of ``kernels`` over ``loop_shape``.

    ``args`` are the inputs then the outputs (:class:`Operand` or scalars by value), ``cores`` the
    number of core dimensions of each, ``where`` an :class:`Operand` mask or ``None``.
    """
    n = math.prod(loop_shape)
    if n == 0:
        return
    every = [*args, where] if isinstance(where, Operand) else list(args)
    if not any(cores) and _contiguous(every, loop_shape):
        shape, strides = (), [()] * len(every)  # the flat fast path, without collapsing
    else:
        strides = [_loop_strides(op, len(loop_shape), c) for op, c in zip(every, [*cores, 0])]
        shape, strides = collapse(loop_shape, strides)
        arrays = [s for op, s in zip(every, strides) if isinstance(op, Operand)]
        if len(shape) <= 1 and all(s == (1,) or not shape for s in arrays):
            shape, strides = (), [()] * len(every)  # flat after all (F order, unit dimensions)
        elif any(c and min(s, default=0) < 0 for s, c in zip(strides, cores)):
            raise ValueError("device arrays with negative strides along loop dimensions of a core "
                             "operand are not supported; pass a contiguous copy")
    runtime = get_runtime()
    built = _Args(runtime.simulated, shape, n)
    for op, s, c in zip(args, strides, cores):
        built.operand(op, s if isinstance(op, Operand) else (), c)
    if isinstance(where, Operand):
        built.operand(where, strides[-1], 0)
    else:
        built.operand(_ONE, (), 0)
    built.ints(shape)
    built.count(n)
    kernel, per_thread = kernels.get(loop_dtype, tuple(built.keys))
    runtime.launch(stream, kernel, n, built.values, per_thread)


# -- the call -------------------------------------------------------------------------------------
def run(spec: KernelSpec, kernels: CudaKernels, plan: Plan, inputs: list[Any],
        outs: tuple[Any, ...] | None, where: Any, stream: Any) -> tuple[Any, ...]:
    """Execute ``plan`` with at least one device array among ``inputs`` and ``outs``."""
    runtime = get_runtime()
    runtime.bind_thread()
    described, handle = _describe_all([*inputs, *(outs or ())], stream)
    launch_stream = runtime.stream(handle)
    _wait_for_producers(described, handle, launch_stream)
    loop = plan.loop.dtype
    args: list[Any] = []
    for value, core in zip(described[: len(inputs)], kernels.cores):
        if isinstance(value, Operand):
            args.append(value)
        else:
            scalar = _by_value(value, loop, core)
            args.append(scalar if scalar is not None else to_device(np.asarray(value), launch_stream))
    like = next((a for a in args if isinstance(a, Operand) and a.kind != "host-copy"), None)
    if outs is None:
        where = True  # like NumPy, positions masked out of a new output are undefined
        targets = [_new_output(spec, plan, k, like, launch_stream, handle) for k in range(spec.nout)]
    else:
        targets = [o if isinstance(o, Operand) else to_device(o, launch_stream)
                   for o in described[len(inputs):]]
        like = like or targets[0]
    mask = _where_operand(where, plan.loop_shape, launch_stream, handle)
    if mask is False:
        return tuple(outs)
    if outs is not None:
        *args, mask = _without_overlap([*args, mask], targets, launch_stream)
    cores = kernels.cores
    if any(cores):
        _launch_with_casts(spec, kernels, plan, args, targets, cores, mask, launch_stream)
    else:
        launch(kernels, plan.loop.dtype, [*args, *targets], cores, len(targets), mask,
               plan.loop_shape, launch_stream)
    results = []
    for k, target in enumerate(targets):
        if target.kind == "host-copy":  # a host out= with device inputs: copied back
            _copy_back(target, outs[k], launch_stream)
            results.append(outs[k])
        else:
            results.append(outs[k] if outs is not None else target.obj)
    return tuple(results)





def _without_overlap(inputs: list[Any], outputs: list[Operand], stream: Any) -> list[Any]:
    """Inputs that share memory with an output read from a copy, unless they are that output
    element for element (``out=x`` on ``x``): threads run in no fixed order, and NumPy's rule is
    the result of a call without overlap."""
    spans = [extent(o) for o in outputs]
    result = []
    for op in inputs:
        if isinstance(op, Operand) and any(
            lo < hi and max(lo, out_lo) < min(hi, out_hi) and not _same_elements(op, out)
            for (lo, hi), (out_lo, out_hi), out in ((extent(op), span, o) for span, o in zip(spans, outputs))
        ):
            op = detached(op, stream)
        result.append(op)
    return result


def _same_elements(a: Operand, b: Operand) -> bool:
    return (a.ptr, a.shape, a.strides, a.dtype) == (b.ptr, b.shape, b.strides, b.dtype)


def _new_output(spec: KernelSpec, plan: Plan, k: int, like: Operand | None, stream: Any,
                handle: int) -> Operand:
    shape = plan.out_shapes[k]
    loop_nd = len(plan.loop_shape)
    if spec.layout is not None:
        # Order-major: core dimensions outermost, so the threads of a warp (consecutive loop
        # elements) write consecutive addresses for every core index.
        axes = (*range(loop_nd, len(shape)), *range(loop_nd))
    elif plan.order == "F":
        axes = tuple(reversed(range(len(shape))))
    else:
        axes = tuple(range(len(shape)))
    return allocate(like, shape, plan.result_dtype, axes, stream, handle)


def _where_operand(where: Any, loop_shape: tuple[int, ...], stream: Any, handle: int) -> Any:
    """``None`` (no mask), ``False`` (nothing to write) or the mask as an :class:`Operand`."""
    if where is True:
        return None
    if _is_device_array(where):
        mask = describe(where, consumer=handle)
        if mask.dtype != np.bool_:
            raise TypeError(f"where= must be a boolean array, got dtype {mask.dtype}")
    else:
        host = np.asarray(where)
        if host.dtype != np.bool_:
            raise TypeError(f"where= must be boolean, got dtype {host.dtype}")
        if host.size == 1:
            return None if host.reshape(())[()] else False
        mask = to_device(host, stream)
    if np.broadcast_shapes(mask.shape, loop_shape) != tuple(loop_shape):
        raise ValueError(f"where= of shape {mask.shape} does not broadcast to {loop_shape}")
    return mask


def _launch_with_casts(spec: KernelSpec, kernels: CudaKernels, plan: Plan, args: list[Any],
                       targets: list[Operand], cores: list[int], mask: Any, stream: Any) -> None:
    """Launch; core operands of another dtype than the loop's go through loop-dtype buffers."""
    loop = plan.loop.dtype
    staged: list[tuple[Operand, Operand]] = []  # (buffer, output) pairs to copy back
    for i, (op, core) in enumerate(zip([*args, *targets], cores)):
        if not core or not isinstance(op, Operand) or op.dtype == loop:
            continue
        buffer = allocate(None, op.shape, loop, tuple(range(len(op.shape))), stream, 0)
        if i < len(args) or mask is not None:  # inputs, and outputs that keep masked values
            cast(op, buffer, stream)
        if i < len(args):
            args[i] = buffer
        else:
            staged.append((buffer, op))
            targets[i - len(args)] = buffer
    launch(kernels, loop, [*args, *targets], cores, len(targets), mask, plan.loop_shape, stream)
    for buffer, out in staged:
        cast(buffer, out, stream)


def _copy_back(device: Operand, host: np.ndarray, stream: Any) -> None:
    values = np.empty(device.shape, device.dtype)
    get_runtime().copy(values.ctypes.data, device.ptr, values.nbytes, stream)
    stream.sync()
    np.copyto(host, values, casting="unsafe")


# -- casting copies between device arrays (through the same kernels) ------------------------------
_identity_kernels: list[CudaKernels] = []


def cast(src: Operand, dst: Operand, stream: Any) -> None:
    """Copy ``src`` into ``dst`` (same shape), converting the dtype on the way."""
    if not _identity_kernels:
        _identity_kernels.append(CudaKernels(IDENTITY))
    loop = np.dtype(np.float64) if np.float64 in (src.dtype, dst.dtype) else np.dtype(np.float32)
    launch(_identity_kernels[0], loop, [src, dst], [0, 0], 1, None, src.shape, stream)
