"""Launch plans: everything about a launch that the layout of its operands decides, done once.

A :class:`LaunchPlan` is built from the operands' dtypes, shapes and strides (known per call
signature): flat or strided indexing (dimensions collapsed where every operand steps evenly),
the kernel compiled for those argument types, the grid, and a :class:`Packer` holding the
kernel's parameters in a buffer, constants (strides, shape, count) written once. A launch then
writes the per-call values (pointers and scalars) into their slots and calls ``cuLaunchKernel``.
"""

from __future__ import annotations

import math
import struct
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba.core import types
from numba.np.numpy_support import from_dtype

from ...spec import KernelSpec, Loop
from ..base import c_strides, collapse
from . import fpflags
from .compat import SimCore, SimPointer
from .runtime import BLOCK, Runtime

_ONE = np.uint8(1)  # ``where`` when nothing is masked: passed by value, folded by the compiler


def runs_elementwise(spec: KernelSpec) -> bool:
    """Whether ``spec`` runs the elementwise template (``kernels.ufunc_kernel``): an
    elementwise kernel, also one of several outputs, which calls plan as its gufunc form of
    ``()`` operands only (see :attr:`KernelSpec.executed`) and which runs here as the
    elementwise kernel it is (array inputs staged, results checked for floating-point errors,
    no one-element core views)."""
    return spec.layout is None or spec.tuple_results


@dataclass(frozen=True)
class Layout:
    """One operand of a launch: an array (``shape``, byte ``strides``) or a scalar by value."""

    dtype: np.dtype
    shape: tuple[int, ...] = ()
    strides: tuple[int, ...] = ()
    core: int = 0  # trailing core dimensions (gufunc operands)
    array: bool = True

    @staticmethod
    def scalar(dtype: np.dtype) -> Layout:
        return Layout(np.dtype(dtype), array=False)

    @staticmethod
    def contiguous(shape: tuple[int, ...], dtype: np.dtype, axes: Sequence[int] | None = None,
                   core: int = 0) -> Layout:
        """A new array of logical ``shape`` stored C-contiguous in the order ``axes`` (outermost
        first; default C order)."""
        dtype = np.dtype(dtype)
        axes = tuple(range(len(shape))) if axes is None else tuple(axes)
        stored = c_strides(tuple(shape[a] for a in axes), dtype.itemsize)
        strides = [0] * len(shape)
        for position, axis in enumerate(axes):
            strides[axis] = stored[position]
        return Layout(dtype, tuple(shape), tuple(strides), core)

    @property
    def kernel_dtype(self) -> np.dtype:
        return np.dtype(np.uint8) if self.dtype == np.bool_ else self.dtype


# -- kernel parameters -------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Hole:
    """A parameter filled on every launch: value ``index`` of the launch's values."""

    index: int
    dtype: np.dtype
    pointer: bool


@dataclass(frozen=True)
class _Core:
    """A core operand: a Numba array of shape ``(extent, *core)`` at the address of a hole."""

    hole: _Hole
    extent: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]  # bytes


@dataclass(frozen=True)
class _Fixed:
    """A pointer parameter with the same value on every launch (a plan's unread flag slot)."""

    address: int
    dtype: np.dtype


def _numba_type(param: Any) -> types.Type:
    if isinstance(param, tuple):
        return types.BaseTuple.from_types(tuple(_numba_type(p) for p in param)) if param else types.Tuple(())
    if isinstance(param, _Hole):
        dtype = from_dtype(param.dtype)
        return types.CPointer(dtype) if param.pointer else dtype
    if isinstance(param, _Core):
        return types.Array(from_dtype(param.hole.dtype), 1 + len(param.shape), "A")
    if isinstance(param, _Fixed):
        return types.CPointer(from_dtype(param.dtype))
    if isinstance(param, np.generic):
        return from_dtype(param.dtype)
    return types.int64  # shape entries, strides and counts


