"""Host NumPy arrays on the cuda target: chunked, pinned, pipelined transfers.

Copying pageable NumPy memory to the GPU runs at a fraction of the PCIe speed, and a whole input
may not fit in GPU memory. So the loop is cut into chunks, and each chunk goes through one of
:data:`SLOTS` slots, each with its own stream, pinned staging buffers and device buffers:

    pack (threads copy the chunk into pinned memory)  ->  copy to the device  ->  kernel
    ->  copy back into pinned memory  ->  unpack (threads copy into the result, ``where=`` applied)

While the CPU packs chunk ``c``, the GPU copies and computes chunks ``c-1`` and ``c-2``, and the
copy engines move data both ways at once. GPU memory in use is bounded by the slots, not by the
input size. Pinned buffers are kept between calls (allocating page-locked memory is slow).

A GPU's slots form a *lane*; a call borrows one for its duration, so calls from
:data:`LANES_PER_DEVICE` threads run at once on one GPU. With ``device="all"`` a call borrows a
lane on every GPU and runs one pipeline per GPU, each in its own thread, all taking chunks from
one shared sequence as they free a slot (a faster GPU simply takes more); results land in the
same host arrays.

New elementwise results are themselves allocated in pooled pinned memory (up to
:data:`PINNED_RESULTS_BYTES`), so the GPU copies each chunk straight into the result: no unpack
copy, and no page faults on fresh result memory, which cost more than the copy itself (measured:
fresh memory is written at about a quarter of the speed of reused memory). Such a result is an
ordinary NumPy array; its memory goes back to the pool when the array and all its views are gone.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import math
import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any

import numpy as np

from ...spec import KernelSpec
from ..base import Executor, Plan, read_before_write
from .arrays import address_of, stream_handle
from .compile import CudaKernels
from .launch import LaunchPlan, Layout
from .runtime import Runtime, current_device, get_runtime

#: Slots in flight (three: one packing, one on the GPU, one unpacking).
SLOTS = 3
#: Host pipelines that run at once on one GPU, each in a lane of its own (more callers wait).
LANES_PER_DEVICE = 2
#: Bytes of the widest operand per chunk (64 MiB: 6 chunks for 10**8 float32 values). Each chunk
#: costs a fixed overhead (starting the packing threads, a stream synchronize), which 32 MiB
#: chunks did not amortize on a 2-GPU H200 host, on one GPU or on both.
CHUNK_BYTES = 64 << 20
#: Copies larger than this are split across threads (NumPy releases the GIL while copying).
_PARALLEL_COPY_BYTES = 1 << 20
_THREADS = max(1, min(16, os.cpu_count() or 1))
#: Pinned memory kept for results (freed results' memory is reused; beyond this, plain memory).
PINNED_RESULTS_BYTES = min(8 << 30, (os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")) // 8
                           if hasattr(os, "sysconf") else 1 << 30)

_pool: ThreadPoolExecutor | None = None


def _copy(dst: np.ndarray, src: np.ndarray, where: Any = True) -> None:
    """``np.copyto`` split along the first axis over threads for large arrays."""
    global _pool
    rows = dst.shape[0] if dst.ndim else 1
    if dst.nbytes < _PARALLEL_COPY_BYTES or rows < 2 * _THREADS:
        np.copyto(dst, src, casting="unsafe", where=where)
        return
    if _pool is None:
        _pool = ThreadPoolExecutor(_THREADS, thread_name_prefix="gpufuncs-copy")
    bounds = np.linspace(0, rows, _THREADS + 1).astype(int)
    where = np.broadcast_to(where, dst.shape) if where is not True else None
    jobs = [_pool.submit(np.copyto, dst[a:b], src[a:b], casting="unsafe",
                         where=True if where is None else where[a:b])
            for a, b in itertools.pairwise(bounds)]
    for job in jobs:
        job.result()


class _Lane:
    """One GPU's slots: their streams and pinned staging buffers, kept between calls. A lane
    serves one pipeline at a time (see :class:`_Lanes`)."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.streams = [runtime.new_stream() for _ in range(SLOTS)]
        self._pinned: dict[tuple[int, int], np.ndarray] = {}

    def staging(self, slot: int, index: int, nbytes: int) -> np.ndarray:
        """The pinned buffer ``index`` of ``slot``, grown as needed and kept for later calls."""
        found = self._pinned.get((slot, index))
        if found is None or found.nbytes < nbytes:
            found = self._pinned[(slot, index)] = self.runtime.pinned(nbytes)
        return found


