"""Everything of the cuda target that leans on private APIs or stands in for the GPU, in one place.

* **The CUDA simulator** (``NUMBA_ENABLE_CUDASIM=1``): it runs kernels as Python, so pointers and
  core operands are passed as :class:`SimPointer` / :class:`SimCore` objects over host memory
  (:func:`sim_value` builds them), and its device arrays are NumPy arrays underneath.
* **Private APIs**, each used where no public one exists (checked with numba-cuda 0.30, CuPy 14,
  PyTorch 2.11): the linked cubin and entry point of a compiled Numba kernel (and its loaded
  ``CUkernel``, for code numba-cuda must set up itself), building a ``DeviceNDArray`` or a CuPy
  array around our own memory without its constructor's cost, and torch's raw current-stream
  getter.
* **Code generation as NumPy computes**: an exact float remainder (:func:`exact_remainder`), put
  in while kernels compile (see :mod:`.compile`).
"""

from __future__ import annotations

import ctypes
import functools
import os
from collections.abc import Callable
from typing import Any

import numpy as np

SIMULATED = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"


# -- the simulator ----------------------------------------------------------------------------------
def _host_view(address: int, nbytes: int, dtype: np.dtype) -> np.ndarray:
    return np.frombuffer((ctypes.c_char * nbytes).from_address(address), dtype)


class SimPointer:
    """A typed raw address, indexed like the ``CPointer`` a real kernel receives."""

    def __init__(self, address: int, dtype: np.dtype) -> None:
        self.address, self.dtype = address, np.dtype(dtype)

    def __getitem__(self, off: int) -> Any:
        return _host_view(self.address + off * self.dtype.itemsize, self.dtype.itemsize, self.dtype)[0]

    def __setitem__(self, off: int, value: Any) -> None:
        with np.errstate(all="ignore"):  # a store casts silently on the GPU (inf past float16's range)
            _host_view(self.address + off * self.dtype.itemsize, self.dtype.itemsize, self.dtype)[0] = value


class SimCore:
    """A core operand: ``a[off]`` is the (strided) core view of loop element ``off``."""

    def __init__(self, address: int, dtype: np.dtype, shape: tuple[int, ...],
                 strides: tuple[int, ...]) -> None:
        self.address, self.dtype = address, np.dtype(dtype)
        self.shape, self.strides = shape, strides  # core shape, core strides in bytes
        self.span = sum((n - 1) * s for n, s in zip(shape, strides)) + self.dtype.itemsize

    def __getitem__(self, off: int) -> np.ndarray:
        flat = _host_view(self.address + off * self.dtype.itemsize, self.span, self.dtype)
        return np.lib.stride_tricks.as_strided(flat, self.shape, self.strides)


def sim_array(host: np.ndarray) -> Any:
    """A simulator device array over ``host`` (what Numba's device arrays are there)."""
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

    return FakeCUDAArray(host)


def sim_pointer(obj: Any) -> int:
    """The host address of a simulator device array."""
    return obj._ary.ctypes.data


def sim_view(obj: Any, shape: tuple[int, ...], strides: tuple[int, ...]) -> Any:
    """A simulator device array over ``obj``'s memory, with another shape and byte strides."""
    return sim_array(np.lib.stride_tricks.as_strided(obj._ary, shape, strides))


def is_sim_array(cls: type) -> bool:
    return cls.__name__ == "FakeCUDAArray"


# -- numba-cuda internals -----------------------------------------------------------------------------
def loaded_kernel(compiled: Any) -> Any:
    """The ``CUkernel`` handle of a compiled ``cuda.jit`` overload, its module loaded.

    numba-cuda keeps the loaded module in its code library; the handle is what
    ``cuLaunchKernel`` takes (as a ``CUfunction``, which CUDA 12 accepts for a ``CUkernel``).
    """
    compiled.bind()
    return compiled._codelibrary.get_cufunc().handle


def compiled_cubin(compiled: Any) -> tuple[str, bytes] | None:
    """The entry point's name and the linked cubin of a compiled ``cuda.jit`` overload (for
    the current context's GPU), or ``None`` for code whose module numba-cuda must set up when it
    loads it (its runtime, cooperative launches): that is left to numba-cuda."""
    library = compiled._codelibrary
    if library._setup_functions or library._teardown_functions:
        return None
    cubin = library.get_cubin()  # a cuda.core ObjectCode (numba-cuda 0.30), or bytes before
    return library._entry_name, bytes(getattr(cubin, "code", cubin))


@functools.cache
def _numba_parts(device: int) -> tuple[Any, Any, Any]:
    from numba.cuda.cudadrv import driver
    from numba.cuda.cudadrv.devicearray import DeviceNDArray

    # The device's primary context as Numba knows it: what Numba's own arrays on that device
    # carry, and what ``numba_device`` reads back. (Called with that context current.)
    context = driver.driver.get_device(device).get_primary_context()
    context.prepare_for_use()
    return DeviceNDArray, driver, context


def numba_device(array: Any) -> int | None:
    """The device of a Numba device array (``None`` for an empty one, which has no memory)."""
    memory = array.gpu_data
    return None if memory is None else memory.context.device.id


