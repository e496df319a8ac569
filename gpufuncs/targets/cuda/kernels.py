"""The CUDA kernels of every kernel spec, for any number of arguments, from two templates.

A kernel's scalar function becomes a device function, and a template kernel calls it once per
loop element. The operands arrive as tuples, so one template serves every arity: the helpers
below are overloads that recurse over the tuple *types* at compile time (``_load``, ``_row``,
``_args``), unrolling into straight-line code with no per-arity variant and no generated source.
Numba specializes the template per argument types, so the same body also covers

* array operands passed as raw pointers (``CPointer``) and scalars passed by value;
* the flat path (``shape`` is the empty tuple: element ``i`` is at offset ``i``) and the strided
  path (``shape`` and per-operand element strides; broadcast dimensions have stride 0);
* any input dtype (loaded, then cast to the loop dtype) and any output dtype (cast on store);
* gufunc operands with core dimensions, passed as Numba arrays of shape ``(extent, *core)``
  whose first stride is one element, so that ``a[offset]`` is the core view of loop element
  ``offset``.

The helpers' Python bodies are what the CUDA simulator runs (it executes kernels as Python).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numba import cuda
from numba.np.numpy_support import from_dtype

from ...scalar import as_type
from . import fpflags
from .compat import SIMULATED, SimCore, SimPointer
from .fpflags import finite_in, flag, publish


# -- element access -------------------------------------------------------------------------------
def _offset(i, shape, strides):
    """Element offset of loop element ``i`` (C order over ``shape``) for ``strides``."""
    off = 0
    rem = i
    for d in range(len(shape) - 1, 0, -1):
        q = rem // shape[d]
        off += (rem - q * shape[d]) * strides[d]
        rem = q
    return off + rem * strides[0]


def _at(a, s, i, shape):
    """Operand ``a`` at loop element ``i``: ``a[i]`` (flat), ``a[offset]`` (strided) or ``a``."""
    if not isinstance(a, SimPointer | SimCore):
        return a
    return a[_offset(i, shape, s) if shape else i]


def _put(p, s, i, shape, value):
    """Store ``value`` at loop element ``i`` of output ``p``, cast to ``p``'s dtype."""
    p[_offset(i, shape, s) if shape else i] = value


def _get(p, s, i, shape):
    """The value stored at loop element ``i`` of output ``p`` (float16 widened to float32)."""
    return p[_offset(i, shape, s) if shape else i]


def _results(r):
    """A kernel's value as the tuple of its results: ``(r,)``, or ``r`` for several outputs."""
    return r if isinstance(r, tuple) else (r,)


def _store(outs, souts, i, shape, results):
    """Store each of ``results`` at loop element ``i`` of its output (see :func:`_put`)."""
    for p, s, r in zip(outs, souts, results):
        _put(p, s, i, shape, r)


def _finite(outs, results):
    """Whether every result is finite as stored into its output (:func:`.fpflags.finite_in`)."""
    return all(finite_in(p, r) for p, r in zip(outs, results))


def _flags(outs, souts, i, shape, args):
    """The kinds of floating-point error of loop element ``i``'s stored results
    (:func:`.fpflags.flag`), from the arguments they were computed from."""
    bits = 0
    for p, s in zip(outs, souts):
        bits |= flag(_get(p, s, i, shape), args)
    return bits


def _arg(a, s, i, shape, zero):
    """A kernel argument: the core view of a core operand, else the element cast like ``zero``."""
    if isinstance(a, SimCore):
        return a[_offset(i, shape, s) if shape else i]
    return as_type(_at(a, s, i, shape), zero)


# -- the whole argument tuple at once ---------------------------------------------------------------
def _load(vals, k, full, rest, srest, i, shape):
    """``vals[j, k] = operand j at loop element i`` for every array operand of ``rest``; ``j``
    counts from the start of ``full`` (``rest`` is a tail of ``full``, so ``j`` is a constant).
    Scalars are not staged (see :func:`_row`)."""
    start = len(full) - len(rest)
    for j, (a, s) in enumerate(zip(rest, srest)):
        if isinstance(a, SimPointer):
            vals[start + j, k] = _at(a, s, i, shape)


def _row(vals, k, full, rest, zeros):
    """The arguments of element ``k`` for the operands ``j`` of ``rest``: ``vals[j, k]`` for an
    array, the scalar itself cast like ``zeros[j]`` (its own loop type, which may differ from
    the staged arrays')."""
    return tuple(vals[j, k] if isinstance(full[j], SimPointer) else as_type(full[j], zeros[j])
                 for j in range(len(full) - len(rest), len(full)))


def _args(ops, sops, i, shape, zeros):
    """The arguments at loop element ``i``, each cast like its ``zeros`` entry (see :func:`_arg`)."""
    return tuple(_arg(a, s, i, shape, zero) for a, s, zero in zip(ops, sops, zeros))