class _Lanes:
    """The lanes of one GPU, made on first need, at most :data:`LANES_PER_DEVICE`."""

    def __init__(self, device: int) -> None:
        self.runtime = get_runtime(device)
        self._free: list[_Lane] = []
        self._lock = threading.Lock()
        self._available = threading.BoundedSemaphore(LANES_PER_DEVICE)

    @contextlib.contextmanager
    def borrow(self) -> Iterator[_Lane]:
        """A lane of this GPU for the block (waits while every lane is in use)."""
        with self._available:
            with self._lock:
                lane = self._free.pop() if self._free else None
            if lane is None:
                lane = _Lane(self.runtime)
            try:
                yield lane
            finally:
                with self._lock:
                    self._free.append(lane)


@functools.cache
def _lanes(device: int) -> _Lanes:
    return _Lanes(device)


@functools.cache
def _device_threads(count: int) -> ThreadPoolExecutor:
    """The threads that run the pipelines of a call on ``count`` GPUs."""
    return ThreadPoolExecutor(count, thread_name_prefix="gpufuncs-device")


class _PinnedBlock:
    """Pooled page-locked memory lent to one result; returned to the pool when it is collected.

    Arrays made from it keep it as their base (it is not an ndarray, so NumPy never collapses a
    view's base past it): the memory is reused only once no view of the result is left.
    """

    def __init__(self, raw: np.ndarray, nbytes: int) -> None:
        self._raw = raw
        self.__array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "version": 3,
                                    "data": (raw.ctypes.data, False)}

    def __del__(self) -> None:
        try:
            _free_blocks.setdefault(self._raw.nbytes, []).append(self._raw)
        except (AttributeError, TypeError):  # interpreter shutdown: nothing to keep
            pass


_free_blocks: dict[int, list[np.ndarray]] = {}
_pinned_result_bytes = [0]


