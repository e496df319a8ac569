"""Device arrays of every kind: what a kernel needs from them, and results of the same kind.

An input or ``out=`` array is reduced to an :class:`Operand` (address, shape, byte strides,
dtype, and the stream its producer uses) by an adapter chosen once per Python type: direct
attribute reads for Numba, CuPy and PyTorch (their ``__cuda_array_interface__`` dicts cost more),
the interface dict for any other ``__cuda_array_interface__`` object (v3 ``stream`` included), and
``cuda.core``'s ``StridedMemoryView`` for DLPack-only CUDA objects. New outputs are made by the
library of the first device input (CuPy's and torch's pools on their current streams), or as a
Numba ``DeviceNDArray`` over memory from the target's stream-ordered pool.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .runtime import get_runtime


@dataclass
class Operand:
    """What the launch layer needs from one device array."""

    obj: Any
    kind: str  # "numba", "cupy", "torch", "cai", "dlpack", "sim" or "host-copy"
    ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]  # in bytes
    dtype: np.dtype
    stream: int | None  # the producer's stream handle, when it says so
    keep: Any = None  # what must stay alive while the kernel runs (views, temporary buffers)


@functools.lru_cache(maxsize=256)
def c_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """Byte strides of a C-contiguous array."""
    strides, step = [], itemsize
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


# -- streams ------------------------------------------------------------------------------------
def stream_handle(stream: Any) -> int:
    """The raw ``cudaStream_t`` of a numba, cuda.core, CuPy or torch stream (or an int handle)."""
    if isinstance(stream, int):
        return stream
    if type(stream).__module__.startswith("numba.cuda.simulator"):
        return 0  # the simulator's streams have no handle (and need none)
    proto = getattr(stream, "__cuda_stream__", None)
    if proto is not None:
        value = proto() if callable(proto) else proto
        return int(value[1])
    for attr in ("cuda_stream", "ptr", "handle"):  # torch, CuPy, numba spellings
        value = getattr(stream, attr, None)
        if value is not None:
            return int(getattr(value, "value", value) or 0)
    raise TypeError(f"stream= must be a numba, cuda.core, CuPy or torch stream, got {type(stream).__name__}")


def _cupy_stream() -> int:
    import cupy

    return cupy.cuda.get_current_stream().ptr


@functools.cache
def _torch_stream_getter() -> Callable[[int], int]:
    import torch

    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # 20x faster than the public API
    if raw is not None:
        return raw
    return lambda device: torch.cuda.current_stream(device).cuda_stream


def current_stream(op: Operand) -> int | None:
    """The stream a library's array runs on by default: CuPy's and torch's current stream."""
    if op.kind == "cupy":
        return _cupy_stream()
    if op.kind == "torch":
        return _torch_stream_getter()(op.obj.device.index)
    return op.stream


# -- adapters -----------------------------------------------------------------------------------
def _numba(obj: Any) -> Operand:
    ptr = obj.device_ctypes_pointer.value or 0
    stream = obj.stream
    handle = stream.__cuda_stream__()[1] if stream else 0
    return Operand(obj, "numba", ptr, obj.shape, obj.strides, obj.dtype, int(handle))


def _cupy(obj: Any) -> Operand:
    return Operand(obj, "cupy", obj.data.ptr, obj.shape, obj.strides, obj.dtype, _cupy_stream())


@functools.cache
def _torch_dtypes() -> dict[Any, np.dtype]:
    import torch

    names = ("float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool")
    return {getattr(torch, n): np.dtype(n) for n in names}


def _torch(obj: Any) -> Operand:
    if not obj.is_cuda:
        raise TypeError("a CPU torch tensor cannot be mixed with device arrays; use a CUDA tensor")
    dtype = _torch_dtypes().get(obj.dtype)
    if dtype is None:
        raise TypeError(f"unsupported torch dtype {obj.dtype}")
    strides = tuple(s * dtype.itemsize for s in obj.stride())
    return Operand(obj, "torch", obj.data_ptr(), tuple(obj.shape), strides, dtype,
                   _torch_stream_getter()(obj.device.index))


def _sim(obj: Any) -> Operand:
    ary = obj._ary  # the simulator's device array is a NumPy array in host memory
    return Operand(obj, "sim", ary.ctypes.data, ary.shape, ary.strides, ary.dtype, None)


