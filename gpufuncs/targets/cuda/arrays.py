"""Device arrays of every kind: their pointers and streams, and new outputs of the same kind.

Each kind of array is read by a function chosen once per call signature: direct attribute reads
for Numba, CuPy and PyTorch (their ``__cuda_array_interface__`` dicts cost more), the interface
dict for any other ``__cuda_array_interface__`` object (v3 ``stream`` included), and
``cuda.core``'s ``StridedMemoryView`` for DLPack-only CUDA objects. New outputs are made by the
library of the first device input (CuPy's and torch's pools, on the launch stream), or as a Numba
``DeviceNDArray`` over a raw buffer from :meth:`Runtime.allocator` (CuPy's pool where CuPy is
imported, else the target's stream-ordered pool).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..base import c_strides, library_of
from . import compat
from .runtime import Runtime

#: Kinds of device array (``kind_of``).
CUPY, TORCH, NUMBA, SIM, CAI, DLPACK = "cupy", "torch", "numba", "sim", "cai", "dlpack"


def kind_of(cls: type) -> str:
    """The kind of a device array class."""
    library = library_of(cls)
    if library in (CUPY, TORCH):
        return library
    if getattr(cls, "__cuda_ndarray__", False):
        return SIM if compat.is_sim_array(cls) else NUMBA
    if hasattr(cls, "__dlpack__") and not hasattr(cls, "__cuda_array_interface__"):
        return DLPACK
    return CAI  # the interface on the class, or set on each instance


# -- pointers ---------------------------------------------------------------------------------------
def _cai_pointer(obj: Any) -> int:
    interface = obj.__cuda_array_interface__
    if interface.get("mask") is not None:
        raise TypeError("masked __cuda_array_interface__ arrays are not supported")
    return interface["data"][0] or 0


def _numba_pointer(obj: Any) -> int:
    # Numba's own allocations are ``OwnedPointer`` proxies, whose ``device_pointer`` goes
    # through a Python ``__getattr__``; their ``device_ctypes_pointer`` is a plain attribute.
    memory = obj.gpu_data  # None for an empty array
    return memory.device_ctypes_pointer.value or 0 if memory is not None else 0


# CuPy's read by operator's getter: a C call, no Python frame on every call.
_POINTERS: dict[str, Callable[[Any], int]] = {
    CUPY: operator.attrgetter("data.ptr"),
    NUMBA: _numba_pointer,
    SIM: compat.sim_pointer,
    CAI: _cai_pointer,
}


def pointer_getter(kind: str) -> Callable[[Any], int]:
    """``array -> device address`` for arrays of ``kind`` (not DLPack: see :func:`dlpack_pointer`)."""
    if kind == TORCH:
        import torch  # (imported already: a torch tensor is being called on)

        # The method itself: half the cost of operator.methodcaller, which binds it on every call.
        return torch.Tensor.data_ptr
    return _POINTERS[kind]


def dlpack_pointer(obj: Any, consumer: int) -> tuple[int, Any]:
    """The address of a DLPack-only array and the view that keeps it alive. The producer orders
    its pending work before ``consumer`` (DLPack's stream argument: 1 names the legacy default
    stream, and 0 is not allowed)."""
    from cuda.core.utils import StridedMemoryView

    view = StridedMemoryView.from_dlpack(obj, stream_ptr=consumer or 1)
    return view.ptr, view


# -- streams ----------------------------------------------------------------------------------------
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


def _numba_stream(obj: Any) -> int:
    stream = obj.stream
    return int(stream.__cuda_stream__()[1]) if stream else 0


def _cai_stream(obj: Any) -> int | None:
    return obj.__cuda_array_interface__.get("stream")  # v3: None = nothing to wait for


_STREAMS: dict[str, Callable[[Any], int | None]] = {
    NUMBA: _numba_stream,
    SIM: lambda a: None,
    CAI: _cai_stream,
    DLPACK: lambda a: None,  # the producer orders its work before ours (see dlpack_pointer)
}


def producer_stream(kind: str, runtime: Runtime) -> Callable[[Any], int | None]:
    """``array -> handle`` of the stream its library orders its work on (``None``: none), for
    arrays on ``runtime``'s device. CuPy's and torch's are their current streams (per device),
    read through getters looked up here, once per call signature, not on every call."""
    device = runtime.ordinal
    if kind == CUPY:
        from cupy.cuda import get_current_stream

        if runtime.switching:  # the current device may be another one
            return lambda a: get_current_stream(device).ptr
        return lambda a: get_current_stream().ptr
    if kind == TORCH:
        current = compat.torch_stream_getter()
        return lambda a: current(device)  # the call signature fixes the device
    return _STREAMS[kind]


# -- new outputs ------------------------------------------------------------------------------------
#: ``allocate(like, stream handle, current) -> (raw, address)``: memory for a new output (``raw``
#: keeps it alive). ``like`` is the input whose library and device it copies; ``current``: the
#: handle is that library's current stream, on which it orders its own allocations.
Allocate = Callable[[Any, int, bool], tuple[Any, int]]
#: ``wrap(raw, address) -> array``: the array the caller gets, made after the launch.
Wrap = Callable[[Any, int], Any]


def allocator(kind: str | None, shape: tuple[int, ...], dtype: np.dtype, axes: Sequence[int],
              runtime: Runtime, like_layout: bool = False) -> tuple[Allocate, Wrap | None]:
    """``(allocate, wrap)`` of a new output of logical ``shape`` on ``runtime``'s device, stored
    C-contiguous in the order ``axes`` (outermost first), made by the library of ``kind``.

    ``wrap`` is ``None`` where ``raw`` already is the array (torch, whose allocator makes
    tensors). Otherwise the array object is made after the launch, while the GPU computes:
    building a Numba ``DeviceNDArray`` or a CuPy array takes a small call longer than its
    kernel, and a caller who synchronizes waits for both only when one follows the other.
    ``like_layout``: ``like`` has that very shape, dtype and layout (its library may then copy
    them, for less)."""
    if runtime.simulated:
        kind = SIM
    axes = tuple(axes)
    storage = tuple(shape[a] for a in axes)
    identity = axes == tuple(range(len(axes)))
    back = axes if identity else tuple(int(i) for i in np.argsort(axes))  # logical -> stored
    if kind == CUPY:
        return _cupy_allocator(storage, dtype, None if identity else back, runtime)
    if kind == TORCH:
        return _torch_allocator(storage, dtype, None if identity else back, like_layout,
                                runtime.ordinal), None
    if kind == SIM:
        return (lambda like, handle, current: _sim_output(storage, dtype, back)), None
    return _numba_allocator(shape, storage, dtype, back, runtime)


def _cupy_allocator(storage: tuple[int, ...], dtype: np.dtype, back: tuple[int, ...] | None,
                    runtime: Any) -> tuple[Allocate, Wrap]:
    """From CuPy's pool on ``runtime``'s device (:meth:`Runtime.cupy_allocator`), wrapped as a
    CuPy array."""
    import cupy

    nbytes = math.prod(storage) * dtype.itemsize
    allocate_on = runtime.cupy_allocator(nbytes)

    alloc, size = cupy.cuda.alloc, max(nbytes, 1)

    def allocate(like: Any, handle: int, current: bool) -> tuple[Any, int]:
        # The common call inline (CuPy's current stream): two frames less of ~10 us. The
        # executors run with the device's context current (Runtime.guarded), which makes it
        # CuPy's current device, whose pool ``alloc`` takes from.
        if current:
            memory = alloc(size)
            return memory, memory.ptr
        return allocate_on(handle, current)

    make = compat.cupy_array_maker(storage, dtype)
    if back is None:
        return allocate, make

    def wrap(memory: Any, address: int) -> Any:
        return make(memory).transpose(back)

    return allocate, wrap


def _torch_allocator(storage: tuple[int, ...], dtype: np.dtype, back: tuple[int, ...] | None,
                     like_layout: bool, device: int) -> Allocate:
    import torch

    tdtype = next(t for t, d in compat.torch_dtypes().items() if d == dtype)
    current = compat.torch_stream_getter()
    empty_like = torch.empty_like  # (bound once: a module attribute read costs a small call 50 ns)

    def allocate(like: Any, handle: int, on_current: bool) -> tuple[Any, int]:
        # empty_like reads shape, dtype and device from ``like`` instead of parsing arguments
        # (half the cost of torch.empty for a small call); new_empty at least skips the device.
        out = empty_like(like) if like_layout else like.new_empty(storage, dtype=tdtype)
        if not on_current and handle != current(device):
            # torch's caching allocator must not reuse the memory before our stream is done.
            out.record_stream(torch.cuda.ExternalStream(handle, device=like.device))
        return (out if back is None else out.permute(back)), out.data_ptr()

    return allocate


def _sim_output(storage: tuple[int, ...], dtype: np.dtype, back: tuple[int, ...]) -> tuple[Any, int]:
    host = np.empty(storage, dtype)
    return compat.sim_array(host.transpose(back)), host.ctypes.data


def buffer_allocator(nbytes: int, runtime: Any) -> Allocate:
    """``allocate`` of ``nbytes`` from ``runtime.allocator``, as a raw buffer: a temporary
    (staging, a host ``out=``'s device copy) or a Numba output before it is wrapped."""
    allocate_on = runtime.allocator(nbytes)
    return lambda like, handle, current: allocate_on(handle)


def _numba_allocator(shape: tuple[int, ...], storage: tuple[int, ...], dtype: np.dtype,
                     back: tuple[int, ...], runtime: Any) -> tuple[Allocate, Wrap]:
    """A raw buffer (:func:`buffer_allocator`), wrapped as a Numba device array."""
    stored = c_strides(storage, dtype.itemsize)
    make = compat.numba_array_maker(shape, tuple(stored[b] for b in back), dtype, runtime.ordinal)

    nbytes = math.prod(storage) * dtype.itemsize

    def wrap(buffer: Any, address: int) -> Any:
        return make(address, nbytes, buffer)

    return buffer_allocator(nbytes, runtime), wrap


def address_of(buffer: Any) -> int:
    """The device address of a pool buffer (``cuda.core`` ``Buffer`` or the simulator's)."""
    return buffer.ptr if hasattr(buffer, "ptr") else int(buffer.handle)


# -- temporaries --------------------------------------------------------------------------------------
def to_device(array: np.ndarray, runtime: Any, stream: Any) -> tuple[int, Any]:
    """Copy a host array to a new contiguous buffer on ``runtime``'s device (a host input mixed
    with device inputs); returns its address and the buffer, alive until the launch."""
    array = np.ascontiguousarray(array)
    buffer = runtime.allocate(array.nbytes, stream)
    runtime.copy(address_of(buffer), array.ctypes.data, array.nbytes, stream)
    return address_of(buffer), buffer


def copy_span(address: int, lo: int, hi: int, runtime: Any, stream: Any) -> tuple[int, Any]:
    """A copy of the device bytes ``[address + lo, address + hi)`` on ``runtime``'s device;
    returns the address in the copy that corresponds to ``address``, and the buffer."""
    buffer = runtime.allocate(hi - lo, stream)
    runtime.copy(address_of(buffer), address + lo, hi - lo, stream)
    return address_of(buffer) - lo, buffer