if not SIMULATED:
    from numba.core import types
    from numba.cuda.extending import overload

    fpflags.device_overloads()

    _offset = cuda.jit(device=True, forceinline=True)(_offset)

    def _is_flat(shape) -> bool:
        return isinstance(shape, types.BaseTuple) and len(shape) == 0

    @overload(_at, inline="always")
    def _at_typing(a, s, i, shape):
        if isinstance(a, types.Number | types.Boolean):
            return lambda a, s, i, shape: a
        if _is_flat(shape):
            return lambda a, s, i, shape: a[i]
        return lambda a, s, i, shape: a[_offset(i, shape, s)]

    @overload(_put, inline="always")
    def _put_typing(p, s, i, shape, value):
        cast = p.dtype  # a Numba number type: calling it converts (float32 -> float16, ...)
        if _is_flat(shape):
            def impl(p, s, i, shape, value):
                p[i] = cast(value)
        else:
            def impl(p, s, i, shape, value):
                p[_offset(i, shape, s)] = cast(value)
        return impl

    @overload(_get, inline="always")
    def _get_typing(p, s, i, shape):
        # float16 read as float32 (the conversion the loads make): no half-precision arithmetic.
        wide = types.float32 if p.dtype == types.float16 else p.dtype
        if _is_flat(shape):
            return lambda p, s, i, shape: wide(p[i])
        return lambda p, s, i, shape: wide(p[_offset(i, shape, s)])

    @overload(_arg, inline="always")
    def _arg_typing(a, s, i, shape, zero):
        if not isinstance(a, types.Array):
            return lambda a, s, i, shape, zero: as_type(_at(a, s, i, shape), zero)
        if _is_flat(shape):
            return lambda a, s, i, shape, zero: a[i]
        return lambda a, s, i, shape, zero: a[_offset(i, shape, s)]

    @overload(_load, inline="always")
    def _load_typing(vals, k, full, rest, srest, i, shape):
        if len(rest) == 0:
            return lambda vals, k, full, rest, srest, i, shape: None
        j = len(full) - len(rest)  # a compile-time constant of this specialization
        cast = vals.dtype
        if isinstance(rest[0], types.Number | types.Boolean):
            # A scalar is not staged (see _row): the same value for every element, which the
            # compiler then knows, and hoists what depends on it alone (gaussian's 1 / sigma).
            return lambda vals, k, full, rest, srest, i, shape: _load(vals, k, full, rest[1:], srest[1:], i,
                                                                      shape)

        def impl(vals, k, full, rest, srest, i, shape):
            vals[j, k] = cast(_at(rest[0], srest[0], i, shape))
            _load(vals, k, full, rest[1:], srest[1:], i, shape)

        return impl

    @overload(_row, inline="always")
    def _row_typing(vals, k, full, rest, zeros):
        if len(rest) == 0:
            return lambda vals, k, full, rest, zeros: ()
        j = len(full) - len(rest)
        if isinstance(rest[0], types.Number | types.Boolean):  # not staged: cast where used
            cast = zeros[j]
            return lambda vals, k, full, rest, zeros: (cast(rest[0]),) + _row(vals, k, full, rest[1:], zeros)
        return lambda vals, k, full, rest, zeros: (vals[j, k],) + _row(vals, k, full, rest[1:], zeros)

    @overload(_results, inline="always")
    def _results_typing(r):
        if isinstance(r, types.BaseTuple):
            return lambda r: r
        return lambda r: (r,)

    @overload(_store, inline="always")
    def _store_typing(outs, souts, i, shape, results):
        if len(outs) == 0:
            return lambda outs, souts, i, shape, results: None

        def impl(outs, souts, i, shape, results):
            _put(outs[0], souts[0], i, shape, results[0])
            _store(outs[1:], souts[1:], i, shape, results[1:])
        return impl

    @overload(_finite, inline="always")
    def _finite_typing(outs, results):
        if len(outs) == 0:
            return lambda outs, results: True
        return lambda outs, results: finite_in(outs[0], results[0]) and _finite(outs[1:], results[1:])

    @overload(_flags, inline="always")
    def _flags_typing(outs, souts, i, shape, args):
        if len(outs) == 0:
            return lambda outs, souts, i, shape, args: 0
        return lambda outs, souts, i, shape, args: (
            flag(_get(outs[0], souts[0], i, shape), args) | _flags(outs[1:], souts[1:], i, shape, args))

    @overload(_args, inline="always")
    def _args_typing(ops, sops, i, shape, zeros):
        if len(ops) == 0:
            return lambda ops, sops, i, shape, zeros: ()
        return lambda ops, sops, i, shape, zeros: (
            (_arg(ops[0], sops[0], i, shape, zeros[0]),) + _args(ops[1:], sops[1:], i, shape, zeros[1:]))


