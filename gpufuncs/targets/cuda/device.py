"""Calls with device arrays: an executor per call signature, and what it does per call.

:func:`prepare` decides, once per call signature, how to read each operand (a pointer getter of
its array kind, a scalar cast, a host copy), how to allocate each new output, which stream the
call runs on, the launch plan (kernel, indexing, grid, packed parameters) and any dtype staging of
core operands. Per call the executor then takes the stream, the pointers and scalar values,
copies an input that overlaps ``out=``, allocates outputs and launches.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...spec import IDENTITY, KernelSpec
from ..base import DEVICE, HOST, Arg, Executor, Plan, casts_scalar, copy_cast, scalar_cast, span
from ..fpstatus import report
from . import arrays, fpflags
from .compile import CudaKernels
from .fpflags import watched
from .launch import LaunchPlan, Layout
from .runtime import Runtime, same_stream

HALF = np.dtype(np.float16)

#: ``read(obj, handle, keep) -> launch value``: a pointer or a scalar; temporaries go in ``keep``.
Reader = Callable[[Any, int, list], Any]


def _device_getter(kind: str) -> Callable[[Any], int] | None:
    """``array -> address`` for kinds read without the stream (all but DLPack)."""
    return None if kind == arrays.DLPACK else arrays.pointer_getter(kind)


def _device_reader(kind: str) -> Reader:
    if kind == arrays.DLPACK:
        def read_dlpack(obj: Any, handle: int, keep: list) -> int:
            address, view = arrays.dlpack_pointer(obj, handle)
            keep.append(view)
            return address
        return read_dlpack
    pointer = arrays.pointer_getter(kind)
    return lambda obj, handle, keep: pointer(obj)


def _host_reader(dtype: np.dtype | None, runtime: Any) -> Reader:
    """A host array mixed with device arrays: copied to the device on every call."""
    def read(obj: Any, handle: int, keep: list) -> int:
        array = np.asarray(obj) if dtype is None else np.asarray(obj, dtype=dtype)
        address, buffer = arrays.to_device(array, runtime, runtime.stream(handle))
        keep.append(buffer)
        return address
    return read


def _scalar_reader(dtype: np.dtype) -> Reader:
    cast = scalar_cast(dtype)

    def read(value: Any, handle: int, keep: list) -> Any:
        return cast(value.reshape(())[()] if isinstance(value, np.ndarray) else value)

    return read


def _scalar_getter(arg: Arg, dtype: np.dtype, simulated: bool) -> Callable[[Any], Any] | None:
    """``scalar -> value to pack``: NumPy's conversion to a float32 loop (inf where a float
    overflows it); a float64 parameter takes Python and NumPy scalars as they are.

    A Python float is packed as it is into a narrower float parameter too: ``struct`` rounds it
    as NumPy does (C's conversion), for a fraction of the cost of making a NumPy scalar, and the
    packer casts with NumPy where ``struct`` refuses a value beyond the type's range. The
    simulator computes with the values it is given, so it gets NumPy scalars."""
    if arg.role == HOST:
        return None  # a one-element array
    if casts_scalar(arg.cls, dtype):
        return scalar_cast(dtype)
    if dtype == np.float64 or arg.cls is dtype.type or (arg.cls is float and not simulated):
        return _same
    return scalar_cast(dtype)


def _same(value: Any) -> Any:
    return value


class _Operand:
    """How one argument is read (``get``: without stream or temporaries, where that suffices),
    and its layout in the launch."""

    def __init__(self, read: Reader, layout: Layout, kind: str | None = None,
                 get: Callable[[Any], Any] | None = None) -> None:
        self.read, self.layout, self.kind, self.get = read, layout, kind, get


def _device(arg: Arg, core: int) -> _Operand:
    kind = arrays.kind_of(arg.cls)
    return _Operand(_device_reader(kind), Layout(arg.dtype, arg.shape, arg.strides, core), kind,
                    _device_getter(kind))


def _input(arg: Arg, core: int, loop: np.dtype, runtime: Any) -> _Operand:
    """How input ``arg`` is read, for a loop that takes it as ``loop``."""
    if arg.role == DEVICE:
        return _device(arg, core)
    size = int(np.prod(arg.shape)) if arg.role == HOST else 1
    if not core and size == 1 and loop.kind != "c":
        return _Operand(_scalar_reader(loop), Layout.scalar(loop),
                        get=_scalar_getter(arg, loop, runtime.simulated))
    if arg.role != HOST:
        # A scalar given for a core operand, or a complex one (a kernel parameter holds one
        # 8-byte value): a one-element array.
        return _Operand(_host_reader(loop, runtime), Layout.contiguous(arg.shape, loop, core=core))
    # Core operands are used in place: the loop's dtype. Others keep theirs (fewer bytes to
    # move), in native byte order: kernels load native values.
    dtype = loop if core else None if arg.dtype.isnative else arg.dtype.newbyteorder("=")
    return _Operand(_host_reader(dtype, runtime), Layout.contiguous(arg.shape, dtype or arg.dtype, core=core))


def _output_axes(spec: KernelSpec, plan: Plan, shape: tuple[int, ...]) -> tuple[int, ...]:
    loop_nd = len(plan.loop_shape)
    if spec.layout is not None:
        # Order-major: core dimensions outermost, so the threads of a warp (consecutive loop
        # elements) write consecutive addresses for every core index.
        return (*range(loop_nd, len(shape)), *range(loop_nd))
    if plan.order == "F":
        return tuple(reversed(range(len(shape))))
    return tuple(range(len(shape)))


@functools.cache
def _identity_kernels() -> CudaKernels:
    return CudaKernels(IDENTITY)


def cast_plan(src: Layout, dst: Layout, runtime: Runtime) -> LaunchPlan:
    """A launch on ``runtime``'s GPU copying ``src`` into ``dst`` (same shape), converting the
    dtype on the way."""
    wide = np.dtype(np.float64) in (src.dtype, dst.dtype)
    loop = IDENTITY.loop_for(np.dtype(np.float64 if wide else np.float32))
    plain = [Layout(op.dtype, op.shape, op.strides) for op in (src, dst)]
    return LaunchPlan(_identity_kernels(), loop, plain[:1], plain[1:], None, src.shape, runtime,
                      report=False)


class _Staging:
    """A core operand of another dtype than the loop's, computed through a loop-dtype buffer."""

    def __init__(self, index: int, given: Layout, loop: np.dtype, is_input: bool, keep_values: bool,
                 runtime: Runtime) -> None:
        self.index = index
        self.buffer = Layout.contiguous(given.shape, loop, core=given.core)
        self.allocate = arrays.buffer_allocator(math.prod(given.shape) * loop.itemsize, runtime)
        self.before = cast_plan(given, self.buffer, runtime) if is_input or keep_values else None
        self.after = None if is_input else cast_plan(self.buffer, given, runtime)


# -- the decisions of a call signature, step by step ----------------------------------------------
def _refuse_byte_swapped(spec: KernelSpec, plan: Plan) -> None:
    """Kernels load native values: a byte-swapped device array (a dtype, so part of the key)
    is refused here, once, rather than read as garbage on every call."""
    for name, arg in _named(spec, plan):
        if arg.role == DEVICE and not arg.dtype.isnative:
            raise TypeError(f"{spec.name}: {name} is a device array of byte-swapped dtype "
                            f"{arg.dtype.str!r}, which CUDA kernels cannot load; pass it in native "
                            f"byte order ({arg.dtype.newbyteorder('=').str!r})")


def _named(spec: KernelSpec, plan: Plan) -> list[tuple[str, Arg]]:
    """Every argument of ``plan`` with the name errors give it, in launch order."""
    outs = (f"out[{k}]" if spec.nout > 1 else "out" for k in range(spec.nout))
    named = list(zip(spec.input_names, plan.inputs))
    named += list(zip(outs, plan.outs or ()))
    return named + ([("where", plan.where)] if plan.where is not None and plan.outs is not None else [])


def _outputs(spec: KernelSpec, plan: Plan, inputs: list[_Operand], runtime: Any) -> tuple[
        list[_Operand], tuple[tuple[arrays.Allocate, arrays.Wrap | None], ...],
        tuple[tuple[int, arrays.Allocate, np.dtype], ...]]:
    """The output operands; the allocators of new outputs (no ``out=``), made by the first
    device input's library; and, per host ``out=`` array, a device buffer computed into and
    copied back (``(output index, allocate, native dtype)``)."""
    out_cores = plan.cores[spec.nin:]
    operands: list[_Operand] = []
    if plan.outs is None:
        like = next((op.kind for op in inputs if op.kind is not None), None)
        first_layout = next((op.layout for op in inputs if op.kind is not None), None)
        allocators = []
        for shape, core, dtype in zip(plan.out_shapes, out_cores, plan.result_dtypes):
            axes = _output_axes(spec, plan, shape)
            layout = Layout.contiguous(shape, dtype, axes, core)
            allocators.append(arrays.allocator(like, shape, dtype, axes, runtime,
                                               like_layout=layout == first_layout))
            operands.append(_Operand(_taken, layout))
        return operands, tuple(allocators), ()
    host_outs = []
    for k, (o, core) in enumerate(zip(plan.outs, out_cores)):
        if o.role == DEVICE:
            operands.append(_device(o, core))
            continue
        dtype = o.dtype.newbyteorder("=")  # the kernel writes native values; copyto swaps them
        host_outs.append((k, arrays.buffer_allocator(math.prod(o.shape) * dtype.itemsize, runtime), dtype))
        operands.append(_Operand(_taken, Layout.contiguous(o.shape, dtype, core=core)))
    return operands, (), tuple(host_outs)


def _mask(plan: Plan, runtime: Any) -> tuple[_Operand | None, bool]:
    """The ``where=`` operand read per call (``None``: none), and whether ``where`` is one
    value (True: no mask at all; False: nothing to write), checked on every call. Masked-out
    elements of new outputs are undefined, so they get no mask."""
    mask = plan.where if plan.outs is not None else None
    if mask is None:
        return None, False
    if mask.role == DEVICE:
        return _device(mask, 0), False
    if int(np.prod(mask.shape)) == 1:
        return None, True
    return _Operand(_host_reader(None, runtime), Layout.contiguous(mask.shape, mask.dtype)), False


def _stagings(spec: KernelSpec, plan: Plan, layouts: list[Layout], masked: bool,
              runtime: Runtime) -> tuple[_Staging, ...]:
    """Core operands of another dtype than the loop's, computed through loop-dtype buffers;
    and float16 results, rounded to float16 on their way into a wider ``out=``."""
    nin, loop = spec.nin, plan.loop.compiled
    types = loop.inputs + loop.outputs
    staging = [_Staging(i, lay, types[i], i < nin, masked, runtime)
               for i, lay in enumerate(layouts[: nin + spec.nout])
               if lay.core and lay.array and lay.dtype != types[i]]
    if not masked and plan.outs is not None:
        staging += [_Staging(nin + k, lay, HALF, False, False, runtime)
                    for k, lay in enumerate(layouts[nin: nin + spec.nout])
                    if plan.result_dtypes[k] == HALF and lay.array and lay.dtype != HALF
                    and all(s.index != nin + k for s in staging)]
    return tuple(staging)


@dataclass(frozen=True)
class _Streams:
    """The stream a call launches on: ``stream=``, else the first device array's library's
    (its current stream); the other operands' streams it must wait for, read per call."""

    runtime: Any
    first: int | None  # value index of the first device array
    producers: tuple[tuple[int, Callable[[Any], int | None]], ...]
    others: tuple[tuple[int, Callable[[Any], int | None]], ...]  # those that may differ from first's

    @staticmethod
    def of(operands: list[_Operand], runtime: Any) -> _Streams:
        kinds = [op.kind for op in operands]
        first = next((i for i, k in enumerate(kinds) if k is not None), None)
        producers = tuple((i, arrays.producer_stream(k, runtime)) for i, k in enumerate(kinds)
                          if k is not None)
        # CuPy and torch arrays all report their library's current stream: only other kinds
        # can need a wait.
        same = (arrays.CUPY, arrays.TORCH)
        others = tuple((i, p) for i, p in producers[1:]
                       if not (kinds[i] == kinds[first] and kinds[i] in same))
        return _Streams(runtime, first, producers, others)

    def handle(self, objs: list[Any], stream: Any) -> int:
        """The stream to launch on, after making it wait for the other operands' streams."""
        if stream is not None:
            handle, check = arrays.stream_handle(stream), self.producers
        else:
            handle, check = (self.producers[0][1](objs[self.first]) or 0), self.others
        waited = []
        runtime = self.runtime
        for i, producer in check:
            other = producer(objs[i])
            if other is None or other == handle:  # (most calls: one stream for every operand)
                continue
            if other not in waited and not same_stream(other, handle):
                runtime.stream(handle).wait(runtime.stream(other))  # their pending work first
                waited.append(other)
        return handle


@dataclass(frozen=True)
class _Decisions:
    """Everything a call signature with device arrays decides once: its executor's data."""

    name: str
    names: tuple[str, ...]  # of the launch values, for errors
    nin: int
    operands: tuple[_Operand, ...]  # inputs, outputs, then the mask: the launch's values
    allocators: tuple[tuple[arrays.Allocate, arrays.Wrap | None], ...]  # new outputs
    host_outs: tuple[tuple[int, arrays.Allocate, np.dtype], ...]  # host out=, copied back
    masked: bool  # a where= array is the last operand
    constant_where: bool  # where= is one value, tested per call
    staging: tuple[_Staging, ...]
    main: LaunchPlan
    streams: _Streams
    pairs: tuple[_Overlap, ...]  # (read operand, output) pairs whose overlap each call checks
    #: ``(value index, itemsize - 1)`` of each device array: a misaligned address (not in the
    #: key) would stop the GPU's context with a sticky error, so each call checks it.
    alignment: tuple[tuple[int, int], ...]
    runtime: Any

    @property
    def fast(self) -> bool:
        """Whether every operand is read by one getter and nothing else is decided per call."""
        return (not self.staging and not self.host_outs and not self.constant_where
                and all(op.get is not None for op in self.operands if op.read is not _taken))


def _decide(spec: KernelSpec, kernels: CudaKernels, plan: Plan, runtime: Any) -> _Decisions:
    loop, nin, nout = plan.loop.compiled, spec.nin, spec.nout
    operands = [_input(a, c, t, runtime) for a, c, t in zip(plan.inputs, plan.cores, loop.inputs)]
    outputs, allocators, host_outs = _outputs(spec, plan, operands, runtime)
    mask, constant_where = _mask(plan, runtime)
    operands += outputs + ([mask] if mask is not None else [])
    given = [op.layout for op in operands]
    staging = _stagings(spec, plan, given, mask is not None, runtime)
    layouts = list(given)
    for stage in staging:
        layouts[stage.index] = stage.buffer
    main = LaunchPlan(kernels, loop, layouts[:nin], layouts[nin:nin + nout],
                      layouts[nin + nout] if mask is not None else None, plan.loop_shape, runtime)
    alignment = tuple((i, op.layout.dtype.itemsize - 1) for i, op in enumerate(operands)
                      if op.kind is not None and op.layout.dtype.itemsize > 1)
    names = tuple(name for name, _ in _named(spec, plan)) if plan.outs is not None else spec.input_names
    return _Decisions(spec.name, names, nin, tuple(operands), allocators, host_outs, mask is not None,
                      constant_where, staging, main, _Streams.of(operands, runtime),
                      _overlap_pairs(given, nin, nout), alignment, runtime)  # overlap: as given


def prepare(spec: KernelSpec, kernels: CudaKernels, plan: Plan, runtime: Runtime) -> Executor:
    """The executor of a call signature with at least one device array, all on ``runtime``'s
    GPU (called with that device's context current)."""
    _refuse_byte_swapped(spec, plan)
    decisions = _decide(spec, kernels, plan, runtime)
    execute = _fast_executor(decisions) if decisions.fast else _Executor(decisions)
    return decisions.runtime.guarded(execute)


def _misaligned(decisions: _Decisions, index: int, address: int) -> ValueError:
    itemsize = decisions.operands[index].layout.dtype.itemsize
    return ValueError(f"{decisions.name}: {decisions.names[index]} is a device array at address "
                      f"{address:#x}, not a multiple of its itemsize {itemsize} (a misaligned view), "
                      "which CUDA kernels cannot load; pass an aligned copy")


class _Executor:
    """The executor of call signatures that read some operand with the stream, copy host
    arrays, stage core operands or test a one-value ``where`` per call."""

    def __init__(self, decisions: _Decisions) -> None:
        self.d = decisions

    def __call__(self, inputs: tuple[Any, ...], outs: Any, where: Any, stream: Any) -> tuple[Any, ...]:
        d = self.d
        nin, runtime = d.nin, d.runtime
        runtime.bind_thread()
        if d.constant_where and not np.asarray(where).reshape(())[()]:
            return tuple(outs)
        objs = [*inputs, *(outs or ()), *((where,) if d.masked else ())]
        handle = d.streams.handle(objs, stream) if d.streams.producers or stream is not None else 0
        keep: list[Any] = []
        reads = [op.read for op in d.operands]
        values = [read(obj, handle, keep) for read, obj in zip(reads[:nin], objs)]
        if outs is None:
            like = inputs[d.streams.first] if d.streams.first is not None else None
            # stream is None: the handle is the first input's library's own stream
            new = _allocate(d.allocators, like, handle, stream is None, values)
        else:
            host = {k: allocate for k, allocate, _ in d.host_outs}
            for k, obj in enumerate(outs):
                if k in host:
                    temp, address = host[k](None, handle, False)
                    keep.append(temp)
                    values.append(address)
                else:
                    values.append(reads[nin + k](obj, handle, keep))
            if d.masked:
                values.append(reads[-1](where, handle, keep))
        for i, misaligned in d.alignment:
            if values[i] & misaligned:
                raise _misaligned(d, i, values[i])
        if outs is not None and d.pairs:
            keep += _read_before_write(values, d.pairs, handle, runtime)
        _launch(d.main, d.staging, values, handle, keep, d.name, runtime)
        if outs is None:  # (staging may have replaced their addresses in ``values``)
            return _wrapped(d.allocators, new)
        for k, _, dtype in d.host_outs:
            _copy_back(runtime, values[nin + k], outs[k], dtype, handle)
        return tuple(outs)


def _fast_executor(d: _Decisions) -> Executor:
    """The executor of calls whose operands are all device arrays and scalars: each is read
    with one attribute access or cast, and nothing else is decided per call.

    Per call it checks what the key does not hold: each device address's alignment (one ``&``
    per array) and, with ``out=``, whether an input overlaps an output (one chained comparison
    per pair, inline), where a copy of the input is read instead."""
    # Values taken as they are (scalars of the parameter's type) need no call: only the others
    # are read, in place in a copy of the operands (allocated outputs are never read).
    aligned = dict(d.alignment)
    reads = [(i, op.get, aligned.get(i, 0)) for i, op in enumerate(d.operands)
             if op.get is not None and op.get is not _same]
    first, others, launch_stream = d.streams.first, d.streams.others, d.streams.handle
    stream_of = d.streams.producers[0][1] if first is not None else None
    runtime, pairs = d.runtime, d.pairs
    bound, bind, launch = runtime.bound, runtime.bind_thread, d.main.launch
    # The floating-point check (see .fpflags): ``launch`` sends the kernels' flags to the unread
    # slot; where NumPy's error state may ask for them, ``reporting`` decides and reads them.
    flagged, reporting, errstate_now = d.main.takes_flags, _reporting_launch(d, runtime), fpflags.errstate_now
    allocators = d.allocators
    # One new output (every elementwise kernel) without the lists of _allocate and _wrapped's
    # generator: half a microsecond of a call of about ten.
    single_allocate, single_wrap = allocators[0] if len(allocators) == 1 else (None, None)
    # Each pair's overlap test as ``b + below < a < b + above`` (``a``, ``b``: the operands'
    # addresses): the spans' test, with the constants added once here and not on every call.
    tests = tuple((i, k, out_lo - hi, out_hi - lo, same) for i, k, lo, hi, out_lo, out_hi, same in pairs)

    def execute(inputs: tuple[Any, ...], outs: Any, where: Any, stream: Any) -> tuple[Any, ...]:
        if not hasattr(bound, "here"):
            bind()
        go = launch
        if flagged:  # fpflags.watched(), inline: the error state seen last, by identity
            seen = fpflags.seen
            if seen[0] is not errstate_now() or seen[1]:
                go = reporting
        objs = inputs if outs is None else inputs + outs if where is True else (*inputs, *outs, where)
        if stream is None and not others:
            handle = (stream_of(objs[first]) or 0) if stream_of is not None else 0
        else:
            handle = launch_stream(objs, stream)
        values = list(objs)
        for i, get, misaligned in reads:
            value = values[i] = get(values[i])
            if misaligned and value & misaligned:
                raise _misaligned(d, i, value)
        if outs is None:
            like = inputs[first] if first is not None else None
            if single_allocate is not None:
                raw, address = single_allocate(like, handle, stream is None)
                values.append(address)
                go(values, handle)
                return (raw,) if single_wrap is None else (single_wrap(raw, address),)
            new = _allocate(allocators, like, handle, stream is None, values)
            go(values, handle)
            return _wrapped(allocators, new)
        keep = None  # copies of inputs that overlap an output, alive until launched
        for i, k, below, above, same in tests:  # (inline: most calls overlap nothing)
            a, b = values[i], values[k]
            if b + below < a < b + above and not (same and a == b):
                keep = _read_before_write(values, pairs, handle, runtime)
                break
        go(values, handle)
        del keep
        return outs

    if allocators and first is not None and not others:
        execute.plain = _plain(d, reads, reporting)
    return execute


def _plain(d: _Decisions, reads: list[tuple[int, Callable[[Any], Any], int]],
           reporting: Callable[[list[Any], int], None]) -> Callable[..., Any]:
    """The commonest call, ``execute(args, None, True, None)`` of :func:`_fast_executor` as the
    resolved call returns it (its new output, or the tuple of several), run as the resolved
    call runs it (its four arguments: no ``out=``, ``where=`` nor ``stream=``) and without the
    general executor's branches, frame and lists (a small call is mostly such Python steps).
    Same steps, same checks."""
    first, stream_of = d.streams.first, d.streams.producers[0][1]
    bound, bind, launch = d.runtime.bound, d.runtime.bind_thread, d.main.launch
    flagged, errstate_now = d.main.takes_flags, fpflags.errstate_now
    (allocate, wrap), *more = d.allocators
    wraps = [w for _, w in d.allocators]

    def plain(args: tuple[Any, ...], out: Any, where: Any, kwargs: Any) -> Any:
        if not hasattr(bound, "here"):
            bind()
        go = launch
        if flagged:  # as in _fast_executor's execute
            seen = fpflags.seen
            if seen[0] is not errstate_now() or seen[1]:
                go = reporting
        like = args[first]
        handle = stream_of(like) or 0
        values = list(args)
        for i, get, misaligned in reads:
            value = values[i] = get(values[i])
            if misaligned and value & misaligned:
                raise _misaligned(d, i, value)
        raw, address = allocate(like, handle, True)
        values.append(address)
        if not more:
            go(values, handle)
            return raw if wrap is None else wrap(raw, address)
        new = [(raw, address)]
        for allocate_next, _ in more:  # kernels of several outputs: divmod, modf, frexp
            made = allocate_next(like, handle, True)
            values.append(made[1])
            new.append(made)
        go(values, handle)
        return tuple([r if w is None else w(r, a) for w, (r, a) in zip(wraps, new)])

    return plain


def _allocate(allocators: list[tuple[arrays.Allocate, Any]], like: Any, handle: int, current: bool,
              values: list[Any]) -> list[tuple[Any, int]]:
    """Memory for each new output: its address appended to the launch ``values``; returns the
    ``(raw, address)`` pairs that :func:`_wrapped` makes arrays of after the launch."""
    new = [allocate(like, handle, current) for allocate, _ in allocators]
    values += [address for _, address in new]
    return new


def _wrapped(allocators: list[tuple[Any, arrays.Wrap | None]],
             new: list[tuple[Any, int]]) -> tuple[Any, ...]:
    """The new outputs as arrays, made once their kernel is launched (see ``arrays.allocator``)."""
    return tuple(raw if wrap is None else wrap(raw, address)
                 for (_, wrap), (raw, address) in zip(allocators, new))


def _taken(obj: Any, handle: int, keep: list) -> Any:
    raise AssertionError("outputs are allocated, not read")  # pragma: no cover


#: An input (or the mask) and an output that may share memory: their value indices, the byte
#: spans ``[lo, hi)`` from their addresses, and whether, at one address, the input may be read
#: in place (the same layout, elementwise operands).
_Overlap = tuple[int, int, int, int, int, int, bool]


def _overlap_pairs(layouts: list[Layout], nin: int, nout: int) -> tuple[_Overlap, ...]:
    """Every (read operand, output) pair of non-empty arrays, whose overlap a call checks."""
    spans = [span(lay.shape, lay.strides, lay.dtype.itemsize) if lay.array else (0, 0)
             for lay in layouts]
    outs = [k for k in range(nin, nin + nout) if spans[k][0] < spans[k][1]]
    reads = [i for i in (*range(nin), *range(nin + nout, len(layouts))) if spans[i][0] < spans[i][1]]
    # Skipping the copy of an input that is its output element for element is safe only where
    # both are elementwise operands (no core dimensions): a core operand's element is read by
    # the thread of its loop index after others of its core elements are written, as NumPy's
    # iterator assumes (NPY_ITER_OVERLAP_ASSUME_ELEMENTWISE for operands without core dims).
    return tuple((i, k, *spans[i], *spans[k], layouts[i] == layouts[k] and not layouts[i].core)
                 for i in reads for k in outs)


def _read_before_write(values: list[Any], pairs: tuple[_Overlap, ...], handle: int,
                       runtime: Any) -> list[Any]:
    """Inputs (and the mask) that share memory with an output read from a copy of their bytes,
    unless they are that output element for element in an elementwise pair (``out=x`` on
    ``x``, see :func:`_overlap_pairs`): threads run in no
    fixed order, and NumPy's result is that of a call that reads before it writes. Returns the
    copies, which must stay alive until the launch."""
    keep = []
    for i, k, lo, hi, out_lo, out_hi, same in pairs:
        a, b = values[i], values[k]
        if a + lo < b + out_hi and b + out_lo < a + hi and not (same and a == b):
            # The copy is new memory: the later pairs of this operand no longer overlap.
            values[i], buffer = arrays.copy_span(a, lo, hi, runtime, runtime.stream(handle))
            keep.append(buffer)
    return keep


def _reporting_launch(d: _Decisions, runtime: Runtime) -> Callable[[list[Any], int], None]:
    """``d.main``'s launch where NumPy's error state may ask for its floating-point errors (see
    :mod:`.fpflags`): if :func:`.fpflags.watched`, launched with a flag slot of the call's own,
    read after waiting for the stream and reported; else as usual."""
    launch, launch_flagged = d.main.launch, d.main.launch_flagged

    def launch_reporting(values: list[Any], handle: int) -> None:
        if not watched():
            launch(values, handle)
            return
        ring, slot = _own_slot(runtime, values)
        launch_flagged(values, handle)
        _report_slot(ring, slot, runtime, handle, d.name)

    return launch_reporting


def _own_slot(runtime: Runtime, values: list[Any]) -> tuple[Any, int]:
    """A flag slot of the call's own on ``runtime``'s GPU, its address appended to ``values``
    (the last parameter of :attr:`.LaunchPlan.launch_flagged`): ``(ring, slot)``."""
    ring = runtime.flag_ring()
    slot, address = ring.take()
    values.append(address)
    return ring, slot


def _report_slot(ring: Any, slot: int, runtime: Runtime, handle: int, name: str) -> None:
    """Wait for the stream ``handle``, then report what the launches on it stored in ``slot``."""
    runtime.stream(handle).sync()
    status = ring.status(slot)
    if status:
        report(status, name)


def _launch(main: LaunchPlan, staging: list[_Staging], values: list[Any], handle: int, keep: list,
            name: str, runtime: Runtime) -> None:
    """The main launch, with staged core operands cast into and out of loop-dtype buffers; its
    floating-point errors reported after the last launch, where watched (see
    :func:`_reporting_launch`)."""
    slot, launch = None, main.launch
    if main.takes_flags and watched():
        ring, slot = _own_slot(runtime, values)
        launch = main.launch_flagged
    after = []
    for stage in staging:
        buffer, address = stage.allocate(None, handle, False)
        keep.append(buffer)
        if stage.before is not None:
            stage.before.launch([values[stage.index], address], handle)
        if stage.after is not None:
            after.append((stage.after, address, values[stage.index]))
        values[stage.index] = address
    launch(values, handle)
    for plan, address, target in after:
        plan.launch([address, target], handle)
    if slot is not None:
        _report_slot(ring, slot, runtime, handle, name)


def _copy_back(runtime: Any, address: int, host: np.ndarray, dtype: np.dtype, handle: int) -> None:
    """Copy a host ``out=``'s device buffer (of ``dtype``: native order) into it."""
    values = np.empty(host.shape, dtype)
    stream = runtime.stream(handle)
    runtime.copy(values.ctypes.data, address, values.nbytes, stream)
    stream.sync()
    copy_cast(host, values)
