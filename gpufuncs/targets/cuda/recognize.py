"""Which arguments are CUDA device arrays, and their dtype, shape and strides.

This module imports neither ``numba.cuda`` nor any GPU library: dispatch asks it about every new
argument type, and importing gpufuncs must not start CUDA. It reads what the array libraries
expose: Numba device arrays (``__cuda_ndarray__``), CuPy, PyTorch CUDA tensors, any object with
``__cuda_array_interface__``, and DLPack objects on a CUDA device.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from ..base import DEVICE, Arg, DeviceArrays, c_strides, library_of

#: DLPack device types of CUDA memory: kDLCUDA, kDLCUDAManaged.
_DLPACK_CUDA = (2, 13)
_NOT_ARRAYS = (np.ndarray, np.generic, bool, int, float, complex, str, bytes)


def _declares_interface(cls: type) -> bool:
    # Looked up on the class: torch computes the interface dict on every access.
    return hasattr(cls, "__cuda_array_interface__") or bool(getattr(cls, "__cuda_ndarray__", False))


def torch_dtype(tensor: Any) -> np.dtype:
    """The NumPy dtype of a torch tensor (``TypeError`` for dtypes NumPy lacks, like bfloat16)."""
    from .compat import torch_dtypes

    found = torch_dtypes().get(tensor.dtype)
    if found is None:
        raise TypeError(f"unsupported torch dtype {tensor.dtype}")
    return found


def _several_devices() -> bool:
    """Whether this process sees more than one GPU (then arrays are asked for their device).
    Only asked about an existing device array: its library has initialised CUDA already."""
    from .runtime import device_count

    try:
        return device_count() > 1
    except Exception:  # no usable driver or bindings: the call is refused later, with the reason
        return False


def _pointer_device(address: int) -> int | None:
    """The device ordinal of a device address (``None`` for 0, an empty array's address)."""
    if not address:
        return None
    from cuda.bindings import driver

    attribute = driver.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
    err, device = driver.cuPointerGetAttribute(attribute, address)
    if int(err) != 0:
        raise TypeError(f"cannot tell the device of address {address:#x}: CUDA error {err!r}")
    return int(device)


def device_of(obj: Any) -> int | None:
    """The device a CUDA array of any kind lives on (``None``: an empty array, no memory)."""
    cls = type(obj)
    library = library_of(cls)
    if library == "torch":
        return obj.get_device()
    if library == "cupy":
        return obj.data.device_id
    if getattr(cls, "__cuda_ndarray__", False):
        from .compat import is_sim_array, numba_device

        return 0 if is_sim_array(cls) else numba_device(obj)
    if hasattr(obj, "__cuda_array_interface__"):
        return _pointer_device(obj.__cuda_array_interface__["data"][0] or 0)
    return int(obj.__dlpack_device__()[1])


def dlpack_view(obj: Any) -> Any:
    """Metadata of a DLPack-only object (no stream ordering: nothing is read yet)."""
    from cuda.core.utils import StridedMemoryView

    return StridedMemoryView.from_dlpack(obj, stream_ptr=-1)


class CudaArrays(DeviceArrays):
    """Recognises CUDA device arrays of every kind, without touching the GPU."""

    target = "cuda"

    def classify(self, cls: type) -> bool | None:
        if issubclass(cls, _NOT_ARRAYS):
            return False
        if _declares_interface(cls) and not hasattr(cls, "is_cuda"):
            return True
        return None  # torch (CPU or CUDA), DLPack objects, interfaces set per instance

    def owns(self, obj: Any) -> bool:
        cls = type(obj)
        if _declares_interface(cls):
            return bool(getattr(obj, "is_cuda", True))
        if "__cuda_array_interface__" in getattr(obj, "__dict__", ()):
            return True
        device = getattr(obj, "__dlpack_device__", None)
        return device is not None and device()[0] in _DLPACK_CUDA

    def describe(self, obj: Any) -> Arg:
        # With one GPU every array is on device 0, and nothing needs to ask.
        return replace(self._layout(obj), device=device_of(obj) if _several_devices() else 0)

    def _layout(self, obj: Any) -> Arg:
        cls = type(obj)
        library = library_of(cls)
        if library == "torch":
            dtype = torch_dtype(obj)
            return Arg(DEVICE, cls, dtype, tuple(obj.shape), tuple(s * dtype.itemsize for s in obj.stride()))
        if library == "cupy" or getattr(cls, "__cuda_ndarray__", False):
            return Arg(DEVICE, cls, obj.dtype, tuple(obj.shape), tuple(obj.strides))
        if hasattr(obj, "__cuda_array_interface__"):
            cai = obj.__cuda_array_interface__
            dtype, shape = np.dtype(cai["typestr"]), tuple(cai["shape"])
            strides = cai.get("strides") or c_strides(shape, dtype.itemsize)
            return Arg(DEVICE, cls, dtype, shape, tuple(strides))
        view = dlpack_view(obj)
        dtype, shape = np.dtype(view.dtype), tuple(view.shape)
        strides = view.strides
        strides = (tuple(s * dtype.itemsize for s in strides) if strides is not None
                   else c_strides(shape, dtype.itemsize))
        return Arg(DEVICE, cls, dtype, shape, strides)

    def keyer(self, cls: type) -> Callable[[Any], Any] | None:
        # C-contiguous arrays of one shape and dtype are alike in every decision (strides of
        # length-1 dimensions, the only ones that may differ, are never used): the flag, where
        # the library has a cheap one, stands in for the strides, which it would build anew.
        # The device is part of the key only where there are several, and always for torch,
        # whose tensors on the CPU are not ours: its device tells them apart (and the other
        # GPUs) in one call, and they are keyed as host operands, converted per call.
        library = library_of(cls)
        if (library == "cupy" or getattr(cls, "__cuda_ndarray__", False)) and _several_devices():
            return lambda obj: (cls, obj.dtype, obj.shape, obj.strides, device_of(obj))
        if library == "cupy" and hasattr(cls, "_c_contiguous"):
            return lambda obj: (cls, obj.dtype, obj.shape, True if obj._c_contiguous else obj.strides)
        if library == "cupy" or getattr(cls, "__cuda_ndarray__", False):
            return lambda obj: (cls, obj.dtype, obj.shape, obj.strides)
        if library == "torch":  # get_device(): an int, -1 on the CPU (a torch.device costs more)
            return lambda obj: (cls, obj.dtype, obj.shape, True if obj.is_contiguous() else obj.stride(),
                                obj.get_device())
        return None  # interface dicts and DLPack capsules: described afresh on every call

    def writable(self, obj: Any) -> bool:
        """False for a ``__cuda_array_interface__`` that declares its data read-only."""
        interface = getattr(obj, "__cuda_array_interface__", None)
        return not (interface and interface.get("data", (0, False))[1])


    def always_writable(self, cls: type) -> bool:
        # CuPy and torch have no read-only device arrays, and Numba's always declare theirs
        # writable: reading their interface (a new dict each time) would be the costliest step
        # of a small ``out=`` call.
        return library_of(cls) in ("cupy", "torch") or bool(getattr(cls, "__cuda_ndarray__", False))

    def view(self, obj: Any, shape: tuple[int, ...], strides: tuple[int, ...]) -> Any:
        from .views import strided_view  # (imports the array libraries' modules)

        return strided_view(obj, shape, strides)