# -- the two templates -----------------------------------------------------------------------------
def _quiet(dev: Any) -> Any:
    """``dev`` as the simulator runs it: Python arithmetic on NumPy scalars, which would warn
    by itself (in the simulator's threads, under NumPy's default error state) where the GPU
    computes silently; the kernel's own check reports what the caller asked for."""
    def quiet(*args: Any) -> Any:
        with np.errstate(all="ignore"):
            return dev(*args)
    return quiet


def ufunc_kernel(dev: Any, zeros: tuple[Any, ...], per_thread: int,
                 staged: np.dtype | None) -> Callable[..., None]:
    """An elementwise kernel: ``outs = dev(*ins)`` over the loop, where ``w`` is true; input
    ``j`` is cast to the type of ``zeros[j]`` (a NumPy scalar of its loop type). ``dev``
    returns one value, or a tuple of one per output (a kernel of several outputs). ``staged``
    is the loop type of every input passed as an array (see ``compile.staged_dtype``),
    ``None`` where they have several.

    Parameters: the inputs (pointers or scalars) and their element strides, the outputs (a
    tuple of pointers) and theirs, the ``where`` mask (a pointer, or 1 by value) and its
    strides, the flag slot (a pointer to four bytes, see :mod:`.fpflags`), the loop shape
    (``()`` on the flat path) and the element count.

    A thread handles ``per_thread`` elements, ``blockDim`` apart (each warp access stays
    coalesced), and loads all of them before computing any: with one 4-byte element per thread
    an SM has too few bytes in flight to cover the memory latency of an H100 (measured: 1.6 TB/s
    against 2.8 TB/s for a copy). The loops have a constant trip count, so they are unrolled and
    the staging array lives in registers. It holds the array inputs only, so scalars of other
    types (a fused function's Python floats, kept float64) do not matter; array inputs of several
    loop types have no such array (one type per array): they take one element per thread, each
    argument loaded and cast.

    Each result is checked for floating-point errors, unless ``GPUFUNCS_FPSTATUS=0`` (``check``
    is a closure constant: the check compiles away, and the disk cache keys the two variants
    apart). Per element one compare per output (:func:`.fpflags.finite_in`: finite as stored);
    only a thread that found a value that is not finite reads its stored results back and
    classifies them (:func:`.fpflags.flag`) from the arguments it still holds, and every thread
    ends with :func:`.fpflags.publish` (a warp vote; stores only where something was found).
    """
    nin = len(zeros)
    check = fpflags.ENABLED
    if SIMULATED:
        dev = _quiet(dev)
    if staged is None:
        assert per_thread == 1

        def mixed(ins, sins, outs, souts, w, sw, flags, shape, n):
            i = cuda.grid(1)
            bits = 0
            if i < n and _at(w, sw, i, shape):
                args = _args(ins, sins, i, shape, zeros)
                results = _results(dev(*args))
                _store(outs, souts, i, shape, results)
                if check and not _finite(outs, results):
                    bits = _flags(outs, souts, i, shape, args)
            if check:
                publish(flags, bits)

        return mixed
    cast = from_dtype(staged)

    def kernel(ins, sins, outs, souts, w, sw, flags, shape, n):
        first = cuda.blockIdx.x * cuda.blockDim.x * per_thread + cuda.threadIdx.x
        vals = cuda.local.array((nin, per_thread), cast)
        for k in range(per_thread):
            i = first + k * cuda.blockDim.x
            if i < n:
                _load(vals, k, ins, ins, sins, i, shape)
        bad = False
        for k in range(per_thread):
            i = first + k * cuda.blockDim.x
            if i < n and _at(w, sw, i, shape):
                results = _results(dev(*_row(vals, k, ins, ins, zeros)))
                _store(outs, souts, i, shape, results)
                if check:
                    bad |= not _finite(outs, results)
        if check:
            bits = 0
            if bad:  # rare: classify this thread's elements from what they stored
                for k in range(per_thread):
                    i = first + k * cuda.blockDim.x
                    if i < n and _at(w, sw, i, shape):
                        bits |= _flags(outs, souts, i, shape, _row(vals, k, ins, ins, zeros))
            publish(flags, bits)

    return kernel


def gufunc_kernel(dev: Any, zeros: tuple[Any, ...]) -> Callable[..., None]:
    """A generalized kernel: ``dev(*ops)`` once per loop element, ``ops`` the inputs then the
    outputs (core views, elements or scalars; an element cast to the type of its ``zeros``
    entry). One loop element per thread: the core loops (32 orders of ``hermite_norm`` per
    load) keep enough work in flight."""

    def kernel(ops, sops, w, sw, shape, n):
        i = cuda.grid(1)
        if i < n and _at(w, sw, i, shape):
            dev(*_args(ops, sops, i, shape, zeros))

    return kernel
