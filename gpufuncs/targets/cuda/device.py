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
from typing import Any

import numpy as np

from ...spec import IDENTITY, KernelSpec
from ..base import DEVICE, HOST, Arg, Executor, Plan
from . import arrays
from .compile import CudaKernels
from .launch import LaunchPlan, Layout
from .runtime import get_runtime, same_stream

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
    cast = dtype.type

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
    if dtype == np.float64 or arg.cls is dtype.type or (arg.cls is float and not simulated):
        return _same
    return dtype.type


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
    if arg.role == DEVICE:
        return _device(arg, core)
    size = int(np.prod(arg.shape)) if arg.role == HOST else 1
    if not core and size == 1:
        return _Operand(_scalar_reader(loop), Layout.scalar(loop),
                        get=_scalar_getter(arg, loop, runtime.simulated))
    if arg.role != HOST:  # a scalar given for a core operand: a one-element array
        return _Operand(_host_reader(loop, runtime), Layout.contiguous(arg.shape, loop, core=core))
    dtype = loop if core else None  # core operands are used in place: the loop's dtype
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


def cast_plan(src: Layout, dst: Layout, device: int = 0) -> LaunchPlan:
    """A launch copying ``src`` into ``dst`` (same shape), converting the dtype on the way."""
    loop = np.dtype(np.float64) if np.float64 in (src.dtype, dst.dtype) else np.dtype(np.float32)
    plain = [Layout(op.dtype, op.shape, op.strides) for op in (src, dst)]
    return LaunchPlan(_identity_kernels(), loop, plain[:1], plain[1:], None, src.shape, device)


class _Staging:
    """A core operand of another dtype than the loop's, computed through a loop-dtype buffer."""

    def __init__(self, index: int, given: Layout, loop: np.dtype, is_input: bool, keep_values: bool,
                 device: int) -> None:
        self.index = index
        self.buffer = Layout.contiguous(given.shape, loop, core=given.core)
        self.allocate = arrays.buffer_allocator(math.prod(given.shape) * loop.itemsize, get_runtime(device))
        self.before = cast_plan(given, self.buffer, device) if is_input or keep_values else None
        self.after = None if is_input else cast_plan(self.buffer, given, device)