def _cai(obj: Any) -> Operand:
    cai = obj.__cuda_array_interface__
    if cai.get("mask") is not None:
        raise TypeError("masked __cuda_array_interface__ arrays are not supported")
    dtype = np.dtype(cai["typestr"])
    shape = tuple(cai["shape"])
    strides = cai.get("strides") or c_strides(shape, dtype.itemsize)
    stream = cai.get("stream")  # v3: None = nothing to wait for; 1, 2 = the default streams
    return Operand(obj, "cai", cai["data"][0] or 0, shape, tuple(strides), dtype, stream)


def _dlpack(obj: Any, consumer: int) -> Operand:
    from cuda.core.utils import StridedMemoryView

    # The producer orders its pending work before ``consumer`` (DLPack's stream argument, where
    # 1 names the legacy default stream and 0 is not allowed).
    view = StridedMemoryView.from_dlpack(obj, stream_ptr=consumer or 1)
    dtype = np.dtype(view.dtype)
    shape = tuple(view.shape)
    strides = (tuple(s * dtype.itemsize for s in view.strides) if view.strides is not None
               else c_strides(shape, dtype.itemsize))
    return Operand(obj, "dlpack", view.ptr, shape, strides, dtype, None, keep=view)


_ADAPTERS: dict[type, Callable[[Any], Operand]] = {}


def has_cai(obj: Any) -> bool:
    """Whether ``obj`` has the CUDA array interface (looked up on the class first: torch builds
    the interface dict on every access)."""
    cls = type(obj)
    return hasattr(cls, "__cuda_array_interface__") or "__cuda_array_interface__" in getattr(
        obj, "__dict__", ())


def _adapter_for(obj: Any) -> Callable[[Any], Operand] | None:
    cls = type(obj)
    module = cls.__module__.split(".")[0]
    if module == "cupy":
        return _cupy
    if module == "torch":
        return _torch
    if getattr(cls, "__cuda_ndarray__", False):
        return _sim if cls.__name__ == "FakeCUDAArray" else _numba
    if has_cai(obj):
        return _cai
    return None  # DLPack-only: needs the consumer stream, see describe()


def describe(obj: Any, consumer: int | None = None) -> Operand:
    """The :class:`Operand` of a device array (``consumer``: our stream, for DLPack)."""
    cls = type(obj)
    adapter = _ADAPTERS.get(cls)
    if adapter is None:
        adapter = _adapter_for(obj)
        if adapter is None:
            return _dlpack(obj, 0 if consumer is None else consumer)
        _ADAPTERS[cls] = adapter
    return adapter(obj)


def to_device(array: np.ndarray, stream: Any) -> Operand:
    """Copy a host array to the device once (a host input mixed with device inputs)."""
    runtime = get_runtime()
    array = np.ascontiguousarray(array)
    buffer = runtime.allocate(array.nbytes, stream)
    runtime.copy(_address(buffer), array.ctypes.data, array.nbytes, stream)
    strides = c_strides(array.shape, array.itemsize)
    return Operand(array, "host-copy", _address(buffer), array.shape, strides, array.dtype, None,
                   keep=buffer)


def extent(op: Operand) -> tuple[int, int]:
    """The addresses ``[lo, hi)`` that ``op``'s elements occupy (empty without elements)."""
    if 0 in op.shape:
        return op.ptr, op.ptr
    lo = hi = op.ptr
    for n, s in zip(op.shape, op.strides):
        if s < 0:
            lo += (n - 1) * s
        else:
            hi += (n - 1) * s
    return lo, hi + op.dtype.itemsize


def detached(op: Operand, stream: Any) -> Operand:
    """``op`` read from a copy of its memory: the same strides over a new buffer."""
    runtime = get_runtime()
    lo, hi = extent(op)
    buffer = runtime.allocate(hi - lo, stream)
    runtime.copy(_address(buffer), lo, hi - lo, stream)
    return dataclasses.replace(op, ptr=_address(buffer) + (op.ptr - lo), keep=buffer)


def _address(buffer: Any) -> int:
    return buffer.ptr if hasattr(buffer, "ptr") else int(buffer.handle)


