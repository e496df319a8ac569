"""Views of device arrays with other shapes and strides, of the same kind where it has views.

A gufunc's ``axes=`` transposes its operands (see ``gpufuncs.dispatch.axes``). Each kind is
viewed by its own library, so that new outputs are still made by it: CuPy's ``as_strided``,
torch's ``Tensor.as_strided`` (strides in elements), a Numba ``DeviceNDArray`` over the same
memory, and, for any other ``__cuda_array_interface__`` object, an :class:`InterfaceView`.
DLPack-only objects have no such view: a DLPack capsule is read once, on the launch's stream.
"""

from __future__ import annotations

from typing import Any

from . import compat
from .arrays import CAI, CUPY, NUMBA, SIM, TORCH, kind_of


class InterfaceView:
    """A ``__cuda_array_interface__`` object over the memory of ``base``, with another shape
    and strides (``base`` is kept alive with it)."""

    __slots__ = ("__cuda_array_interface__", "base")

    def __init__(self, base: Any, shape: tuple[int, ...], strides: tuple[int, ...]) -> None:
        interface = dict(base.__cuda_array_interface__)
        interface.update(shape=tuple(shape), strides=tuple(strides), version=max(interface["version"], 2))
        self.__cuda_array_interface__, self.base = interface, base


def strided_view(obj: Any, shape: tuple[int, ...], strides: tuple[int, ...]) -> Any:
    """A view of device array ``obj`` from its first element, with ``shape`` and byte ``strides``."""
    kind = kind_of(type(obj))
    if kind == CUPY:
        from cupy.lib.stride_tricks import as_strided

        return as_strided(obj, shape, strides)
    if kind == TORCH:
        size = obj.element_size()
        return obj.as_strided(shape, tuple(s // size for s in strides))
    if kind == NUMBA:
        from numba.cuda.cudadrv.devicearray import DeviceNDArray

        return DeviceNDArray(shape, strides, obj.dtype, stream=obj.stream, gpu_data=obj.gpu_data)
    if kind == SIM:
        return compat.sim_view(obj, shape, strides)
    if kind == CAI:
        return InterfaceView(obj, shape, strides)
    raise TypeError(f"a DLPack-only array ({type(obj).__name__}) cannot be viewed with its axes "
                    "moved (axes=, axis=, keepdims=): pass it through a library that views it "
                    "(CuPy, torch, Numba), or move its axes there")