def prepare(spec: KernelSpec, kernels: CudaKernels, plan: Plan, device: int) -> Executor:
    """The executor of a call signature with at least one device array, all on ``device``
    (called with that device's context current)."""
    runtime = get_runtime(device)
    loop = plan.loop.dtype
    nin = spec.nin
    operands = [_input(a, c, loop, runtime) for a, c in zip(plan.inputs, plan.cores)]
    like = next((op.kind for op in operands if op.kind is not None), None)
    out_cores = plan.cores[nin:]

    allocators: list[tuple[arrays.Allocate, arrays.Wrap | None]] = []
    host_allocators: dict[int, arrays.Allocate] = {}  # by output index
    if plan.outs is None:
        first_layout = next((op.layout for op in operands if op.kind is not None), None)
        for shape, core in zip(plan.out_shapes, out_cores):
            axes = _output_axes(spec, plan, shape)
            layout = Layout.contiguous(shape, plan.result_dtype, axes, core)
            allocators.append(arrays.allocator(like, shape, plan.result_dtype, axes,
                                               like_layout=layout == first_layout, device=device))
            operands.append(_Operand(_taken, layout))
    else:
        for k, (o, core) in enumerate(zip(plan.outs, out_cores)):
            if o.role == DEVICE:
                operands.append(_device(o, core))
                like = like or operands[-1].kind
            else:  # a host out= with device inputs: computed on the device, copied back
                host_allocators[k] = arrays.buffer_allocator(math.prod(o.shape) * o.dtype.itemsize, runtime)
                operands.append(_Operand(_taken, Layout.contiguous(o.shape, o.dtype, core=core)))

    mask = plan.where if plan.outs is not None else None  # masked-out new outputs are undefined
    where_mode = None
    if mask is not None:
        if mask.role == DEVICE:
            where_mode = "device"
            operands.append(_device(mask, 0))
        elif int(np.prod(mask.shape)) == 1:
            where_mode = "scalar"  # True: no mask at all; False: nothing to write
            mask = None
        else:
            where_mode = "host"
            operands.append(_Operand(_host_reader(None, runtime), Layout.contiguous(mask.shape, mask.dtype)))

    staging = [_Staging(i, op.layout, loop, i < nin, mask is not None, device)
               for i, op in enumerate(operands[: nin + spec.nout])
               if op.layout.core and op.layout.array and op.layout.dtype != loop]
    if plan.result_dtype == HALF and mask is None and plan.outs is not None:
        # The float16 loop rounds its results to float16, also on their way into a wider out=.
        staging += [_Staging(nin + k, op.layout, HALF, False, False, device)
                    for k, op in enumerate(operands[nin: nin + spec.nout])
                    if op.layout.array and op.layout.dtype != HALF
                    and all(stage.index != nin + k for stage in staging)]
    layouts = [op.layout for op in operands]
    for stage in staging:
        layouts[stage.index] = stage.buffer
    nout = spec.nout
    main = LaunchPlan(kernels, loop, layouts[:nin], layouts[nin:nin + nout],
                      layouts[nin + nout] if mask is not None else None, plan.loop_shape, device)

    reads = [op.read for op in operands]
    kinds = [op.kind for op in operands]
    first = next((i for i, k in enumerate(kinds) if k is not None), None)
    producers = [(i, arrays.producer_stream(k, device)) for i, k in enumerate(kinds) if k is not None]
    # Without stream=, the call runs on the first array's stream; CuPy and torch arrays all
    # report their library's current stream, so only other kinds can need a wait.
    same = (arrays.CUPY, arrays.TORCH)
    others = [(i, p) for i, p in producers[1:] if not (kinds[i] == kinds[first] and kinds[i] in same)]
    pairs = _overlap_pairs([op.layout for op in operands], nin, nout)  # as given, not staged

    def launch_stream(objs: list[Any], stream: Any) -> int:
        """The stream to launch on, after making it wait for the other operands' streams."""
        if stream is not None:
            handle, check = arrays.stream_handle(stream), producers
        else:
            handle, check = (producers[0][1](objs[first]) or 0), others
        waited = []
        for i, producer in check:
            other = producer(objs[i])
            if other is None or other == handle:  # (most calls: one stream for every operand)
                continue
            if other not in waited and not same_stream(other, handle):
                runtime.stream(handle).wait(runtime.stream(other))  # their pending work first
                waited.append(other)
        return handle

    read_each_call = [op for op in operands if op.read is not _taken]
    plain = not staging and not host_allocators and where_mode != "scalar"
    if plain and all(op.get for op in read_each_call):
        return runtime.guarded(_fast_executor(main, operands, allocators, first, launch_stream, others,
                                              pairs, runtime))

    def execute(inputs: tuple[Any, ...], outs: Any, where: Any, stream: Any) -> tuple[Any, ...]:
        runtime.bind_thread()
        if where_mode == "scalar" and not np.asarray(where).reshape(())[()]:
            return tuple(outs)
        objs = [*inputs, *(outs or ()), *((where,) if mask is not None else ())]
        handle = launch_stream(objs, stream) if producers or stream is not None else 0
        keep: list[Any] = []
        values = [read(obj, handle, keep) for read, obj in zip(reads[:nin], objs)]
        if outs is None:
            like = inputs[first] if first is not None else None
            # stream is None: the handle is the first input's library's own stream
            new = _allocate(allocators, like, handle, stream is None, values)
        else:
            for k, obj in enumerate(outs):
                if k in host_allocators:
                    temp, address = host_allocators[k](None, handle, False)
                    keep.append(temp)
                    values.append(address)
                else:
                    values.append(reads[nin + k](obj, handle, keep))
            if mask is not None:
                values.append(reads[-1](where, handle, keep))
            if pairs:
                keep += _read_before_write(values, pairs, handle, runtime)
        _launch(main, staging, values, handle, keep)
        if outs is None:  # (staging may have replaced their addresses in ``values``)
            return _wrapped(allocators, new)
        for k in host_allocators:
            _copy_back(runtime, values[nin + k], outs[k], handle)
        return tuple(outs)

    return runtime.guarded(execute)