def _pinned_result(shape: tuple[int, ...], dtype: np.dtype, runtime: Runtime) -> np.ndarray | None:
    """A C-contiguous result in pooled pinned memory (portable: any GPU copies into it at full
    speed), or ``None`` when the pool is full."""
    nbytes = math.prod(shape) * dtype.itemsize
    size = -(-max(nbytes, 1) // (2 << 20)) * (2 << 20)  # 2 MiB classes
    free = _free_blocks.get(size)
    if free:
        raw = free.pop()
    elif _pinned_result_bytes[0] + size <= PINNED_RESULTS_BYTES:
        raw = runtime.pinned(size)
        _pinned_result_bytes[0] += size
    else:
        return None
    return np.asarray(_PinnedBlock(raw, nbytes)).view(dtype).reshape(shape)


def _chunks(loop_shape: tuple[int, ...], capacity: int,
            prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Index expressions over the loop dimensions, each selecting at most ``capacity`` elements.

    Whole rows of the first dimension go together; a row larger than ``capacity`` is split
    along the next dimension, recursively. Every expression ends with a slice.
    """
    row = math.prod(loop_shape[1:])
    if row <= capacity or len(loop_shape) == 1:
        step = max(1, capacity // max(row, 1))
        for start in range(0, loop_shape[0], step):
            yield (*prefix, slice(start, min(start + step, loop_shape[0])))
        return
    for i in range(loop_shape[0]):
        yield from _chunks(loop_shape[1:], capacity, (*prefix, i))


class _Chunks:
    """The chunks of one call, handed to the pipelines of its GPUs as they ask (thread-safe);
    after :meth:`stop` none is handed out any more."""

    def __init__(self, loop_shape: tuple[int, ...], capacity: int) -> None:
        self._chunks = _chunks(loop_shape, capacity)
        self._lock = threading.Lock()
        self._stopped = False

    def __iter__(self) -> _Chunks:
        return self

    def __next__(self) -> tuple[Any, ...]:
        with self._lock:
            if self._stopped:
                raise StopIteration
            return next(self._chunks)

    def stop(self) -> None:
        self._stopped = True


class _Pipeline:
    """The state of one chunked call: host views, slots, and the chunk each slot holds."""

    def __init__(self, spec: KernelSpec, launches: _Launches, plan: Plan, inputs: list[Any],
                 results: tuple[np.ndarray, ...], where: Any, direct: list[bool]) -> None:
        self.spec, self.launches, self.plan = spec, launches, plan
        loop = plan.loop.dtype
        self.cores = ([len(d) for d in (*spec.layout.inputs, *spec.layout.outputs)]
                      if spec.layout else [0] * (spec.nin + spec.nout))
        loop_shape = plan.loop_shape or (1,)
        lead = () if plan.loop_shape else (np.newaxis,)
        self.scalars = [_by_value(a, loop, c) for a, c in zip(inputs, self.cores)]
        self.views = [None if s is not None else
                      np.broadcast_to(np.asarray(a), plan.loop_shape + _core_shape(np.shape(a), c))[lead]
                      for a, s, c in zip(inputs, self.scalars, self.cores)]
        self.outs = [r[lead] for r in results]
        self.where = None if where is True else np.broadcast_to(np.asarray(where), plan.loop_shape)[lead]
        self.loop_shape = loop_shape
        flat = all(v is None or v.flags.c_contiguous for v in [*self.views, *self.outs]) and (
            self.where is None or self.where.flags.c_contiguous)
        if flat:
            self._flatten()
        # Results in pinned memory take each chunk straight from the GPU (contiguous chunks).
        self.direct = [d and flat for d in direct]
        # Device-side dtypes: inputs as given (fewer bytes to move), ufunc outputs in the result
        # dtype, gufunc outputs in the loop dtype (core operands are computed in place).
        self.out_dtypes = [plan.result_dtype if spec.layout is None else loop for _ in self.outs]
        widest = max([v.dtype.itemsize * _core_size(v, c) for v, c in zip(self.views, self.cores)
                      if v is not None] + [d.itemsize * _core_size(o, c) for o, d, c in
                                           zip(self.outs, self.out_dtypes, self.cores[spec.nin:])])
        self.capacity = max(1, CHUNK_BYTES // max(1, widest))  # widest is 0 for n = 0 orders

    def _flatten(self) -> None:
        n = math.prod(self.loop_shape)
        nd = len(self.loop_shape)

        def flat(v: np.ndarray) -> np.ndarray:
            return v.reshape((n, *v.shape[nd:]))

        self.views = [None if v is None else flat(v) for v in self.views]
        self.outs = [flat(o) for o in self.outs]
        self.where = None if self.where is None else self.where.reshape(n)
        self.loop_shape = (n,)

    def run(self, lane: _Lane, chunks: Iterator[tuple[Any, ...]], stream: Any) -> None:
        """Run ``chunks`` through ``lane``'s slots (its GPU's context current)."""
        streams = lane.streams
        if stream is not None:
            user = lane.runtime.stream(stream_handle(stream))
            for s in streams:
                s.wait(user)  # start after the caller's pending work on its stream
        pending: list[Any] = [None] * SLOTS
        try:
            for c, index in enumerate(chunks):
                slot = c % SLOTS
                if pending[slot] is not None:
                    self._finish(*pending[slot])
                pending[slot] = self._issue(lane, slot, index, streams[slot])
            for c in range(SLOTS):
                if pending[c] is not None:
                    self._finish(*pending[c])
        except BaseException:
            # Copies in flight write into the results and the lane's buffers: let them land
            # before the caller (or the next user of the lane) can reuse that memory.
            for s in streams:
                s.sync()
            raise

    def _issue(self, lane: _Lane, slot: int, index: tuple[Any, ...], stream: Any) -> tuple[Any, ...]:
        """Pack chunk ``index`` and queue its copies and kernel on ``stream``."""
        runtime = lane.runtime
        values: list[Any] = []
        layouts: list[Layout] = []
        keep: list[Any] = []
        loop = self.plan.loop.dtype
        for k, (view, scalar) in enumerate(zip(self.views, self.scalars)):
            if view is None:
                values.append(scalar)
                layouts.append(Layout.scalar(loop))
                continue
            part = view[index]
            dtype = loop if self.cores[k] else part.dtype  # core operands are used in place
            nbytes = part.size * dtype.itemsize
            host = lane.staging(slot, k, nbytes)[:nbytes].view(dtype).reshape(part.shape)
            _copy(host, part)
            buffer = runtime.allocate(nbytes, stream)
            runtime.copy(address_of(buffer), host.ctypes.data, nbytes, stream)
            values.append(address_of(buffer))
            layouts.append(Layout.contiguous(part.shape, dtype, core=self.cores[k]))
            keep.append(buffer)
        outs = []
        for k, (out, dtype) in enumerate(zip(self.outs, self.out_dtypes)):
            part = out[index]
            core = self.cores[self.spec.nin + k]
            buffer = runtime.allocate(part.size * dtype.itemsize, stream)
            values.append(address_of(buffer))
            layouts.append(Layout.contiguous(part.shape, dtype, _order_major(part.shape, core), core))
            outs.append((address_of(buffer), part.shape, dtype, core))
            keep.append(buffer)
        chunk_shape = np.broadcast_to(np.empty((), bool), self.loop_shape)[index].shape
        self.launches.get(layouts, chunk_shape, runtime.ordinal).launch(values, int(stream.handle))
        staged: list[np.ndarray | None] = []
        for k, (address, shape, dtype, _) in enumerate(outs):
            if self.direct[k]:
                target = self.outs[k][index]
                runtime.copy(target.ctypes.data, address, target.nbytes, stream)
                staged.append(None)
                continue
            nbytes = math.prod(shape) * dtype.itemsize
            host = lane.staging(slot, len(self.views) + k, nbytes)[:nbytes].view(dtype)
            runtime.copy(host.ctypes.data, address, nbytes, stream)
            staged.append(host)
        return index, outs, staged, stream.record(), keep

    def _finish(self, index: tuple[Any, ...], outs: list[tuple[Any, ...]], staged: list[np.ndarray],
                done: Any, keep: list[Any]) -> None:
        """Wait for a chunk's copies back, then unpack it into the results."""
        done.sync()
        where = True if self.where is None else self.where[index]
        for k, ((_, shape, _, core), host) in enumerate(zip(outs, staged)):
            if host is None:  # copied straight into the result
                continue
            values = _logical_view(host, shape, core)
            mask = where if where is True else where[(..., *(np.newaxis,) * core)]
            _copy(self.outs[k][index], values, mask)


class _Launches:
    """The launch plans of one call signature's chunks (a full chunk and the last one, per GPU)."""

    def __init__(self, spec: KernelSpec, kernels: CudaKernels, loop: np.dtype) -> None:
        self.spec, self.kernels, self.loop = spec, kernels, loop
        self._plans: dict[Any, LaunchPlan] = {}

    def get(self, layouts: list[Layout], shape: tuple[int, ...], device: int) -> LaunchPlan:
        key = (tuple(layouts), shape, device)
        found = self._plans.get(key)
        if found is None:
            if len(self._plans) > 32:
                self._plans.clear()
            nin = self.spec.nin
            found = self._plans[key] = LaunchPlan(self.kernels, self.loop, layouts[:nin], layouts[nin:],
                                                  None, shape, device)
        return found


def _core_shape(shape: tuple[int, ...], core: int) -> tuple[int, ...]:
    return tuple(shape[len(shape) - core:]) if core else ()


def _core_size(view: np.ndarray, core: int) -> int:
    return math.prod(view.shape[view.ndim - core:]) if core else 1


def _order_major(shape: tuple[int, ...], core: int) -> tuple[int, ...]:
    """Logical axes from outermost to innermost in memory: core dimensions first."""
    loop = len(shape) - core
    return (*range(loop, len(shape)), *range(loop))


def _logical_view(host: np.ndarray, shape: tuple[int, ...], core: int) -> np.ndarray:
    axes = _order_major(shape, core)
    stored = host.reshape(tuple(shape[a] for a in axes))
    return stored.transpose(tuple(int(i) for i in np.argsort(axes)))


def _by_value(value: Any, dtype: np.dtype, core: int) -> Any | None:
    """A host scalar or one-element array as a scalar of ``dtype`` (``None``: an array operand).
    Operands with ``core`` dimensions are arrays to the kernel body, whatever their size."""
    if core:
        return None
    if isinstance(value, np.ndarray):
        return dtype.type(value.reshape(())[()]) if value.size == 1 else None
    return dtype.type(value)


def prepare(spec: KernelSpec, kernels: CudaKernels, plan: Plan,
            devices: tuple[int, ...] | None) -> Executor:
    """The executor of a call signature on host arrays: results are host arrays, as on cpu.
    ``devices``: the GPUs to split the work across (``None``: the caller's current GPU)."""
    launches = _Launches(spec, kernels, plan.loop.dtype)

    def execute(inputs: tuple[Any, ...], outs: Any, where: Any, stream: Any) -> tuple[Any, ...]:
        on = devices if devices is not None else (current_device(),)
        if stream is not None and len(on) > 1:
            raise ValueError(f"{spec.name}: stream= belongs to one GPU; with device='all' the call "
                             "runs on streams of its own on every GPU (pass device=k with a stream "
                             "of GPU k instead)")
        return run(spec, launches, plan, list(inputs), outs, where, stream, on)

    return execute


def run(spec: KernelSpec, launches: _Launches, plan: Plan, inputs: list[Any],
        outs: tuple[np.ndarray, ...] | None, where: Any, stream: Any,
        devices: tuple[int, ...]) -> tuple[np.ndarray, ...]:
    """Execute ``plan`` on host arrays through the GPUs ``devices``, in pipelined chunks."""
    if where is not True and outs is None:
        where = True  # like NumPy, masked positions of a new output are undefined
    if math.prod(plan.loop_shape) == 0:
        return outs or tuple(np.empty(s, plan.result_dtype, order=plan.order) for s in plan.out_shapes)
    if outs is not None:
        inputs = read_before_write(inputs, outs)
        where = read_before_write([where], outs)[0]
        results, direct = outs, [False] * len(outs)
    else:
        results, direct = _new_results(spec, plan, get_runtime(devices[0]))
    pipeline = _Pipeline(spec, launches, plan, inputs, results, where, direct)
    chunks = _Chunks(pipeline.loop_shape, pipeline.capacity)
    if len(devices) == 1:
        _run_on(pipeline, devices[0], chunks, stream)
    else:
        _run_on_all(pipeline, devices, chunks)
    return results


def _run_on(pipeline: _Pipeline, device: int, chunks: _Chunks, stream: Any) -> None:
    """``pipeline``'s chunks (or those left for this GPU) through a lane of ``device``."""
    lanes = _lanes(device)
    try:
        with lanes.runtime.current(), lanes.borrow() as lane:
            pipeline.run(lane, chunks, stream)
    except BaseException:
        chunks.stop()  # the other GPUs' pipelines take no further chunk
        raise


def _run_on_all(pipeline: _Pipeline, devices: tuple[int, ...], chunks: _Chunks) -> None:
    """One pipeline per GPU, each in a thread of its own, sharing ``chunks``. On any failure
    (or Ctrl-C in the caller) no further chunk is handed out, and every thread is waited for
    before the first error is raised: nothing writes into the results after the call ends."""
    threads = _device_threads(len(devices))
    jobs = [threads.submit(_run_on, pipeline, d, chunks, None) for d in devices]
    try:
        wait(jobs)
    except BaseException:  # Ctrl-C while waiting
        chunks.stop()
        wait(jobs)
        raise
    for job in jobs:
        job.result()


def _new_results(spec: KernelSpec, plan: Plan, runtime: Runtime) -> tuple[tuple[np.ndarray, ...], list[bool]]:
    results, direct = [], []
    for shape in plan.out_shapes:
        pinned = None
        if spec.layout is None and (plan.order == "C" or len(shape) < 2):
            pinned = _pinned_result(shape, plan.result_dtype, runtime)
        results.append(pinned if pinned is not None else np.empty(shape, plan.result_dtype,
                                                                   order=plan.order))
        direct.append(pinned is not None)
    return tuple(results), direct