# -- new outputs of the first input's kind ----------------------------------------------------------
def allocate(like: Operand | None, shape: tuple[int, ...], dtype: np.dtype, axes: tuple[int, ...],
             stream: Any, handle: int) -> Operand:
    """A new output of logical ``shape``, stored C-contiguous in the order ``axes``.

    ``axes`` lists the logical dimensions from outermost to innermost in memory: the identity for
    C order, reversed for F order, core dimensions first for gufunc outputs (order-major: the
    threads of a warp, one per loop element, write consecutive addresses).
    """
    kind = like.kind if like is not None else "numba"
    if get_runtime().simulated:
        kind = "sim"
    storage = tuple(shape[a] for a in axes)
    # The storage dimension of each logical one (the identity in the common C-order case).
    back = axes if axes == tuple(range(len(axes))) else tuple(int(i) for i in np.argsort(axes))
    if kind == "cupy":
        return _cupy_empty(storage, dtype, back, handle)
    if kind == "torch":
        return _torch_empty(like, storage, dtype, back, handle)
    if kind == "sim":
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

        return _sim(FakeCUDAArray(np.empty(storage, dtype).transpose(back)))
    buffer = get_runtime().allocate(math.prod(storage) * dtype.itemsize, stream)
    strides = c_strides(storage, dtype.itemsize)
    strides = tuple(strides[b] for b in back)
    return _numba(_numba_array(buffer, shape, strides, dtype))


def _cupy_empty(storage, dtype, back, handle: int) -> Operand:
    import cupy

    if handle == _cupy_stream():
        out = cupy.empty(storage, dtype)
    else:
        # CuPy's pool orders reuse on the stream it allocates under: make that our stream.
        from_external = getattr(cupy.cuda.Stream, "from_external", None)  # CuPy >= 14
        ours = (from_external(get_runtime().stream(handle)) if from_external
                else cupy.cuda.ExternalStream(handle))
        with ours:
            out = cupy.empty(storage, dtype)
    return _cupy(out if back == tuple(range(len(back))) else out.transpose(back))


def _torch_empty(like: Operand, storage, dtype, back, handle: int) -> Operand:
    import torch

    tdtype = next(t for t, d in _torch_dtypes().items() if d == dtype)
    device = like.obj.device
    out = torch.empty(storage, dtype=tdtype, device=device)
    if handle != _torch_stream_getter()(device.index):
        # torch's caching allocator must not reuse the memory before our stream is done.
        out.record_stream(torch.cuda.ExternalStream(handle, device=device))
    return _torch(out.permute(back))


@functools.cache
def _numba_parts() -> tuple[Any, Any, Any]:
    from numba import cuda
    from numba.cuda.cudadrv import driver
    from numba.cuda.cudadrv.devicearray import DeviceNDArray

    return DeviceNDArray, driver, cuda.current_context()


_TEMPLATES: dict[tuple[Any, ...], Any] = {}


def _numba_array(buffer: Any, shape: tuple[int, ...], strides: tuple[int, ...], dtype: np.dtype) -> Any:
    """A Numba ``DeviceNDArray`` over a pool buffer (which it keeps alive and frees when dropped).

    Numba's constructor re-derives the layout on every call (about 10 us); arrays of a shape
    already seen are cloned from a template and given their own memory pointer instead.
    """
    device_array, driver, context = _numba_parts()
    key = (shape, strides, dtype)
    template = _TEMPLATES.get(key)
    if template is None:
        if len(_TEMPLATES) > 256:
            _TEMPLATES.clear()
        null = driver.MemoryPointer(context, driver.binding.CUdeviceptr(0), 0)
        template = _TEMPLATES[key] = device_array(shape, strides, dtype, gpu_data=null)
    array = object.__new__(device_array)
    array.__dict__.update(template.__dict__)
    array.gpu_data = driver.MemoryPointer(context, driver.binding.CUdeviceptr(_address(buffer)),
                                          buffer.size, owner=buffer)
    return array


# -- dtype and shape for the dispatcher's validation ------------------------------------------------
def device_dtype(obj: Any) -> np.dtype:
    """The NumPy dtype of a device array whose ``dtype`` attribute is not one (torch, DLPack)."""
    if type(obj).__module__.split(".")[0] == "torch":
        found = _torch_dtypes().get(obj.dtype)
        if found is None:
            raise TypeError(f"unsupported torch dtype {obj.dtype}")
        return found
    if hasattr(obj, "__cuda_array_interface__"):
        return np.dtype(obj.__cuda_array_interface__["typestr"])
    return np.dtype(_dlpack_view(obj).dtype)


def device_shape(obj: Any) -> tuple[int, ...]:
    """The shape of a device array without a ``shape`` attribute."""
    if hasattr(obj, "__cuda_array_interface__"):
        return tuple(obj.__cuda_array_interface__["shape"])
    return tuple(_dlpack_view(obj).shape)


def _dlpack_view(obj: Any) -> Any:
    from cuda.core.utils import StridedMemoryView

    return StridedMemoryView.from_dlpack(obj, stream_ptr=-1)  # metadata only: no stream order