def _flat(param: Any) -> list[tuple[str, Any]]:
    """The kernel's flattened parameters (Numba's ABI): ``(kind, constant or _Hole)`` each."""
    if isinstance(param, tuple):
        return [entry for p in param for entry in _flat(p)]
    if isinstance(param, _Hole):
        return [("p" if param.pointer else param.dtype.char, param)]
    if isinstance(param, _Core):
        item = param.hole.dtype.itemsize
        # meminfo, parent, nitems, itemsize, data, shape..., strides...
        ints = [0, 0, param.extent * math.prod(param.shape), item]
        shape, strides = (param.extent, *param.shape), (item, *param.strides)
        return [("q", v) for v in ints] + [("p", param.hole)] + [("q", v) for v in (*shape, *strides)]
    if isinstance(param, _Fixed):
        return [("p", param.address)]
    if isinstance(param, np.generic):
        return [(param.dtype.char, param)]
    return [("q", int(param))]


def _sim(param: Any, values: Sequence[Any]) -> Any:
    """The simulator's argument for ``param``: Python objects over host memory."""
    if isinstance(param, tuple):
        return tuple(_sim(p, values) for p in param)
    if isinstance(param, _Hole):
        return SimPointer(values[param.index], param.dtype) if param.pointer else values[param.index]
    if isinstance(param, _Core):
        return SimCore(values[param.hole.index], param.hole.dtype, param.shape, param.strides)
    if isinstance(param, _Fixed):
        return SimPointer(param.address, param.dtype)
    return param


#: ``struct`` codes of one 8-byte parameter slot, by kind (values narrower than 8 bytes first).
_SLOTS = {"p": "Q", "q": "q", "l": "q", "Q": "Q", "L": "Q", "i": "i4x", "I": "I4x", "h": "h6x",
          "H": "H6x", "b": "b7x", "B": "B7x", "?": "?7x", "d": "d", "f": "f4x", "e": "e6x"}


class Packer:
    """A kernel's parameters in an 8-byte slot each, as the ``void**`` ``cuLaunchKernel`` takes.

    :meth:`pack` writes the per-call values (pointers and scalars) with one ``struct`` call:
    when they come first, as on the flat path, only they are written and the constants after
    them (strides, shape, count) were written once; otherwise the whole block is written from a
    template. Each thread has its own buffer: another thread may pack while one launches.
    """

    def __init__(self, params: tuple[Any, ...]) -> None:
        flat = _flat(params)
        holes = [i for i, (_, v) in enumerate(flat) if isinstance(v, _Hole)]
        self._count = len(flat)
        self._template = [None if isinstance(v, _Hole) else v for _, v in flat]
        self._positions = [flat[i][1].index for i in holes]  # hole slot -> value index
        self._prefix = holes == list(range(len(holes))) and self._positions == sorted(self._positions)
        codes = "".join(_SLOTS[kind] for kind, _ in flat)
        self._block = struct.Struct("<" + codes)
        self._values = struct.Struct("<" + "".join(_SLOTS[flat[i][0]] for i in holes))
        self._holes = holes
        # NumPy's cast per value index, for scalars that struct refuses (see pack).
        self._casts = [None] * (1 + max((v.index for _, v in flat if isinstance(v, _Hole)), default=-1))
        for _, v in flat:
            if isinstance(v, _Hole) and not v.pointer:
                self._casts[v.index] = v.dtype.type
        self._local = threading.local()

    def _buffer(self) -> tuple[np.ndarray, int]:
        store = np.zeros(max(1, self._count), np.uint64)
        if self._count:
            self._block.pack_into(store, 0, *(0 if v is None else v for v in self._template))
        pointers = store.ctypes.data + 8 * np.arange(self._count, dtype=np.uint64)
        self._local.kept = pointers  # alive as long as this thread's buffer
        self._local.store, self._local.address = store, pointers.ctypes.data
        return store, pointers.ctypes.data

    def pack(self, values: Sequence[Any]) -> int:
        """Write ``values`` (one per hole, in order) and return the parameter array's address.

        Scalars may be Python floats for float32 parameters: ``struct`` converts them as NumPy
        does, except that it refuses values beyond the type's range, which NumPy's cast turns
        into ±inf (with its overflow warning): those are packed after that cast."""
        try:
            store, address = self._local.store, self._local.address
        except AttributeError:
            store, address = self._buffer()
        try:
            self._write(store, values)
        except OverflowError:
            self._write(store, [v if cast is None else cast(v) for v, cast in zip(values, self._casts)])
        return address

    def packer(self) -> Callable[[Sequence[Any]], int]:
        """:meth:`pack` as a closure over what it reads: this runs on every launch, and where
        the per-call values come first (the flat path) it is one ``struct`` call."""
        if not self._prefix:
            return self.pack
        local, pack_into, pack = self._local, self._values.pack_into, self.pack

        def pack_prefix(values: Sequence[Any]) -> int:
            try:
                pack_into(local.store, 0, *values)
                return local.address
            except (AttributeError, OverflowError):  # this thread's first pack; a value out of range
                return pack(values)
        return pack_prefix

    def _write(self, store: np.ndarray, values: Sequence[Any]) -> None:
        if self._prefix:
            self._values.pack_into(store, 0, *values)
        else:
            block = self._template.copy()
            for slot, index in zip(self._holes, self._positions):
                block[slot] = values[index]
            self._block.pack_into(store, 0, *block)


