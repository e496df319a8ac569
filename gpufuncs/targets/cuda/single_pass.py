"""Reductions to one value in one launch: blocks combine in shared memory, the last block finishes.

A reduction of ``n`` values to one (``kernel.reduce`` of a whole CuPy array, a fused function's
reduction to a scalar) runs as one kernel, in the manner of CUB's and CuPy's reductions:

* thread ``t`` of ``T`` combines the values ``t, t + T, t + 2T, ...`` in order, from its first
  (neighbouring threads read neighbouring addresses at every step);
* each block combines its threads' values in a fixed tree in shared memory and stores its
  result;
* the block that takes the last ticket (an atomic counter, which it resets for the next launch
  on the stream) combines the blocks' results the same way and stores the one value, combined
  after ``start`` where it ``starts`` (NumPy's ``initial``, or an identity).

The grid is as many blocks as the GPU holds at once (so that every block runs from the start:
a second wave of blocks would leave most of the GPU idle at its end) and depends only on ``n``
and the kernel, and every combination is in a fixed order whichever block finishes last: the
same bits on every run. Floating sums are compensated: each thread keeps Neumaier's running
compensation in float64, and the trees add the pairs with Knuth's TwoSum, so a float32 or
float64 sum is at least as accurate as NumPy's pairwise summation. Values narrower than
float64 are added in float64 in groups of :data:`UNROLL` before each compensated step (the
step is most of a thread's arithmetic): a group's sum errs by at most ``7 * 2**-53`` of its
magnitudes, against the ``2**-24`` of float32's own rounding.
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
from numba import cuda, types
from numba.np.numpy_support import from_dtype

from ...scalar import as_type
from .compat import SIMULATED, cupy_array_maker, loaded_kernel
from .kernels import _args
from .launch import Packer, _Core, _Hole, _numba_type
from .runtime import BLOCK, Runtime

#: At most this many blocks a multiprocessor (a full GPU of resident threads; measured on an
#: H100 at 10^8 values, against four and sixteen): the partial results the last block combines.
#: Fewer where the kernel's registers leave room for fewer (see :func:`_resident_blocks`).
BLOCKS_PER_SM = 8
#: Values a thread loads before it combines them (loads in flight: with one, a thread waits out
#: the memory's latency at every value).
UNROLL = 8
#: At least this many values a thread, where the values allow it (a block of threads then
#: has enough loads in flight, and fewer partial results remain).
MIN_PER_THREAD = 8


def blocks_for(n: int, most: int) -> int:
    """The grid of a single-pass reduction of ``n`` values, of ``most`` blocks at most: every
    thread has a value where ``n`` is at least a block's threads."""
    return max(1, min(most, -(-n // (BLOCK * MIN_PER_THREAD))))


def _two_sum(a: float, b: float) -> tuple[float, float]:
    s = a + b
    back = s - a
    return s, (a - (s - back)) + (b - back)


def _neumaier(s: float, c: float, v: float) -> tuple[float, float]:
    t = s + v
    if abs(s) >= abs(v):
        return t, c + ((s - t) + v)
    return t, c + ((v - t) + s)


def template(value: Any, combine: Any, zeros: tuple[Any, ...], acc: np.dtype, out_type: Any,
             compensated: bool, finish: Any = None) -> Callable[..., None]:
    """The kernel: ``value`` (a device function of the tuple of operands at an element, cast
    to ``acc``) combined by ``combine``; ``compensated``: a floating sum in float64 pairs
    ``(sum, compensation)`` instead (``combine`` unused, may be ``None``). The one value is
    stored as ``out_type``; where ``finish`` (a device function of one value) is given, it is
    applied to the value rounded to ``acc`` first, as a call on the stored result would be."""
    jit = (lambda f: f) if SIMULATED else cuda.jit(device=True, forceinline=True)

    @jit
    def load(ops, i):
        return value(_args(ops, ops, i, (), zeros))

    kept = acc.type
    if finish is None:
        def final(result):
            return as_type(result, out_type(0))
    else:
        def final(result):
            return as_type(finish(as_type(result, kept(0))), out_type(0))
    final = jit(final)
    if compensated:
        return _compensated_kernel(load, jit(_two_sum), jit(_neumaier), final, acc.itemsize < 8)
    acc_type = from_dtype(acc)

    @jit
    def gather(vals, tid, count):
        """``vals[0]`` becomes the combination of ``vals[:count]``: in a tree where every
        thread holds a value, else in order by the first thread."""
        if count < BLOCK:
            if tid == 0:
                for k in range(1, count):
                    vals[0] = combine(vals[0], vals[k])
        else:
            half = BLOCK // 2
            while half:
                if tid < half:
                    vals[tid] = combine(vals[tid], vals[tid + half])
                cuda.syncthreads()
                half //= 2
        cuda.syncthreads()

    def kernel(ops, n, start, starts, out, partials, pcomps, ticket):
        tid, block, blocks = cuda.threadIdx.x, cuda.blockIdx.x, cuda.gridDim.x
        step = blocks * BLOCK
        vals = cuda.shared.array(BLOCK, acc_type)
        last = cuda.shared.array(1, types.int32)
        i = block * BLOCK + tid
        total = load(ops, i if i < n else 0)  # (past the values: left out by gather's count)
        j = i + step
        staged = cuda.local.array(UNROLL, acc_type)
        while j + (UNROLL - 1) * step < n:  # UNROLL loads in flight before combining them, in order
            for k in range(UNROLL):
                staged[k] = load(ops, j + k * step)
            for k in range(UNROLL):
                total = combine(total, staged[k])
            j += UNROLL * step
        while j < n:
            total = combine(total, load(ops, j))
            j += step
        vals[tid] = total
        cuda.syncthreads()
        gather(vals, tid, min(n, BLOCK))
        if tid == 0:
            partials[block] = vals[0]
            cuda.threadfence()
            last[0] = cuda.atomic.add(ticket, 0, 1) == blocks - 1
        cuda.syncthreads()
        if last[0]:
            k = tid
            total = partials[k if k < blocks else 0]
            k += BLOCK
            while k < blocks:
                total = combine(total, partials[k])
                k += BLOCK
            vals[tid] = total
            cuda.syncthreads()
            gather(vals, tid, min(blocks, BLOCK))
            if tid == 0:
                result = vals[0]
                if starts:
                    result = combine(start, result)
                out[0] = final(result)
                ticket[0] = 0

    return kernel


def _compensated_kernel(load: Any, two_sum: Any, neumaier: Any, final: Any,
                        grouped: bool) -> Callable[..., None]:
    """The kernel of a compensated floating sum (see the module's docstring), storing
    ``final(sum)``; ``grouped``: :data:`UNROLL` values added in float64 before each
    compensated step (values narrower than float64)."""
    wide = np.float64

    def tree(vals, comps, tid, total, comp):
        """``vals[0]`` and ``comps[0]`` become the compensated sum of every thread's ``total``
        and ``comp``."""
        vals[tid] = total
        comps[tid] = comp
        cuda.syncthreads()
        half = BLOCK // 2
        while half:
            if tid < half:
                s, e = two_sum(vals[tid], vals[tid + half])
                vals[tid] = s
                comps[tid] += comps[tid + half] + e
            cuda.syncthreads()
            half //= 2

    if not SIMULATED:
        tree = cuda.jit(device=True, forceinline=True)(tree)

    def kernel(ops, n, start, starts, out, partials, pcomps, ticket):
        tid, block, blocks = cuda.threadIdx.x, cuda.blockIdx.x, cuda.gridDim.x
        step = blocks * BLOCK
        vals = cuda.shared.array(BLOCK, types.float64)
        comps = cuda.shared.array(BLOCK, types.float64)
        last = cuda.shared.array(1, types.int32)
        total = comp = wide(0)
        j = block * BLOCK + tid
        staged = cuda.local.array(UNROLL, types.float64)
        while j + (UNROLL - 1) * step < n:  # UNROLL loads in flight before adding them, in order
            for k in range(UNROLL):
                staged[k] = wide(load(ops, j + k * step))
            if grouped:
                group = staged[0]
                for k in range(1, UNROLL):
                    group += staged[k]
                total, comp = neumaier(total, comp, group)
            else:
                for k in range(UNROLL):
                    total, comp = neumaier(total, comp, staged[k])
            j += UNROLL * step
        while j < n:
            total, comp = neumaier(total, comp, wide(load(ops, j)))
            j += step
        tree(vals, comps, tid, total, comp)
        if tid == 0:
            partials[block] = vals[0]
            pcomps[block] = comps[0]
            cuda.threadfence()
            last[0] = cuda.atomic.add(ticket, 0, 1) == blocks - 1
        cuda.syncthreads()
        if last[0]:
            total = comp = wide(0)
            k = tid
            while k < blocks:
                total, e = two_sum(total, partials[k])
                comp += pcomps[k] + e
                k += BLOCK
            tree(vals, comps, tid, total, comp)
            if tid == 0:
                result = vals[0]
                if abs(result) < math.inf:  # (an infinity or NaN is the sum, uncompensated)
                    result += comps[0]
                out[0] = final(result)
                ticket[0] = 0

    return kernel


# -- the call ----------------------------------------------------------------------------------------
class SinglePass:
    """A single-pass reduction of one value function and combine, compiled per argument types
    and device on first use.

    Parameters
    ----------
    value : function
        ``value(args) -> acc``: the value of the element whose operands are the tuple ``args``
        (each cast to its loop type), cast to the accumulation type; a plain Python function
        that may call kernels and ``@njit`` helpers (compiled as a device function).
    combine : function or None
        ``combine(a, b) -> acc``; ``None`` for a compensated floating sum.
    acc : numpy.dtype
        The accumulation dtype (a floating sum's partial sums are float64 whatever it is).
    finish : function, optional
        ``finish(result) -> out``, applied by the last block to the one value rounded to
        ``acc`` (a reduction kernel's finishing step, in the launch instead of one of its own).
    """

    def __init__(self, value: Callable[..., Any], combine: Callable[..., Any] | None, acc: np.dtype,
                 finish: Callable[..., Any] | None = None) -> None:
        from .compose import device_function

        self.acc, self.compensated = np.dtype(acc), combine is None
        self._value = device_function(value)
        self._combine = device_function(combine) if combine is not None else None
        self._finish = device_function(finish) if finish is not None else None
        self._launchers: dict[tuple[Any, ...], Any] = {}  # per grid too: launchers are cheap
        self._kernels: dict[tuple[Any, ...], tuple[Any, Any]] = {}
        self._runtimes: dict[int, Runtime] = {}
        self._lock = threading.Lock()

    def __call__(self, operands: list[Any], zeros: tuple[Any, ...], n: int, out_dtype: np.dtype,
                 start: Any = None) -> Any:
        """Reduce the ``n`` elements of ``operands`` (C-contiguous CuPy arrays of ``n``
        elements on one GPU, or scalars; ``zeros`` holds a NumPy scalar of each one's loop
        type) after ``start`` where it is given, into a new 0-d CuPy array of ``out_dtype``
        on the arrays' GPU, on its current stream."""
        import cupy

        device = next(op for op in operands if isinstance(op, cupy.ndarray)).device.id
        if device != cupy.cuda.runtime.getDevice():  # the stream and context of the arrays' GPU
            with cupy.cuda.Device(device):
                return self(operands, zeros, n, out_dtype, start)
        runtime = self._runtimes.get(device) or self._runtimes.setdefault(device, _runtime(device))
        handle = cupy.cuda.get_current_stream().ptr
        buffers = _buffers(runtime, handle, self.partial_dtype, BLOCKS_PER_SM * runtime.multiprocessors)
        stored = tuple(_stored(op.dtype) if isinstance(op, cupy.ndarray) else None for op in operands)
        launch = self._launcher(runtime, stored, zeros, out_dtype, n)
        values = [op.data.ptr if d is not None else z.dtype.type(op)
                  for op, d, z in zip(operands, stored, zeros)]
        memory = cupy.cuda.alloc(out_dtype.itemsize)
        out = _result_maker(out_dtype)(memory)
        begin = self.acc.type(0 if start is None else start)
        launch([*values, n, begin, start is not None, memory.ptr, *buffers], handle)
        return out

    @property
    def partial_dtype(self) -> np.dtype:
        return np.dtype(np.float64) if self.compensated else self.acc

    def _launcher(self, runtime: Runtime, stored: tuple[np.dtype | None, ...], zeros: tuple[Any, ...],
                  out_dtype: np.dtype, n: int) -> Any:
        """The launch of the kernel for these types over ``n`` values, on its grid (see
        :func:`blocks_for`; at most the blocks that the GPU holds at once)."""
        loaded = tuple(z.dtype for z in zeros)
        kernel, pack, most = self._kernel(runtime, stored, loaded, out_dtype, zeros)
        blocks = blocks_for(n, most)
        key = (runtime.ordinal, stored, loaded, out_dtype, blocks)
        found = self._launchers.get(key)
        if found is None:
            with self._lock:
                found = self._launchers.get(key)
                if found is None:
                    found = self._launchers[key] = runtime.launcher(kernel, blocks, pack)
        return found

    def _kernel(self, runtime: Runtime, stored: tuple[np.dtype | None, ...], loaded: tuple[np.dtype, ...],
                out_dtype: np.dtype, zeros: tuple[Any, ...]) -> tuple[Any, Any, int]:
        """The loaded kernel (compiled once, whatever the grid), its parameters' packer and its
        largest grid, for operands stored as ``stored`` (an array's dtype, or ``None`` for a
        scalar, passed as its ``zeros`` entry's type) and loaded as ``loaded`` (the types of
        ``zeros``)."""
        key = (runtime.ordinal, stored, loaded, out_dtype)
        found = self._kernels.get(key)
        if found is None:
            with self._lock:
                found = self._kernels.get(key)
                if found is None:
                    found = self._kernels[key] = self._compile(runtime, stored, out_dtype, zeros)
        return found

    def _compile(self, runtime: Runtime, stored: tuple[np.dtype | None, ...], out_dtype: np.dtype,
                 zeros: tuple[Any, ...]) -> tuple[Any, Any, int]:
        ops = tuple(_Hole(k, z.dtype if d is None else d, d is not None)
                    for k, (d, z) in enumerate(zip(stored, zeros)))
        k = len(ops)
        params = (ops, _Hole(k, np.dtype(np.int64), False), _Hole(k + 1, self.acc, False),
                  _Hole(k + 2, np.dtype(np.bool_), False), _Hole(k + 3, out_dtype, True),
                  _Hole(k + 4, self.partial_dtype, True), _Hole(k + 5, np.dtype(np.float64), True),
                  _Core(_Hole(k + 6, np.dtype(np.uint32), True), 1, (), ()))  # (atomics take arrays)
        body = template(self._value, self._combine, zeros, self.acc, out_dtype.type, self.compensated,
                        self._finish)
        argtypes = tuple(_numba_type(p) for p in params)
        with runtime.current():
            compiled = cuda.jit(body).compile(argtypes)
            per_sm = _resident_blocks(compiled, runtime.multiprocessors)
            return loaded_kernel(compiled), Packer(params).packer(), per_sm * runtime.multiprocessors


def _resident_blocks(compiled: Any, multiprocessors: int) -> int:
    """The blocks of ``compiled`` (a loaded ``cuda.jit`` overload) that one multiprocessor
    holds at once, up to :data:`BLOCKS_PER_SM`: fewer where its registers run out (43 a thread
    for a float32 sum of Gaussian densities: five on an H100, where a grid of eight a
    multiprocessor ran in two waves, 385 us at 10^8 values against 306 us in one)."""
    if SIMULATED:
        return BLOCKS_PER_SM
    return max(1, min(BLOCKS_PER_SM, compiled.max_cooperative_grid_blocks(BLOCK) // multiprocessors))


def _stored(dtype: np.dtype) -> np.dtype:
    """How a kernel reads an array of ``dtype``: booleans as bytes (Numba's pointers to
    booleans are one bit wide)."""
    return np.dtype(np.uint8) if dtype == np.bool_ else dtype


def _runtime(device: int) -> Runtime:
    from ...targets import get_target

    return get_target("cuda").runtimes.get(device)


_BUFFERS: dict[tuple[int, int, np.dtype], tuple[tuple[Any, ...], tuple[int, int, int]]] = {}
_BUFFERS_LOCK = threading.Lock()


def _buffers(runtime: Runtime, handle: int, dtype: np.dtype, blocks: int) -> tuple[int, int, int]:
    """The addresses of the partial results, their compensations and the ticket of
    single-pass reductions on the stream ``handle``: one set per stream, reused (launches on a
    stream run one after the other, and the last block of each leaves the ticket at 0)."""
    key = (runtime.ordinal, handle, dtype)
    found = _BUFFERS.get(key)
    if found is None:
        import cupy

        with _BUFFERS_LOCK, cupy.cuda.Device(runtime.ordinal):
            found = _BUFFERS.get(key)
            if found is None:
                kept = (cupy.empty(blocks, dtype), cupy.empty(blocks, np.float64), cupy.zeros(1, np.uint32))
                found = _BUFFERS[key] = (kept, tuple(a.data.ptr for a in kept))
    return found[1]


@functools.cache
def _result_maker(dtype: np.dtype) -> Callable[[Any], Any]:
    """``make(memory)``: the 0-d CuPy array of ``dtype`` over ``memory`` (see
    :func:`.compat.cupy_array_maker`)."""
    return cupy_array_maker((), dtype)