def _fast_executor(main: LaunchPlan, operands: list[_Operand], allocators: list[tuple[Any, Any]],
                   first: int | None, launch_stream: Callable, others: list,
                   pairs: tuple[_Overlap, ...], runtime: Any) -> Executor:
    """The executor of calls whose operands are all device arrays and scalars: each is read
    with one attribute access or cast, and nothing else is decided per call."""
    # Values taken as they are (scalars of the parameter's type) need no call: only the others
    # are read, in place in a copy of the operands (allocated outputs are never read).
    reads = [(i, op.get) for i, op in enumerate(operands) if op.get is not None and op.get is not _same]
    stream_of = arrays.producer_stream(operands[first].kind, runtime.ordinal) if first is not None else None
    bound, bind, launch = runtime.bound, runtime.bind_thread, main.launch
    # One new output (every elementwise kernel) without the lists of _allocate and _wrapped's
    # generator: half a microsecond of a call of about ten.
    single_allocate, single_wrap = allocators[0] if len(allocators) == 1 else (None, None)
    one_pair = pairs[0] if len(pairs) == 1 else None

    def execute(inputs: tuple[Any, ...], outs: Any, where: Any, stream: Any) -> tuple[Any, ...]:
        if not hasattr(bound, "here"):
            bind()
        objs = inputs if outs is None else inputs + outs if where is True else (*inputs, *outs, where)
        if stream is None and not others:
            handle = (stream_of(objs[first]) or 0) if stream_of is not None else 0
        else:
            handle = launch_stream(objs, stream)
        values = list(objs)
        for i, get in reads:
            values[i] = get(values[i])
        if outs is None:
            like = inputs[first] if first is not None else None
            if single_allocate is not None:
                raw, address = single_allocate(like, handle, stream is None)
                values.append(address)
                launch(values, handle)
                return (raw,) if single_wrap is None else (single_wrap(raw, address),)
            new = _allocate(allocators, like, handle, stream is None, values)
            launch(values, handle)
            return _wrapped(allocators, new)
        keep = None  # copies of inputs that overlap an output, alive until launched
        if one_pair is not None:  # (the check inline: most out= calls have one input array)
            i, k, lo, hi, out_lo, out_hi, same = one_pair
            a, b = values[i], values[k]
            if a + lo < b + out_hi and b + out_lo < a + hi and not (same and a == b):
                keep = _read_before_write(values, pairs, handle, runtime)
        elif pairs:
            keep = _read_before_write(values, pairs, handle, runtime)
        launch(values, handle)
        del keep
        return outs

    return execute


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
#: spans ``[lo, hi)`` from their addresses, and whether their layouts are the same.
_Overlap = tuple[int, int, int, int, int, int, bool]


def _overlap_pairs(layouts: list[Layout], nin: int, nout: int) -> tuple[_Overlap, ...]:
    """Every (read operand, output) pair of non-empty arrays, whose overlap a call checks."""
    spans = [arrays.span(lay.shape, lay.strides, lay.dtype.itemsize) if lay.array else (0, 0)
             for lay in layouts]
    outs = [k for k in range(nin, nin + nout) if spans[k][0] < spans[k][1]]
    reads = [i for i in (*range(nin), *range(nin + nout, len(layouts))) if spans[i][0] < spans[i][1]]
    return tuple((i, k, *spans[i], *spans[k], layouts[i] == layouts[k]) for i in reads for k in outs)


def _read_before_write(values: list[Any], pairs: tuple[_Overlap, ...], handle: int,
                       runtime: Any) -> list[Any]:
    """Inputs (and the mask) that share memory with an output read from a copy of their bytes,
    unless they are that output element for element (``out=x`` on ``x``): threads run in no
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


def _launch(main: LaunchPlan, staging: list[_Staging], values: list[Any], handle: int, keep: list) -> None:
    """The main launch, with staged core operands cast into and out of loop-dtype buffers."""
    after = []
    for stage in staging:
        buffer, address = stage.allocate(None, handle, False)
        keep.append(buffer)
        if stage.before is not None:
            stage.before.launch([values[stage.index], address], handle)
        if stage.after is not None:
            after.append((stage.after, address, values[stage.index]))
        values[stage.index] = address
    main.launch(values, handle)
    for plan, address, target in after:
        plan.launch([address, target], handle)


def _copy_back(runtime: Any, address: int, host: np.ndarray, handle: int) -> None:
    values = np.empty(host.shape, host.dtype)
    stream = runtime.stream(handle)
    runtime.copy(values.ctypes.data, address, values.nbytes, stream)
    stream.sync()
    np.copyto(host, values, casting="unsafe")