# -- plans -------------------------------------------------------------------------------------------
def _loop_strides(op: Layout, ndim: int) -> list[int]:
    """Element strides of ``op`` over the loop dimensions (0 where it broadcasts)."""
    if not op.array:
        return [0] * ndim
    nd = len(op.shape) - op.core
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


def _indexing(operands: list[Layout],
              loop_shape: tuple[int, ...]) -> tuple[tuple[int, ...], list[tuple[int, ...]]]:
    """The (collapsed) loop shape and each operand's element strides; ``()`` everywhere on the
    flat path, where element ``i`` of every array is at offset ``i``."""
    flat = ((), [()] * len(operands))
    for op in operands:  # core dimensions too: Numba's arrays would load misaligned elements
        if op.array and any(n > 1 and s % op.dtype.itemsize for n, s in zip(op.shape, op.strides)):
            raise ValueError(f"a device array with strides {op.strides} that are not multiples of "
                             f"its itemsize {op.dtype.itemsize} is not supported")
    cores = any(op.core for op in operands)
    if not cores and all(not op.array or (op.shape == loop_shape and
                                          op.strides == c_strides(loop_shape, op.dtype.itemsize))
                         for op in operands):
        return flat
    strides = [_loop_strides(op, len(loop_shape)) for op in operands]
    shape, strides = collapse(loop_shape, strides)
    arrays = [s for op, s in zip(operands, strides) if op.array]
    if not cores and len(shape) <= 1 and all(s == (1,) or not shape for s in arrays):
        return flat  # flat after all (F order, unit dimensions)
    if any(op.core and min(s, default=0) < 0 for op, s in zip(operands, strides)):
        raise ValueError("device arrays with negative strides along loop dimensions of a core "
                         "operand are not supported; pass a contiguous copy")
    return shape, strides