def numba_array_maker(shape: tuple[int, ...], strides: tuple[int, ...], dtype: np.dtype,
                      device: int = 0) -> Callable[[int, int, Any], Any]:
    """``make(address, nbytes, owner)``: a Numba ``DeviceNDArray`` of this layout over memory
    we own on ``device`` (``owner`` is kept alive with it).

    Numba's constructor re-derives the layout on every call (about 10 us); each array is
    cloned from a template made here once and given its own memory pointer instead.
    """
    device_array, driver, context = _numba_parts(device)
    null = driver.MemoryPointer(context, driver.binding.CUdeviceptr(0), 0)
    template = device_array(shape, strides, dtype, gpu_data=null).__dict__
    new, memory, pointer = object.__new__, driver.MemoryPointer, driver.binding.CUdeviceptr

    def make(address: int, nbytes: int, owner: Any) -> Any:
        array = new(device_array)
        array.__dict__.update(template)
        array.gpu_data = memory(context, pointer(address), nbytes, owner=owner)
        return array

    return make


def cupy_array_maker(shape: tuple[int, ...], dtype: np.dtype) -> Callable[..., Any]:
    """``make(memory, address=None)``: a C-contiguous ``cupy.ndarray`` of ``shape`` and
    ``dtype`` over CuPy ``memory`` (a ``MemoryPointer``; ``address`` is unused: the signature
    of an output's ``wrap``).

    CuPy's public constructor goes through ``ndarray.__new__``'s ``*args, **kwargs`` in
    Python; its two steps, ``__new__(_no_init=True)`` then ``_init``, cost about half (0.66
    against 1.50 us on an H100 host: an eighth of a small call's dispatch). They are used
    where this CuPy has them and they give what the public constructor gives (checked once),
    else the public constructor."""
    import cupy

    if not _cupy_two_step():
        return lambda memory, address=None: cupy.ndarray(shape, dtype, memory)
    ndarray = cupy.ndarray
    new = ndarray.__new__

    def make(memory: Any, address: Any = None) -> Any:
        array = new(ndarray, _no_init=True)
        array._init(shape, dtype, memory)
        return array

    return make


@functools.cache
def _cupy_two_step() -> bool:
    """Whether CuPy's private two-step constructor makes the array its public one makes."""
    import cupy

    try:
        memory = cupy.cuda.alloc(24)
        array = cupy.ndarray.__new__(cupy.ndarray, _no_init=True)
        array._init((2, 3), np.dtype(np.int32), memory)
        public = cupy.ndarray((2, 3), np.dtype(np.int32), memory)
    except Exception:  # (a CuPy without them, or other arguments)
        return False
    return (type(array) is cupy.ndarray and array.shape == public.shape and array.dtype == public.dtype
            and array.strides == public.strides and array.data.ptr == public.data.ptr
            and bool(array.flags.c_contiguous) and array.base is None)


# -- other libraries ---------------------------------------------------------------------------------
@functools.cache
def torch_stream_getter() -> Callable[[int], int]:
    """``device index -> raw handle`` of torch's current stream (the private getter is 20x
    faster than ``torch.cuda.current_stream(device).cuda_stream``)."""
    import torch

    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw
    return lambda device: torch.cuda.current_stream(device).cuda_stream


@functools.cache
def torch_dtypes() -> dict[Any, np.dtype]:
    """NumPy dtypes of the torch dtypes that gpufuncs accepts (those this torch has)."""
    import torch

    names = ("float16", "float32", "float64", "complex64", "complex128", "int8", "int16", "int32",
             "int64", "uint8", "uint16", "uint32", "uint64", "bool")
    return {getattr(torch, n): np.dtype(n) for n in names if hasattr(torch, n)}


# -- code generation as NumPy computes --------------------------------------------------------------
class _FremAsFmod:
    """An ``IRBuilder`` whose ``frem`` calls libdevice's ``fmod`` (exact, as C's)."""

    def __init__(self, builder: Any) -> None:
        self._builder = builder

    def __getattr__(self, name: str) -> Any:
        return getattr(self._builder, name)

    def frem(self, x: Any, y: Any, name: str = "") -> Any:
        from llvmlite import ir
        from numba.cuda import cgutils

        fname = "__nv_fmodf" if x.type == ir.FloatType() else "__nv_fmod"
        fnty = ir.FunctionType(x.type, [x.type, x.type])
        fn = cgutils.get_or_insert_function(self._builder.module, fnty, fname)
        return self._builder.call(fn, [x, y], name=name)


def exact_remainder(original: Callable[..., Any]) -> Callable[..., Any]:
    """numba-cuda's float ``%``, ``//`` and ``divmod`` (CPython's ``float_divmod``, the algorithm
    of NumPy's ``npy_divmod``) with its ``fmod`` exact.

    numba-cuda emits LLVM's ``frem`` for it, which the NVPTX backend computes as
    ``a - trunc(a / b) * b``: ``-1.0 % inf`` was NaN (NumPy: ``inf``), ``0.0 % inf`` NaN, and a
    quotient past ``2**52`` lost the remainder (``1.0 % 3e-59``: ``1.2e-17``, NumPy ``2.0e-59``).
    libdevice's ``fmod`` is exact, as glibc's that NumPy calls.
    """

    def divmod_body(context: Any, builder: Any, vx: Any, wx: Any) -> Any:
        return original(context, _FremAsFmod(builder), vx, wx)

    return divmod_body
