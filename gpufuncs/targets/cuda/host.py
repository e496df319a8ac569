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

New elementwise results are themselves allocated in pooled pinned memory (:class:`PinnedResults`,
up to :data:`PINNED_RESULTS_BYTES`), so the GPU copies each chunk straight into the result: no
unpack copy, and no page faults on fresh result memory, which cost more than the copy itself
(measured: fresh memory is written at about a quarter of the speed of reused memory). Such a
result is an ordinary NumPy array; its memory goes back to the pool when the array and all its
views are gone. The lanes, threads and pool are the cuda target's (:class:`Resources`).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import math
import operator
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...spec import KernelSpec, Loop
from ..base import Arg, Executor, Plan, c_strides, copy_cast, is_contiguous, read_before_write, scalar_cast
from ..fpstatus import report
from .arrays import address_of, stream_handle
from .compile import CudaKernels
from .fpflags import masked_status
from .launch import LaunchPlan, Layout
from .runtime import Runtime, Runtimes, current_device

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
#: Pinned memory kept for results by default (freed results' memory is reused; beyond this, plain
#: memory): the budget of :class:`PinnedResults`.
PINNED_RESULTS_BYTES = min(8 << 30, (os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")) // 8
                           if hasattr(os, "sysconf") else 1 << 30)

def _copy(dst: np.ndarray, src: np.ndarray, where: Any = True,
          threads: Callable[[], ThreadPoolExecutor] | None = None) -> None:
    """:func:`copy_cast` split along the first axis over ``threads()`` for large arrays."""
    rows = dst.shape[0] if dst.ndim else 1
    if threads is None or dst.nbytes < _PARALLEL_COPY_BYTES or rows < 2 * _THREADS:
        copy_cast(dst, src, where)
        return
    pool = threads()
    bounds = np.linspace(0, rows, _THREADS + 1).astype(int)
    where = np.broadcast_to(where, dst.shape) if where is not True else None
    jobs = [pool.submit(copy_cast, dst[a:b], src[a:b], True if where is None else where[a:b])
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

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
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


class Resources:
    """What the host pipeline keeps between calls, owned by the cuda target: each GPU's lanes,
    the threads that run one pipeline per GPU, the threads that split large copies (all made on
    first need), and the pool of pinned memory for new results.

    Parameters
    ----------
    runtimes : Runtimes
        The target's GPU runtimes, whose streams and memory the lanes use.
    """

    def __init__(self, runtimes: Runtimes) -> None:
        self.runtimes = runtimes
        #: Pooled pinned memory for new elementwise results (see :class:`PinnedResults`).
        self.pinned_results = PinnedResults()
        self._lock = threading.Lock()
        self._lanes: dict[int, _Lanes] = {}
        self._device_threads: dict[int, ThreadPoolExecutor] = {}
        self._copy_threads: ThreadPoolExecutor | None = None

    def lanes(self, device: int) -> _Lanes:
        """The lanes of GPU ``device``."""
        with self._lock:
            found = self._lanes.get(device)
            if found is None:
                found = self._lanes[device] = _Lanes(self.runtimes.get(device))
            return found

    def device_threads(self, count: int) -> ThreadPoolExecutor:
        """The threads that run the pipelines of a call on ``count`` GPUs."""
        with self._lock:
            found = self._device_threads.get(count)
            if found is None:
                found = self._device_threads[count] = ThreadPoolExecutor(
                    count, thread_name_prefix="gpufuncs-device")
            return found

    def copy_threads(self) -> ThreadPoolExecutor:
        """The threads that split copies larger than :data:`_PARALLEL_COPY_BYTES`."""
        with self._lock:
            if self._copy_threads is None:
                self._copy_threads = ThreadPoolExecutor(_THREADS, thread_name_prefix="gpufuncs-copy")
            return self._copy_threads


class PinnedResults:
    """Page-locked memory for new results, pooled: a result's memory goes back to the pool when
    the result and all its views are gone, and is reused for a later result of its size class.

    Parameters
    ----------
    limit : int
        Bytes of pinned memory the pool may hold at most (:data:`PINNED_RESULTS_BYTES`); beyond
        it, results are left to plain memory.
    """

    def __init__(self, limit: int = PINNED_RESULTS_BYTES) -> None:
        self.limit = limit
        #: Bytes pinned so far (lent out or free): never more than :attr:`limit`.
        self.held = 0
        self._free: dict[int, list[np.ndarray]] = {}  # free blocks by size

    def result(self, shape: tuple[int, ...], dtype: np.dtype, runtime: Runtime) -> np.ndarray | None:
        """A C-contiguous result in pooled pinned memory (portable: any GPU copies into it at
        full speed; new memory is pinned through ``runtime``), or ``None`` when the pool is full."""
        nbytes = math.prod(shape) * dtype.itemsize
        size = -(-max(nbytes, 1) // (2 << 20)) * (2 << 20)  # 2 MiB classes
        raw = None
        free = self._free.get(size)
        if free:
            with contextlib.suppress(IndexError):  # another thread took the last one
                raw = free.pop()
        if raw is None:
            if self.held + size > self.limit:
                return None
            raw = runtime.pinned(size)
            self.held += size
        return np.asarray(_PinnedBlock(self, raw, nbytes)).view(dtype).reshape(shape)

    def give_back(self, raw: np.ndarray) -> None:
        """Return a block to the pool (from :class:`_PinnedBlock`'s finalizer: takes no lock,
        which a collection in a thread holding it would deadlock on)."""
        self._free.setdefault(raw.nbytes, []).append(raw)


class _PinnedBlock:
    """Pooled page-locked memory lent to one result; given back to its pool when collected.

    Arrays made from it keep it as their base (it is not an ndarray, so NumPy never collapses a
    view's base past it): the memory is reused only once no view of the result is left.
    """

    def __init__(self, pool: PinnedResults, raw: np.ndarray, nbytes: int) -> None:
        self._pool, self._raw = pool, raw
        self.__array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "version": 3,
                                    "data": (raw.ctypes.data, False)}

    def __del__(self) -> None:
        try:
            self._pool.give_back(self._raw)
        except (AttributeError, TypeError):  # interpreter shutdown: nothing to keep
            pass


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


@dataclass(frozen=True)
class _Decisions:
    """What a call signature on host arrays decides about its chunks, once, from its key
    (dtypes, shapes, strides): the executor's data."""

    cores: tuple[int, ...]  # core dimensions of the inputs, then the outputs
    by_value: tuple[bool, ...]  # inputs passed to the kernel as scalars
    #: Device-side dtype of each array input: the loop's for core operands (used in place),
    #: else its own (fewer bytes to move) in native byte order (kernels load native values).
    in_dtypes: tuple[np.dtype | None, ...]
    #: Device-side dtype of each output: the result dtype (ufuncs), the loop's (gufuncs).
    out_dtypes: tuple[np.dtype, ...]
    #: Every operand's view over the loop is C-contiguous: chunks are slices of one flat
    #: dimension. Decided from the keyed strides; an input replaced by a copy at run time
    #: (overlap) is C-contiguous too, and the general indexing serves any strides.
    flat: bool
    widest: int  # device bytes of the widest operand per loop element


def _decide(spec: KernelSpec, plan: Plan) -> _Decisions:
    loop, nin = plan.loop.compiled, spec.nin
    cores = (tuple(len(d) for d in (*spec.layout.inputs, *spec.layout.outputs))
             if spec.layout else (0,) * (nin + spec.nout))
    # Scalars by value, except complex ones (a one-element array: see device._input).
    by_value = tuple(not c and (not a.is_array or math.prod(a.shape) == 1) and t.kind != "c"
                     for a, c, t in zip(plan.inputs, cores, loop.inputs))
    in_dtypes = tuple(None if v else t if c or not a.is_array else a.dtype.newbyteorder("=")
                      for a, v, c, t in zip(plan.inputs, by_value, cores, loop.inputs))
    out_dtypes = plan.result_dtypes if spec.layout is None else loop.outputs
    views = [(loop_view(plan.loop_shape, a, c), d.itemsize if not a.is_array else a.dtype.itemsize)
             for a, v, c, d in zip(plan.inputs, by_value, cores, in_dtypes) if not v]
    if plan.outs is not None:
        views += [((o.shape, o.strides), o.dtype.itemsize) for o in plan.outs]
        if plan.where is not None:
            views.append((loop_view(plan.loop_shape, plan.where, 0), plan.where.dtype.itemsize))
    elif plan.order == "F":  # new results: C order, or F (unpinned, see _new_results)
        views += [((s, c_strides(s[::-1], d.itemsize)[::-1]), d.itemsize)
                  for s, d in zip(plan.out_shapes, plan.result_dtypes)]
    flat = all(is_contiguous(shape, strides, item) for (shape, strides), item in views)
    widest = max([d.itemsize * math.prod(a.shape[len(a.shape) - c:]) if c else d.itemsize
                  for a, d, c in zip(plan.inputs, in_dtypes, cores) if d is not None]
                 + [d.itemsize * math.prod(s[len(s) - c:]) if c else d.itemsize
                    for s, d, c in zip(plan.out_shapes, out_dtypes, cores[nin:])])
    return _Decisions(cores, by_value, in_dtypes, out_dtypes, flat, widest)


def loop_view(loop_shape: tuple[int, ...], arg: Arg, core: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Shape and byte strides of ``arg`` broadcast over ``loop_shape`` (its core dimensions
    kept), as ``np.broadcast_to`` makes them."""
    shape = loop_shape + _core_shape(arg.shape, core)
    given = tuple(0 if n == 1 else s for n, s in zip(arg.shape, arg.strides))
    return shape, (0,) * (len(shape) - len(given)) + given


class _Pipeline:
    """The state of one chunked call: host views, slots, and the chunk each slot holds."""

    def __init__(self, decisions: _Decisions, launches: _Launches, plan: Plan, inputs: list[Any],
                 results: tuple[np.ndarray, ...], where: Any, direct: list[bool],
                 resources: Resources) -> None:
        d = decisions
        self.launches, self.plan, self.resources = launches, plan, resources
        self.nin, self.cores = len(inputs), d.cores
        self.in_dtypes, self.out_dtypes = d.in_dtypes, d.out_dtypes
        types = plan.loop.compiled.inputs
        lead = () if plan.loop_shape else (np.newaxis,)
        self.scalars = [None if not v else scalar_cast(t)(a.reshape(())[()] if isinstance(a, np.ndarray)
                                                          else a)
                        for a, v, t in zip(inputs, d.by_value, types)]
        self.views = [None if v else
                      np.broadcast_to(np.asarray(a), plan.loop_shape + _core_shape(np.shape(a), c))[lead]
                      for a, v, c in zip(inputs, d.by_value, d.cores)]
        self.outs = [r[lead] for r in results]
        self.where = None if where is True else np.broadcast_to(np.asarray(where), plan.loop_shape)[lead]
        self.loop_shape = plan.loop_shape or (1,)
        if d.flat:
            self._flatten()
        # Results in pinned memory take each chunk straight from the GPU (contiguous chunks).
        self.direct = [x and d.flat for x in direct]
        self.capacity = max(1, CHUNK_BYTES // max(1, d.widest))  # widest is 0 for n = 0 orders
        #: Per GPU, the flag slot its chunks' kernels share: ``(ring, slot, device address)``.
        self.flags: dict[int, tuple[Any, int, int]] = {}

    def flag_address(self, runtime: Runtime) -> int:
        """The device address of the flag slot of this call's kernels on ``runtime``'s GPU."""
        found = self.flags.get(runtime.ordinal)
        if found is None:  # (each GPU's pipeline runs in one thread)
            ring = runtime.flag_ring()
            found = self.flags[runtime.ordinal] = (ring, *ring.take())
        return found[2]

    def status(self) -> int:
        """NumPy's bits that the kernels found, once every chunk is back (see :mod:`.fpflags`)."""
        status = 0
        for ring, slot, _ in self.flags.values():
            status |= ring.status(slot)
        return status

    def _flatten(self) -> None:
        n = math.prod(self.loop_shape)
        nd = len(self.loop_shape)

        def flat(v: np.ndarray) -> np.ndarray:
            return v.reshape((n, *v.shape[nd:]))

        def flat_view(v: np.ndarray) -> np.ndarray:
            view = v.view()
            view.shape = (n, *v.shape[nd:])  # raises where a copy would be needed
            return view

        self.views = [None if v is None else flat(v) for v in self.views]
        self.outs = [flat_view(o) for o in self.outs]
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
        types = self.plan.loop.compiled.inputs
        for k, (view, scalar) in enumerate(zip(self.views, self.scalars)):
            if view is None:
                values.append(scalar)
                layouts.append(Layout.scalar(types[k]))
                continue
            part = view[index]
            dtype = self.in_dtypes[k]
            nbytes = part.size * dtype.itemsize
            host = lane.staging(slot, k, nbytes)[:nbytes].view(dtype).reshape(part.shape)
            _copy(host, part, threads=self.resources.copy_threads)
            buffer = runtime.allocate(nbytes, stream)
            runtime.copy(address_of(buffer), host.ctypes.data, nbytes, stream)
            values.append(address_of(buffer))
            layouts.append(Layout.contiguous(part.shape, dtype, core=self.cores[k]))
            keep.append(buffer)
        outs = []
        for k, (out, dtype) in enumerate(zip(self.outs, self.out_dtypes)):
            part = out[index]
            core = self.cores[self.nin + k]
            buffer = runtime.allocate(part.size * dtype.itemsize, stream)
            values.append(address_of(buffer))
            layouts.append(Layout.contiguous(part.shape, dtype, _order_major(part.shape, core), core))
            outs.append((address_of(buffer), part.shape, dtype, core))
            keep.append(buffer)
        chunk_shape = np.broadcast_to(np.empty((), bool), self.loop_shape)[index].shape
        plan = self.launches.get(layouts, chunk_shape, runtime)
        if plan.takes_flags:
            values.append(self.flag_address(runtime))
            plan.launch_flagged(values, int(stream.handle))
        else:
            plan.launch(values, int(stream.handle))
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
            _copy(self.outs[k][index], values, mask, self.resources.copy_threads)


class _Launches:
    """The launch plans of one call signature's chunks (a full chunk and the last one, per GPU)."""

    def __init__(self, spec: KernelSpec, kernels: CudaKernels, loop: Loop) -> None:
        self.spec, self.kernels, self.loop = spec, kernels, loop
        self._plans: dict[Any, LaunchPlan] = {}

    def get(self, layouts: list[Layout], shape: tuple[int, ...], runtime: Runtime) -> LaunchPlan:
        key = (tuple(layouts), shape, runtime.ordinal)
        found = self._plans.get(key)
        if found is None:
            if len(self._plans) > 32:
                self._plans.clear()
            nin = self.spec.nin
            found = self._plans[key] = LaunchPlan(self.kernels, self.loop, layouts[:nin], layouts[nin:],
                                                  None, shape, runtime)
        return found


def _core_shape(shape: tuple[int, ...], core: int) -> tuple[int, ...]:
    return tuple(shape[len(shape) - core:]) if core else ()


def _order_major(shape: tuple[int, ...], core: int) -> tuple[int, ...]:
    """Logical axes from outermost to innermost in memory: core dimensions first."""
    loop = len(shape) - core
    return (*range(loop, len(shape)), *range(loop))


def _logical_view(host: np.ndarray, shape: tuple[int, ...], core: int) -> np.ndarray:
    axes = _order_major(shape, core)
    stored = host.reshape(tuple(shape[a] for a in axes))
    return stored.transpose(tuple(int(i) for i in np.argsort(axes)))


def prepare(spec: KernelSpec, kernels: CudaKernels, plan: Plan, devices: tuple[int, ...] | None,
            resources: Resources) -> Executor:
    """The executor of a call signature on host arrays: results are host arrays, as on cpu.
    ``devices``: the GPUs to split the work across (``None``: the caller's current GPU);
    ``resources``: the target's lanes and threads."""
    launches = _Launches(spec, kernels, plan.loop.compiled)
    decisions = _decide(spec, plan)

    def execute(inputs: tuple[Any, ...], outs: Any, where: Any, stream: Any) -> tuple[Any, ...]:
        on = devices if devices is not None else (current_device(),)
        if stream is not None and len(on) > 1:
            raise ValueError(f"{spec.name}: stream= belongs to one GPU; with device='all' the call "
                             "runs on streams of its own on every GPU (pass device=k with a stream "
                             "of GPU k instead)")
        return run(spec, decisions, launches, plan, list(inputs), outs, where, stream, on, resources)

    return execute


def run(spec: KernelSpec, decisions: _Decisions, launches: _Launches, plan: Plan, inputs: list[Any],
        outs: tuple[np.ndarray, ...] | None, where: Any, stream: Any,
        devices: tuple[int, ...], resources: Resources) -> tuple[np.ndarray, ...]:
    """Execute ``plan`` on host arrays through the GPUs ``devices``, in pipelined chunks."""
    if where is not True and outs is None:
        where = True  # like NumPy, masked positions of a new output are undefined
    if math.prod(plan.loop_shape) == 0:
        return outs or tuple(np.empty(s, d, order=plan.order)
                             for s, d in zip(plan.out_shapes, plan.result_dtypes))
    if outs is not None:
        # An input that is an output element for element needs no copy, also for core
        # operands: each chunk's inputs are on the GPU before any of its results is written
        # back, and chunks are disjoint sets of loop indices.
        inputs = read_before_write(inputs, outs, same_is_safe=True)
        where = read_before_write([where], outs, same_is_safe=True)[0]
        results, direct = outs, [False] * len(outs)
    else:
        results, direct = _new_results(spec, plan, resources.runtimes.get(devices[0]),
                                       resources.pinned_results)
    pipeline = _Pipeline(decisions, launches, plan, inputs, results, where, direct, resources)
    chunks = _Chunks(pipeline.loop_shape, pipeline.capacity)
    if len(devices) == 1:
        _run_on(pipeline, devices[0], chunks, stream)
    else:
        _run_on_all(pipeline, devices, chunks)
    status = pipeline.status()  # the last copies back have waited for every kernel
    if status and where is not True:  # (the kernels computed the masked-out elements too)
        status = functools.reduce(operator.or_, (
            masked_status(status, result, inputs, plan.loop.compiled.inputs, where) for result in results))
    if status:
        report(status, spec.name)
    return results


def _run_on(pipeline: _Pipeline, device: int, chunks: _Chunks, stream: Any) -> None:
    """``pipeline``'s chunks (or those left for this GPU) through a lane of ``device``."""
    lanes = pipeline.resources.lanes(device)
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
    threads = pipeline.resources.device_threads(len(devices))
    jobs = [threads.submit(_run_on, pipeline, d, chunks, None) for d in devices]
    try:
        wait(jobs)
    except BaseException:  # Ctrl-C while waiting
        chunks.stop()
        wait(jobs)
        raise
    for job in jobs:
        job.result()


def _new_results(spec: KernelSpec, plan: Plan, runtime: Runtime,
                 pool: PinnedResults) -> tuple[tuple[np.ndarray, ...], list[bool]]:
    results, direct = [], []
    for shape, dtype in zip(plan.out_shapes, plan.result_dtypes):
        pinned = None
        if spec.layout is None and (plan.order == "C" or len(shape) < 2):
            pinned = pool.result(shape, dtype, runtime)
        results.append(pinned if pinned is not None else np.empty(shape, dtype, order=plan.order))
        direct.append(pinned is not None)
    return tuple(results), direct