class LaunchPlan:
    """One kernel launch over ``loop_shape`` for operands of fixed layouts, on ``runtime``'s GPU.

    :attr:`launch` takes the per-call values in order: for each input its pointer (an array) or
    its value (a scalar, of its type in the declared ``loop``), then each output's pointer, then the ``where``
    mask's pointer if there is one. An elementwise kernel's flags (see :mod:`.fpflags`) go to the
    runtime's unread slot; :attr:`launch_flagged` takes a slot of the call's own (not for plans
    made with ``report=False``, the target's own casts, nor with the check compiled out).
    """

    def __init__(self, kernels: Any, loop: Loop, inputs: list[Layout], outputs: list[Layout],
                 where: Layout | None, loop_shape: tuple[int, ...], runtime: Runtime,
                 report: bool = True) -> None:
        # No launch when every output is empty (an output core dimension of 0): there is nothing
        # to write, and such operands have no valid extent to describe to the kernel.
        empty = bool(outputs) and all(0 in op.shape for op in outputs)
        self.n = 0 if empty else math.prod(loop_shape)
        every = [*inputs, *outputs, *([where] if where is not None else [])]
        spec = kernels.spec
        try:
            shape, strides = _indexing(every, loop_shape) if self.n else ((), [()] * len(every))
        except ValueError as exc:  # a layout the kernels cannot index: say which kernel
            raise ValueError(f"{spec.name}: {exc}") from None
        elementwise = runs_elementwise(spec)
        as_array = spec.array_args if not elementwise else ()
        params = []
        for index, (op, s) in enumerate(zip(every, strides)):
            hole = _Hole(index, op.kernel_dtype if op.array else op.dtype, op.array)
            if op.core or (index < len(as_array) and as_array[index]):
                # ``()`` operands declared as arrays are one-element core views, as in Numba.
                core_shape = op.shape[len(op.shape) - op.core:] if op.core else (1,)
                core_strides = op.strides[len(op.shape) - op.core:] if op.core else (op.dtype.itemsize,)
                extent = 1 + sum((n - 1) * st for n, st in zip(shape, s)) if shape else self.n
                params.append((_Core(hole, extent, core_shape, core_strides), s))
            else:
                params.append((hole, s))
        w, sw = params.pop() if where is not None else (_ONE, ())
        #: Whether there is :attr:`launch_flagged`: an elementwise plan, its results checked.
        self.takes_flags = elementwise and report and fpflags.ENABLED
        flagged: tuple[Any, ...] = ()
        if elementwise:
            ins, outs = params[:len(inputs)], params[len(inputs):]
            # The flag slot after the mask: :attr:`launch` passes the unread slot as a constant
            # (its per-call values still fill the first parameter slots: one struct call).
            head = (tuple(p for p, _ in ins), tuple(s for _, s in ins),
                    tuple(p for p, _ in outs), tuple(s for _, s in outs), w, sw)
            self.params: tuple[Any, ...] = (*head, _Fixed(runtime.flag_ring().discard, np.dtype(np.uint8)),
                                            shape, self.n)
            flagged = (*head, _Hole(len(every), np.dtype(np.uint8), True), shape, self.n)
        else:
            self.params = (tuple(p for p, _ in params), tuple(s for _, s in params), w, sw, shape, self.n)
        argtypes = tuple(_numba_type(p) for p in self.params)
        self.kernel, per_thread = kernels.get(loop, argtypes, self.n, runtime)
        self.blocks = -(-self.n // (BLOCK * per_thread))
        #: ``launch(values, handle)``: launch on the stream ``handle`` with this call's pointers
        #: and scalars (see the class docstring). One closure from the runtime, which packs the
        #: values and calls the driver: a small call's launch costs two Python calls.
        self.launch: Callable[[Sequence[Any], int], None] = _nothing
        #: Where :attr:`takes_flags`: ``launch_flagged(values, handle)``, the same launch with
        #: one more value after the others, the device address of the call's flag slot.
        self.launch_flagged: Callable[[Sequence[Any], int], None] = _nothing
        if self.n:
            self.launch = self._launcher(self.params, runtime)
            if self.takes_flags:
                self.launch_flagged = self._launcher(flagged, runtime)

    def _launcher(self, layout: tuple[Any, ...], runtime: Runtime) -> Callable[[Sequence[Any], int], None]:
        pack = (lambda values: _sim(layout, values)) if runtime.simulated else Packer(layout).packer()
        return runtime.launcher(self.kernel, self.blocks, pack)


def _nothing(values: Sequence[Any], handle: int) -> None:
    """The launch of a plan with nothing to compute."""
