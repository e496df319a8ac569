"""Flat loops: a kernel's scalar function applied over contiguous arrays, in a plain ``@njit`` loop.

NumPy's ufunc machinery (what Numba's ``@vectorize`` objects run on) hands its inner loop
arbitrary strides, passes broadcast scalars as stride-0 arrays and calls it once per buffer, so
LLVM cannot vectorize the loop well. For the common case, contiguous arrays of the loop's shape
and scalars, these loops instead receive 1-D arrays and scalars by value: the scalar function is
inlined and the loop vectorizes. Anything else goes through the Numba ufunc (see ``__init__``).

One loop body serves every arity: the arguments arrive as a tuple, and :func:`elements`, an
intrinsic typed for each call signature, turns it into the tuple of values at index ``i`` in one
step (no per-arity code, no generated source; :func:`flat` likewise makes every array 1-D). The
recursive overloads they replace compiled a small function per argument, 0.4 s of a new loop's
0.8 s (2 cores). The other helpers are recursive overloads left to LLVM's inliner, which inlines
them as it does any small function: Numba's own ``inline="always"`` re-types the recursion at
every call site, which made compiling a loop for a new call signature take 4x longer (6 s
against 1.5 s on 2 cores) for the same machine code.

A kernel that raises on a thread of a parallel loop cannot raise there: Numba sets the exception
on that thread (lost, or reported as a ``SystemError`` on the caller's). Each chunk instead runs
a copy of the serial loop that catches the exception in nopython mode and gives back the index
it stopped at (``try``/``except`` around the loop: a kernel that cannot raise has no exception
edges left once inlined, and its loop vectorizes as before). After the chunks, the loop runs the
kernel once more on the first element that failed, in order (the one a serial loop would have
stopped at: earlier chunks ran through, and nothing has written that element or its inputs),
with the serial loop, on the caller's thread: the kernel's own exception, type and message,
propagates as on ``cpu``.

Every loop clears the floating-point status before its elements and returns what it reads
after them (:mod:`.fpflags`); a parallel loop's chunks each read their own thread's status, and
the loop returns them OR-ed. The executors report a non-zero status through NumPy's
:func:`numpy.errstate` handling.
"""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Callable, Iterator
from typing import Any

import llvmlite.binding as llvm
import numba
import numpy as np
from llvmlite import ir
from numba import prange, types
from numba.core import cgutils, errors
from numba.core.compiler_lock import global_compiler_lock
from numba.extending import intrinsic, overload
from numba.np.arrayobj import populate_array

from . import cache
from .fpflags import STATUS_BITS, clear_status, read_status

#: The parallel loops cut their work into at most this many contiguous chunks (Numba hands each
#: thread a run of them; several per thread balance the load on up to 16 or so threads), of at
#: least :data:`MIN_CHUNK` elements (below that a chunk's start costs too much). Work of one
#: chunk runs on the caller's thread without entering a parallel region, whose start alone
#: (Numba waking its threads) cost more than the work: ``target="parallel"`` on 1,000 float64
#: values took 4.3 us against 1.95 on ``cpu`` (``gaussian``, 2-core machine, OpenMP layer).
MAX_CHUNKS = 64
MIN_CHUNK = 1 << 14


def _whole(a: Any) -> bool:
    """Whether a loop argument of type ``a`` is a core passed whole to every row: a generalized
    kernel's input that the executor gives as its core repeated, a stride of 0 between rows
    (the cpu target's ``_whole``), typed ``A`` where every other array is ``C``."""
    return a.layout == "A" and a.ndim > 1


def _as_type(context: Any, builder: Any, given: Any, made: Any, value: Any, flat: bool = False) -> Any:
    """``value``, an array of type ``given``, as type ``made``: the same data, item size and
    owner, and the same shape and strides (retyped: the caller knows the memory is laid out as
    ``made`` says) or, ``flat``, one dimension of every element (a C-contiguous array's). The
    reference is ``value``'s, taken over."""
    array = context.make_array(given)(context, builder, value)
    view = context.make_array(made)(context, builder)
    shape, strides = ([array.nitems], [array.itemsize]) if flat else (array.shape, array.strides)
    populate_array(view, data=array.data, shape=shape, strides=strides, itemsize=array.itemsize,
                   meminfo=array.meminfo, parent=array.parent)
    return view._getvalue()


@intrinsic
def elements(typingctx, args, i, casts):
    """The kernel's arguments at loop index ``i``: ``cast(a[i])`` of a 1-D array, the row
    ``a[i]`` of an array with core dimensions (its loop dtype already; a core passed whole to
    every row, see :func:`_whole`, as the C-ordered array it is), ``cast(a)`` of a scalar,
    with each argument's own ``cast`` (its type in the loop) from ``casts``.

    An intrinsic that builds the whole tuple: the recursive overload it replaces compiled a
    function per argument (see the module docstring)."""
    steps = []  # per argument: (getitem signature or None, value type, type in the loop)
    for a, c in zip(args.types, casts.types):
        if isinstance(a, types.Array):
            got = typingctx.resolve_function_type(operator.getitem, (a, i), {})
            row = got.return_type
            steps.append((got, row, c.instance_type if a.ndim == 1 else
                          row.copy(layout="C") if _whole(a) else row))
        else:
            steps.append((None, a, c.instance_type))

    def codegen(context, builder, sig, llargs):
        tuple_value, index = llargs[0], llargs[1]
        values = []
        for k, (got, value_type, loop_type) in enumerate(steps):
            value = builder.extract_value(tuple_value, k)
            if got is not None:  # (a row's view comes back a new reference, as the tuple's)
                value = context.get_function(operator.getitem, got)(builder, (value, index))
            if isinstance(value_type, types.Array) and value_type.layout != loop_type.layout:
                values.append(_as_type(context, builder, value_type, loop_type, value))
            else:
                values.append(context.cast(builder, value, value_type, loop_type))
        return context.make_tuple(builder, sig.return_type, values)

    return types.Tuple([loop_type for _, _, loop_type in steps])(args, i, casts), codegen


def _flat_view(context: Any, builder: Any, given: Any, made: Any, value: Any) -> Any:
    """The 1-D view ``made`` of the C-contiguous array ``value`` of type ``given``, a new
    reference (it shares the array's memory and owner)."""
    view = _as_type(context, builder, given, made, value, flat=True)
    context.nrt.incref(builder, made, view)
    return view


@intrinsic
def flat(typingctx, args):
    """The 1-D view of an array, or the tuple ``args`` with every array as its 1-D view (``None``
    as it is); one intrinsic for the tuple, as :func:`elements`. The arrays must be typed
    C-contiguous (the view is made from the pointer and the size alone): the executors key the
    layout, and any other layout is refused here."""
    if isinstance(args, types.NoneType):
        return args(args), lambda context, builder, sig, llargs: llargs[0]
    given = [args] if isinstance(args, types.Array) else list(args.types)
    if any(isinstance(a, types.Array) and a.layout != "C" for a in given):
        raise errors.TypingError(f"flat: arrays must be C-contiguous, got {args}")
    flats = [a.copy(ndim=1, layout="C") if isinstance(a, types.Array) else a for a in given]
    if isinstance(args, types.Array):
        return flats[0](args), lambda context, builder, sig, llargs: _flat_view(
            context, builder, args, flats[0], llargs[0])

    def codegen(context, builder, sig, llargs):
        values = []
        for k, (one, made) in enumerate(zip(given, flats)):
            value = builder.extract_value(llargs[0], k)
            if isinstance(one, types.Array):
                value = _flat_view(context, builder, one, made, value)
            else:
                context.nrt.incref(builder, made, value)  # (the tuple returned is a new reference)
            values.append(value)
        return context.make_tuple(builder, sig.return_type, values)

    return types.Tuple(flats)(args), codegen


@intrinsic
def sliced(typingctx, args, lo, hi):
    """The arguments with every array cut to its rows ``lo:hi`` (scalars as they are); one
    intrinsic for the tuple, as :func:`elements`."""
    cuts = [typingctx.resolve_function_type(operator.getitem, (a, types.slice2_type), {})
            if isinstance(a, types.Array) else None for a in args.types]

    def codegen(context, builder, sig, llargs):
        bounds = context.make_helper(builder, types.slice2_type)
        bounds.start = context.cast(builder, llargs[1], sig.args[1], types.intp)
        bounds.stop = context.cast(builder, llargs[2], sig.args[2], types.intp)
        bounds.step = context.get_constant(types.intp, 1)
        values = []
        for k, (given, cut) in enumerate(zip(args.types, cuts)):
            value = builder.extract_value(llargs[0], k)
            if cut is None:
                context.nrt.incref(builder, given, value)
            else:  # (the view comes back a new reference, as the tuple's)
                value = context.get_function(operator.getitem, cut)(builder, (value, bounds._getvalue()))
            values.append(value)
        return context.make_tuple(builder, sig.return_type, values)

    made = [a if cut is None else cut.return_type for a, cut in zip(args.types, cuts)]
    return types.Tuple(made)(args, lo, hi), codegen


def row_size(args: tuple[Any, ...], n: int) -> int:
    """The most elements per row of any array of ``args`` (arrays of ``n`` rows; scalars 0)."""
    return max([a.size // max(1, n) for a in args if getattr(a, "ndim", 0)], default=0)


@overload(row_size)
def _row_size_typing(args, n):
    if len(args) == 0:
        return lambda args, n: 0
    if isinstance(args[0], types.Array):
        return lambda args, n: max(args[0].size // max(1, n), row_size(args[1:], n))
    return lambda args, n: row_size(args[1:], n)


# Not cached on its own (the loops that call it are, with its code): ``cache=True`` would make
# importing gpufuncs fail where no cache directory is writable.
@numba.njit(nogil=True)
def chunks(rows: int, row_size: int) -> int:
    """How many contiguous chunks the parallel loops cut ``rows`` rows into (a constant bound,
    not Numba's thread count: reading that makes a function uncacheable)."""
    per_chunk = max(1, MIN_CHUNK // max(1, row_size))
    return max(1, min(MAX_CHUNKS, rows // per_chunk))


@numba.njit(nogil=True)
def combined(status: Any, failed: int) -> int:
    """The parallel loops' result: every chunk's floating-point status (OR-ed, below bit
    :data:`.fpflags.STATUS_BITS`) and, above it, 1 + the element that raised nothing when run
    again (0: none; see :func:`ufunc_loops`)."""
    flags = 0
    for s in status:
        flags |= s
    return flags | ((failed + 1) << STATUS_BITS)


@numba.njit(nogil=True)
def first_failure(failed: Any) -> int:
    """The first loop index in ``failed`` (one per chunk, in order; ``-1``: the chunk ran)."""
    for j in failed:
        if j >= 0:
            return j
    return -1


@intrinsic
def rows(typingctx, outs, i):
    """Row ``i`` of every gufunc output (a view the scalar function writes into); one
    intrinsic for the tuple, as :func:`elements`."""
    picks = [typingctx.resolve_function_type(operator.getitem, (o, i), {}) for o in outs.types]

    def codegen(context, builder, sig, llargs):
        values = [context.get_function(operator.getitem, pick)(  # (new references, as the tuple)
            builder, (builder.extract_value(llargs[0], k), llargs[1])) for k, pick in enumerate(picks)]
        return context.make_tuple(builder, sig.return_type, values)

    return types.Tuple([pick.return_type for pick in picks])(outs, i), codegen


@intrinsic
def wide_vectors(typingctx: Any) -> Any:
    """Let LLVM vectorize the calling function's loops with 512-bit vectors where the CPU has
    AVX-512 (``"prefer-vector-width"="512"``, clang's ``-mprefer-vector-width=512``).

    LLVM's tuning for Intel's AVX-512 CPUs prefers 256-bit vectors, for the clock speed that
    early ones (Skylake-SP) lost on 512-bit instructions; NumPy's own loops use 512. On the
    2-core Xeon a flat loop of ``exp`` float64 took 0.96 ms per 10**6 with it, 1.25 ms without,
    same bits. Elsewhere the attribute changes nothing (x86 without AVX-512: 256 stays the
    widest; other CPUs ignore it). llvmlite knows no string attributes, so the function's
    attribute set (written verbatim into the IR Numba parses) gets it directly; a llvmlite
    without that set leaves the width to LLVM."""

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        attributes = getattr(builder.function, "attributes", None)
        if isinstance(attributes, set):
            set.add(attributes, '"prefer-vector-width"="512"')
        return context.get_dummy_value()

    return types.none(), codegen


@intrinsic
def scratch(typingctx: Any, size: Any, kind: Any) -> Any:
    """``np.empty(size, kind)`` on the calling function's stack: a literal ``size``, a NumPy
    scalar type ``kind``, uninitialized. For a host reduction kernel's running values, which
    it keeps per row of its core: ``np.empty`` allocates and frees on the heap per row, about
    180 ns of a row of 10 float64 values summed with the lanes (NumPy: 14 ns). The array must
    not outlive the function that makes it (the kernels' never leave their body)."""
    if not isinstance(size, types.IntegerLiteral) or not isinstance(kind, types.NumberClass):
        return None
    count, dtype = size.literal_value, kind.dtype
    array = types.Array(dtype, 1, "C")

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        item = context.get_data_type(dtype)
        data = cgutils.alloca_once(builder, item, size=count)  # (in the entry block: once)
        data.align = 64  # a cache line: a vector load or store of it never spans two
        intp = context.get_value_type(types.intp)
        itemsize = context.get_abi_sizeof(item)
        result = context.make_array(array)(context, builder)
        populate_array(result, data=data, shape=[intp(count)], strides=[intp(itemsize)],
                       itemsize=intp(itemsize), meminfo=None)
        return result._getvalue()

    return array(size, kind), codegen


@intrinsic
def scratch_from(typingctx: Any, array: Any, start: Any) -> Any:
    """``array[start:]`` of a :func:`scratch` array (``0 <= start <= len(array)``, unchecked),
    without a slice's index arithmetic: a few instructions, where the slice was most of the
    bookkeeping of a row of 10 values summed."""
    if not (isinstance(array, types.Array) and array.ndim == 1 and array.layout == "C"
            and isinstance(start, types.Integer)):
        return None

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        buffer = context.make_array(array)(context, builder, args[0])
        first = context.cast(builder, args[1], start, types.intp)  # (signed or not, any width)
        view = context.make_array(array)(context, builder)
        populate_array(view, data=builder.gep(buffer.data, [first]),
                       shape=[builder.sub(builder.extract_value(buffer.shape, 0), first)],
                       strides=[builder.extract_value(buffer.strides, 0)], itemsize=buffer.itemsize,
                       meminfo=None)
        return view._getvalue()

    return array(array, start), codegen


@intrinsic
def prefetch(typingctx: Any, array: Any, index: Any) -> Any:
    """Ask the CPU to bring ``array[index]`` into its caches (``index`` an integer, or a tuple
    of one per dimension): LLVM's ``llvm.prefetch``, a hint that never faults, also past the
    array's end (the index is not checked, nor wrapped around)."""
    if not isinstance(array, types.Array):
        return None
    kinds = (index,) if array.ndim == 1 else tuple(index) if isinstance(index, types.BaseTuple) else ()
    if len(kinds) != array.ndim or not all(isinstance(k, types.Integer) for k in kinds):
        return None

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        at = [args[1]] if array.ndim == 1 else cgutils.unpack_tuple(builder, args[1], array.ndim)
        at = [context.cast(builder, i, kind, types.intp) for i, kind in zip(at, kinds)]
        values = context.make_array(array)(context, builder, args[0])
        item = cgutils.get_item_pointer(context, builder, array, values, at, wraparound=False)
        byte, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
        kind = ir.FunctionType(ir.VoidType(), [byte, i32, i32, i32])
        hint = cgutils.get_or_insert_function(builder.module, kind, "llvm.prefetch.p0")
        builder.call(hint, [builder.bitcast(item, byte), i32(0), i32(3), i32(1)])  # (read, keep, data)
        return context.get_dummy_value()

    return types.none(array, index), codegen


@intrinsic
def default_vectors(typingctx: Any) -> Any:
    """Leave the vector width to LLVM's tuning (see :func:`wide_vectors`)."""
    return types.none(), lambda context, builder, sig, args: context.get_dummy_value()


#: From this many elements the elementwise loops use 512-bit vectors (:func:`wide_vectors`).
#: Below, 256-bit ones: a loop runs its vectors 4 or more at a time and the remainder one
#: element after the other, and on a 512-bit loop of 10 float64 elements that remainder is
#: all of it (exp at n = 10: 70 ns more per call, about 6%).
WIDE_MIN = 1024


#: Vector iterations each flat loop interleaves (see :func:`interleaved`).
INTERLEAVE = 4


@contextlib.contextmanager
def interleaved(on: bool = True) -> Iterator[None]:
    """Compile the loops of the block with :data:`INTERLEAVE` vector iterations in flight
    (LLVM's ``-force-vector-interleave``); ``on=False``: as LLVM chooses.

    LLVM's cost model runs a loop whose body is long, such as a fused function's
    ``np.log(gaussian(x, mu, s))``, one vector iteration at a time, for its register pressure;
    each iteration's chain of dependent operations (an ``exp``, a division, a ``log``) then runs
    alone, and the loop waits on its latency. Four in flight, at 10^5 float32 on one core of
    the 2-core machine: the fused log-likelihood 122 -> 72 us, the fused chain 74 -> 49 us,
    ``gaussian`` 48 -> 34 us, ``exp`` 17.8 -> 14.1 us; calls below 10^3 elements as before
    (within the noise). The same instructions
    per element in the same order, so the same bits (a float reduction's order is its
    accumulator lanes', which interleaving does not change: Numba compiles without ``reassoc``).

    For the loops alone: an elementwise kernel's scalar function, compiled with it before it
    is inlined into them, made their loop as slow as before (``gaussian`` 34 -> 48 us again);
    a gufunc's scalar function holds its loops, and is compiled with it.

    The option is process-wide: it is set under Numba's compiler lock, so that no other
    compilation sees it, and put back to 0 (the cost model's choice) after."""
    if not on:
        yield
        return
    with global_compiler_lock:
        llvm.set_option("", f"-force-vector-interleave={INTERLEAVE}")
        try:
            yield
        finally:
            llvm.set_option("", "-force-vector-interleave=0")


def options() -> dict[str, Any]:
    """Compile options shared by every CPU loop and scalar function.

    No fastmath (NaN and inf follow IEEE rules) and NumPy's error model (``1/0`` is inf, not an
    exception); ``nogil`` so that threads calling kernels run at once.
    """
    return {"nogil": True, "error_model": "numpy"}


def inline_into_loops(scalar: Any, argtypes: tuple[Any, ...], holds_loops: bool = False) -> None:
    """Compile the scalar function for ``argtypes`` (:func:`interleaved` where it
    ``holds_loops``: a gufunc's) and mark it ``alwaysinline``.

    A loop vectorizes only with the scalar function inlined into it, and LLVM's inliner gives
    up on bodies above its size threshold: a kernel calling two vector-math functions (each
    inlined into the kernel first) is already too big. A gufunc's loop does not vectorize, but
    a call per row, its row views passed as array structures, costs about 7 ns (hermite_norm
    with 32 orders: 20% of its time on one core). Numba has no option for this, so the
    attribute is set on the compiled function (a private part of Numba's code library) before
    any loop links it in; where that fails, the loops still run, as calls.
    """
    with interleaved(holds_loops):
        scalar.compile(argtypes)
    result = scalar.overloads[argtypes]
    try:
        module = result.library._final_module
        module.get_function(result.fndesc.llvm_func_name).add_function_attribute("alwaysinline")
    except (AttributeError, NameError):  # pragma: no cover - a Numba without these internals
        pass


#: Status codes of Numba's calling convention that do not mean an exception: a value, ``None``.
_NO_EXCEPTION = (0, -2)


def may_raise(scalar: Any, argtypes: tuple[Any, ...], holds_loops: bool = False) -> bool:
    """Whether the scalar function compiled for ``argtypes`` (as :func:`inline_into_loops`
    compiles it) can raise (conservatively ``True``).

    Numba returns a status code from every compiled function, non-zero for an exception (the
    kernel's own, or one propagated from a function it calls). The question is answered from
    the optimized code: a function that returns a constant "no exception" status on every
    ``ret`` cannot raise, whatever its source says (``1 / x`` under NumPy's error model, for
    instance, is compiled without a raise).
    """
    with interleaved(holds_loops):
        scalar.compile(argtypes)
    result = scalar.overloads[argtypes]
    try:
        function = result.library.get_function(result.fndesc.llvm_func_name)
        statuses = [next(iter(i.operands)) for b in function.blocks for i in b.instructions
                    if i.opcode == "ret"]
        return not all(s.is_constant and s.get_constant_value() in _NO_EXCEPTION for s in statuses)
    except (AttributeError, NameError, StopIteration, ValueError):  # pragma: no cover - internals
        return True


def _jit(func: Callable[..., Any], key: str | None, before_compile: Callable[[], None] | None = None,
         **extra: Any) -> Any:
    dispatcher = numba.njit(**options(), **extra)(func)
    return dispatcher if key is None else cache.attach(dispatcher, key, before_compile)


def ufunc_loops(scalar: Callable[..., Any], cast: tuple[Any, ...], key: str | None,
                wide: bool = True, raising: bool = True,
                before_compile: Callable[[], None] | None = None) -> tuple[Any, Any, Any]:
    """``(loop, masked, parallel)`` dispatchers of an elementwise kernel whose inputs are cast
    to ``cast`` (a type per input),
    vectorized with 512-bit vectors where the CPU has them (``wide``; see :data:`WIDE_MIN`).

    ``loop(out, *args)`` writes ``out[i] = f(*args at i)`` (storing casts to ``out``'s dtype),
    ``masked(out, where, *args)`` only where ``where[i]``, ``parallel(out, *args)`` the same as
    ``loop`` over a few contiguous chunks per thread, each chunk running the serial loop (so it
    vectorizes the same way). Arrays are C-contiguous of the output's shape (any number of
    dimensions: the loops see them flat). ``key`` keys their disk cache (``None``: none).

    Each returns the floating-point status its run raised (see :mod:`.fpflags`; on
    ``parallel``, every chunk's, read on its thread). ``parallel`` raises the kernel's exception
    from the first element that raised (see the module docstring); if running that element
    again raised nothing (a kernel whose result is not a function of its arguments), it
    returns 1 + its index as well, above the status (see :func:`combined`). Where the scalar
    function cannot raise (``raising`` false: see :func:`may_raise`), its chunks run the serial
    loop itself: one loop less to compile for each new call signature.

    ``before_compile`` runs before a loop is compiled rather than loaded from the disk cache
    (:func:`.cache.attach`; the caller runs it itself for loops without a cache): a loop
    loaded from the disk needs nothing compiled in the process, not even the scalar function.
    """
    vectors = wide_vectors if wide else default_vectors
    key = key if key is None or wide else f"{key}:narrow"

    def jit(func: Callable[..., Any], **extra: Any) -> Any:
        return _jit(func, key, before_compile, **extra)

    # The loop itself, flattening its arrays first: one function to compile for a new call
    # signature (a wrapper that flattened and called it cost a second round of LLVM's
    # optimization and code generation over the inlined body, 0.2 s of a fused chain's first
    # call on 2 cores). The parallel loops' chunks run it on their 1-D slices.
    def body(out, *args):
        vectors()
        clear_status()
        out, args = flat(out), flat(args)
        for i in range(out.size):
            out[i] = scalar(*elements(args, i, cast))
        return read_status()

    serial = jit(body)

    def masked(out, where, *args):
        vectors()
        clear_status()
        out, where, args = flat(out), flat(where), flat(args)
        for i in range(out.size):
            if where[i]:
                out[i] = scalar(*elements(args, i, cast))
        return read_status()

    def parallel_plain(out, *args):
        out, args = flat(out), flat(args)
        n = out.size
        pieces = chunks(n, 1)
        if pieces == 1:  # (see MAX_CHUNKS)
            return serial(out[0:n], *sliced(args, 0, n))
        status = np.zeros(pieces, np.int64)
        for c in prange(pieces):
            lo, hi = c * n // pieces, (c + 1) * n // pieces
            status[c] = serial(out[lo:hi], *sliced(args, lo, hi))
        return combined(status, -1)

    if not raising:
        return serial, jit(masked), jit(parallel_plain, parallel=True)

    def guarded_body(out, *args):
        vectors()
        clear_status()
        i = 0
        try:
            for i in range(out.size):
                out[i] = scalar(*elements(args, i, cast))
        except Exception:  # raised again on the caller's thread: see the module docstring
            return i, 0
        return -1, read_status()

    guarded = jit(guarded_body)

    def parallel(out, *args):
        out, args = flat(out), flat(args)
        n = out.size
        pieces = chunks(n, 1)
        if pieces == 1:  # (see MAX_CHUNKS; the kernel's exception raised on this thread)
            return serial(out[0:n], *sliced(args, 0, n))
        failed = np.empty(pieces, np.int64)
        status = np.zeros(pieces, np.int64)
        for c in prange(pieces):
            lo, hi = c * n // pieces, (c + 1) * n // pieces
            i, flags = guarded(out[lo:hi], *sliced(args, lo, hi))
            status[c] = flags
            failed[c] = i if i < 0 else lo + i
        j = first_failure(failed)
        if j >= 0:
            serial(out[j:j + 1], *sliced(args, j, j + 1))
        return combined(status, j)

    return serial, jit(masked), jit(parallel, parallel=True)


def gufunc_loops(scalar: Callable[..., Any], cast: tuple[Any, ...], key: str | None,
                 raising: bool = True,
                 before_compile: Callable[[], None] | None = None) -> tuple[Any, Any, Any]:
    """``(loop, masked, parallel)`` dispatchers of a generalized kernel whose inputs are cast to
    ``cast`` (a type per input).

    ``loop(outs, *args)`` calls ``f(*args at i, *rows of outs at i)`` for every row ``i`` of the
    outputs (arrays of shape ``(n, *core)``; a ``()`` output is ``(n, 1)``, as Numba passes it);
    ``masked(outs, where, *args)`` only for the rows where ``where[i]``; ``parallel`` runs the
    loop over contiguous chunks of rows, a few per thread, and raises or returns as
    :func:`ufunc_loops`' does (running the serial loop itself where nothing can raise), and
    runs ``before_compile`` as :func:`ufunc_loops`' do. The loops ask for 512-bit vectors
    (:func:`wide_vectors`) at any size: under LLVM's tuning for Intel's AVX-512 CPUs,
    ``hermite_norm`` of 10^5 samples and 32 orders took 1.9x as long without them.
    """

    def jit(func: Callable[..., Any], **extra: Any) -> Any:
        return _jit(func, key, before_compile, **extra)

    def body(outs, *args):
        wide_vectors()
        clear_status()
        for i in range(outs[0].shape[0]):
            scalar(*(elements(args, i, cast) + rows(outs, i)))
        return read_status()

    def masked(outs, where, *args):
        wide_vectors()
        clear_status()
        where = flat(where)
        for i in range(outs[0].shape[0]):
            if where[i]:
                scalar(*(elements(args, i, cast) + rows(outs, i)))
        return read_status()

    def guarded_body(outs, *args):
        wide_vectors()
        clear_status()
        i = 0
        try:
            for i in range(outs[0].shape[0]):
                scalar(*(elements(args, i, cast) + rows(outs, i)))
        except Exception:  # raised again on the caller's thread: see the module docstring
            return i, 0
        return -1, read_status()

    serial, guarded = jit(body), jit(guarded_body)

    def parallel_plain(outs, *args):
        n = outs[0].shape[0]
        pieces = chunks(n, max(outs[0].size // max(1, n), row_size(args, n)))  # work per row
        if pieces == 1:  # (see MAX_CHUNKS)
            return serial(sliced(outs, 0, n), *sliced(args, 0, n))
        status = np.zeros(pieces, np.int64)
        for c in prange(pieces):
            lo, hi = c * n // pieces, (c + 1) * n // pieces
            status[c] = serial(sliced(outs, lo, hi), *sliced(args, lo, hi))
        return combined(status, -1)

    if not raising:
        return serial, jit(masked), jit(parallel_plain, parallel=True)

    def parallel(outs, *args):
        n = outs[0].shape[0]
        pieces = chunks(n, max(outs[0].size // max(1, n), row_size(args, n)))  # work per row
        if pieces == 1:  # (see MAX_CHUNKS; the kernel's exception raised on this thread)
            return serial(sliced(outs, 0, n), *sliced(args, 0, n))
        failed = np.empty(pieces, np.int64)
        status = np.zeros(pieces, np.int64)
        for c in prange(pieces):
            lo, hi = c * n // pieces, (c + 1) * n // pieces
            i, flags = guarded(sliced(outs, lo, hi), *sliced(args, lo, hi))
            status[c] = flags
            failed[c] = i if i < 0 else lo + i
        j = first_failure(failed)
        if j >= 0:
            serial(sliced(outs, j, j + 1), *sliced(args, j, j + 1))
        return combined(status, j)

    return serial, jit(masked), jit(parallel, parallel=True)


# -- rows loops: broadcast and strided calls ---------------------------------------------------------
#: Elements of a row a rows loop computes at a time: the scratch a strided operand is copied
#: into (16 bytes an element at most) stays in the first-level cache.
STAGE = 1 << 10
_SLOT = STAGE * 16


def _address(context: Any, builder: Any, array_type: Any, value: Any) -> Any:
    """The address of an array's first element, as an integer."""
    return builder.ptrtoint(context.make_array(array_type)(context, builder, value).data, ir.IntType(64))


def _contiguous(context: Any, builder: Any, dtype: Any, address: Any, count: Any) -> Any:
    """A 1-D C-contiguous array of ``count`` elements of ``dtype`` at ``address`` (memory the
    caller keeps alive: no reference counting)."""
    row = types.Array(dtype, 1, "C", aligned=False)
    view = context.make_array(row)(context, builder)
    data_type = context.get_data_type(dtype)
    item = context.get_constant(types.intp, context.get_abi_sizeof(data_type))
    populate_array(view, data=builder.inttoptr(address, data_type.as_pointer()), shape=[count],
                   strides=[item], itemsize=item, meminfo=None)
    return view._getvalue()


def _copy(context: Any, builder: Any, dtype: Any, source: Any, step: Any, target: Any, target_step: Any,
          count: Any) -> None:
    """Copy ``count`` elements of ``dtype`` from ``source`` (``step`` bytes apart) to
    ``target`` (``target_step`` bytes apart): addresses as integers, bytes as they are. Where
    ``step`` is 0 (a value broadcast along the row), the value is read once and stored
    ``count`` times (a loop LLVM vectorizes)."""
    bytes_type = ir.IntType(8).as_pointer()
    pointer = context.get_data_type(dtype).as_pointer()
    source_bytes, target_bytes = builder.inttoptr(source, bytes_type), builder.inttoptr(target, bytes_type)

    def at(base: Any, index: Any, stride: Any) -> Any:
        return builder.bitcast(builder.gep(base, [builder.mul(index, stride)]), pointer)

    with builder.if_else(builder.icmp_signed("==", step, step.type(0))) as (repeated, other):
        with repeated:
            value = builder.load(builder.bitcast(source_bytes, pointer), align=1)
            with cgutils.for_range(builder, count) as loop:
                builder.store(value, at(target_bytes, loop.index, target_step), align=1)
        with other:
            with cgutils.for_range(builder, count) as loop:
                value = builder.load(at(source_bytes, loop.index, step), align=1)
                builder.store(value, at(target_bytes, loop.index, target_step), align=1)


def _piece_bounds(context: Any, builder: Any, sig: Any, llargs: Any) -> tuple[Any, ...]:
    """:func:`staged`'s ``(at, steps, start, count)`` as LLVM values (``at``, ``steps``: the
    arrays' data pointers)."""
    at, steps, start, stop = llargs[1:5]
    start = context.cast(builder, start, sig.args[3], types.intp)
    stop = context.cast(builder, stop, sig.args[4], types.intp)
    return (context.make_array(sig.args[1])(context, builder, at).data,
            context.make_array(sig.args[2])(context, builder, steps).data, start, builder.sub(stop, start))


def _operand(builder: Any, at: Any, steps: Any, base: Any, k: int, start: Any) -> tuple[Any, Any]:
    """Operand ``k``'s address of element ``start`` of the current row, and its step."""
    index = ir.Constant(ir.IntType(64), k)
    step = builder.load(builder.gep(steps, [index]))
    row = builder.add(base, builder.load(builder.gep(at, [index])))
    return builder.add(row, builder.mul(start, step)), step


@intrinsic
def staged(typingctx, args, at, steps, start, stop, scratch):
    """Elements ``start:stop`` of the current row of each argument of a rows loop: an array's
    as a contiguous 1-D view, in place where its step along the row (``steps[k]`` bytes) is its
    itemsize, else copied into slot ``k`` of ``scratch`` (bytes, :data:`_SLOT` a slot; a step
    of 0 repeats one value); scalars as they are. The row of array ``k`` starts ``at[k]`` bytes
    from its first element. Every array comes back contiguous, whatever the layout: the piece's
    loop vectorizes as a flat loop does, and one loop serves every layout."""
    made = [types.Array(a.dtype, 1, "C", aligned=False) if isinstance(a, types.Array) else a
            for a in args.types]

    def codegen(context, builder, sig, llargs):
        at_data, steps_data, lo, count = _piece_bounds(context, builder, sig, llargs)
        slots = _address(context, builder, sig.args[5], llargs[5])
        values = []
        for k, a in enumerate(args.types):
            value = builder.extract_value(llargs[0], k)
            if not isinstance(a, types.Array):
                context.nrt.incref(builder, a, value)  # (the tuple is a new reference)
                values.append(value)
                continue
            item = context.get_constant(types.intp, context.get_abi_sizeof(context.get_data_type(a.dtype)))
            source, step = _operand(builder, at_data, steps_data, _address(context, builder, a, value), k, lo)
            slot = builder.add(slots, context.get_constant(types.intp, k * _SLOT))
            in_place = builder.icmp_signed("==", step, item)
            with builder.if_then(builder.not_(in_place)):
                _copy(context, builder, a.dtype, source, step, slot, item, count)
            piece = builder.select(in_place, source, slot)
            values.append(_contiguous(context, builder, a.dtype, piece, count))
        return context.make_tuple(builder, sig.return_type, values)

    return types.Tuple(made)(args, at, steps, start, stop, scratch), codegen


@intrinsic
def contiguous_at(typingctx, address, count, like):
    """A 1-D C-contiguous view of ``count`` elements of ``like``'s dtype at ``address`` (an
    integer; memory the caller keeps alive)."""
    def codegen(context, builder, sig, llargs):
        address_value = context.cast(builder, llargs[0], sig.args[0], types.intp)
        count_value = context.cast(builder, llargs[1], sig.args[1], types.intp)
        return _contiguous(context, builder, like.dtype, address_value, count_value)

    return types.Array(like.dtype, 1, "C", aligned=False)(address, count, like), codegen


@intrinsic
def copy_strided(typingctx, source, step, target, target_step, count, like):
    """Copy ``count`` elements of ``like``'s dtype from address ``source`` (``step`` bytes
    apart) to ``target`` (``target_step`` bytes apart)."""
    def codegen(context, builder, sig, llargs):
        values = [context.cast(builder, v, t, types.intp) for v, t in zip(llargs[:5], sig.args[:5])]
        _copy(context, builder, like.dtype, *values[:4], values[4])
        return context.get_dummy_value()

    return types.none(source, step, target, target_step, count, like), codegen


@intrinsic
def address_of(typingctx, array):
    """The address of ``array``'s first element, as a signed integer (arithmetic with the
    loops' byte offsets stays integral)."""
    def codegen(context: Any, builder: Any, sig: Any, llargs: Any) -> Any:
        return _address(context, builder, array, llargs[0])

    return types.intp(array), codegen


@numba.njit(nogil=True)
def _pieces(size: int, shape: Any) -> int:
    """How many pieces of :data:`STAGE` elements ``size`` elements of rows of ``shape[-1]`` make."""
    width = shape[shape.size - 1]
    return size // width * ((width + STAGE - 1) // STAGE)


def rows_loops(scalar: Callable[..., Any], cast: tuple[Any, ...], key: str | None, wide: bool = True,
               before_compile: Callable[[], None] | None = None) -> tuple[Any, Any]:
    """``(serial, parallel)`` loops of an elementwise kernel over operands of any layout: arrays
    that broadcast (``x[:, None]`` against ``mu``), columns of a matrix, stepped and reversed
    views, a strided ``out``. NumPy's ufunc machinery hands Numba's loop such operands with
    steps of 0 or of any size, one inner loop at a time, a loop LLVM does not vectorize (5x to
    7x the flat loop's time for ``gaussian``).

    ``serial(out, shape, offsets, steps, *args)`` computes the loop's elements as rows: the
    loop's shape is ``shape`` (the dimensions every operand steps through evenly merged, see
    :func:`.base.collapse`), a row runs along its last dimension. Operand ``k`` (the inputs,
    then ``out``) steps ``offsets[d, k]`` bytes along each other dimension ``d`` and
    ``steps[k]`` along a row. A row runs in pieces of :data:`STAGE` elements, each operand's
    contiguous (:func:`staged`): in place where it is, else copied into scratch first (an
    output: computed there, stored after), so that one loop, vectorized as a flat loop is,
    serves every layout. Arrays come with the loop's number of dimensions. ``parallel`` splits
    the pieces into chunks over Numba's threads (no two may share an output element: the
    caller's check); it is for kernels that cannot raise (:func:`may_raise`). Both return the
    floating-point status, as the flat loops' do."""
    vectors = wide_vectors if wide else default_vectors
    key = None if key is None else f"{key}:rows" + ("" if wide else ":narrow")

    @numba.njit(**options())
    def pieces_of(out, shape, offsets, steps, lo, hi, args):  # pieces lo:hi, their status
        vectors()
        clear_status()
        width, outer, last = shape[shape.size - 1], shape.size - 1, steps.size - 1
        per_row = _pieces(width, shape)
        scratch = np.empty(last * _SLOT, np.uint8)  # a slot per input
        results = np.empty(STAGE, out.dtype)  # a strided output's piece
        base, item = address_of(out), out.itemsize
        index = np.empty(outer, np.int64)
        at = np.zeros(steps.size, np.int64)  # each operand's row, in bytes from its first element
        rest = lo // per_row
        for d in range(outer - 1, -1, -1):  # the first piece's row
            index[d] = rest % shape[d]
            rest //= shape[d]
            for k in range(at.size):
                at[k] += index[d] * offsets[d, k]
        for p in range(lo, hi):
            start = (p % per_row) * STAGE
            count = min(width - start, STAGE)
            piece = staged(args, at, steps, start, start + count, scratch)
            target = base + at[last] + start * steps[last]
            in_place = steps[last] == item
            into = address_of(results)  # (read here, in the loop: Numba frees an array after its last use)
            dest = contiguous_at(target if in_place else into, count, out)
            for j in range(count):
                dest[j] = scalar(*elements(piece, j, cast))
            if not in_place:
                copy_strided(into, item, target, steps[last], count, out)
            d = outer - 1 if start + count == width else -1
            while d >= 0:  # the next row's position, innermost dimension first
                index[d] += 1
                for k in range(at.size):
                    at[k] += offsets[d, k]
                if index[d] < shape[d]:
                    break
                for k in range(at.size):
                    at[k] -= offsets[d, k] * shape[d]
                index[d] = 0
                d -= 1
        return read_status()

    def serial(out, shape, offsets, steps, *args):
        return pieces_of(out, shape, offsets, steps, 0, _pieces(out.size, shape), args)

    def parallel(out, shape, offsets, steps, *args):
        n = _pieces(out.size, shape)
        pieces = chunks(n, min(shape[shape.size - 1], STAGE))
        if pieces == 1:  # (see MAX_CHUNKS)
            return pieces_of(out, shape, offsets, steps, 0, n, args)
        status = np.zeros(pieces, np.int64)
        for c in prange(pieces):
            status[c] = pieces_of(out, shape, offsets, steps, c * n // pieces, (c + 1) * n // pieces, args)
        return combined(status, -1)

    return _jit(serial, key, before_compile), _jit(parallel, key, before_compile, parallel=True)


# -- refinement loops (see fpflags.refine) ----------------------------------------------------------
#: Elements a refinement loop computes between two reads of the status: its scratch output (kept
#: in cache) and how soon it stops once every flag it looks for is confirmed.
REFINE_BLOCK = 1 << 12

#: The magnitude bits of each float width's infinity (larger magnitudes are NaN).
_INFINITY_BITS = {16: 0x7C00, 32: 0x7F800000, 64: 0x7FF0000000000000}


def _special_bit(builder: Any, value: Any, numba_type: Any, finite_too: bool) -> Any:
    """``i1``: whether ``value`` is NaN (or, with ``finite_too``, not finite), tested on its bits:
    integer instructions, which raise no floating-point flag (an ordered vector compare of a
    NaN raises 'invalid')."""
    if isinstance(numba_type, types.Complex):
        part = numba_type.underlying_float
        return builder.or_(_special_bit(builder, builder.extract_value(value, 0), part, finite_too),
                           _special_bit(builder, builder.extract_value(value, 1), part, finite_too))
    if not isinstance(numba_type, types.Float):
        return ir.Constant(ir.IntType(1), 0)
    width = numba_type.bitwidth
    bits = builder.bitcast(value, ir.IntType(width))
    magnitude = builder.and_(bits, bits.type((1 << (width - 1)) - 1))
    return builder.icmp_unsigned(">=" if finite_too else ">", magnitude, bits.type(_INFINITY_BITS[width]))


def _any_special(builder: Any, values: Any, value_types: Any, finite_too: bool) -> Any:
    found = ir.Constant(ir.IntType(1), 0)
    for k, t in enumerate(value_types):
        found = builder.or_(found, _special_bit(builder, builder.extract_value(values, k), t, finite_too))
    return found


def _special_tests(finite_too: bool) -> tuple[Any, Any]:
    """``(special, chosen)`` intrinsics over a tuple of loop values: ``special(values)``, whether
    any is NaN (or not finite, with ``finite_too``); ``chosen(values, fill)``, ``fill`` where so,
    else ``values`` (selects, no branch: the loop stays vectorizable)."""

    @intrinsic
    def special(typingctx, values):
        def codegen(context, builder, sig, llargs):
            return _any_special(builder, llargs[0], values.types, finite_too)

        return types.boolean(values), codegen

    @intrinsic
    def chosen(typingctx, values, fill):
        def codegen(context, builder, sig, llargs):
            bad = _any_special(builder, llargs[0], values.types, finite_too)
            picked = [builder.select(bad, builder.extract_value(llargs[1], k),
                                     builder.extract_value(llargs[0], k)) for k in range(len(values.types))]
            return context.make_tuple(builder, sig.return_type, picked)

        return values(values, fill), codegen

    return special, chosen


def refining_loops(scalar: Callable[..., Any], cast: tuple[Any, ...], key: str | None,
                   before_compile: Callable[[], None] | None = None) -> tuple[tuple[Any, Any], ...]:
    """Loops that tell the floating-point flags an elementwise kernel raises on its ordinary
    arguments from those only special ones raise (:func:`.fpflags.refine`), without copies.

    One ``(serial, parallel)`` pair per kind of special argument: NaN, then NaN or infinite.
    ``serial(n, scratch, wanted, where, *args)`` (the arguments as the flat loops take them,
    ``n`` the loop's size, ``scratch`` a 1-D array of the output dtype and :data:`REFINE_BLOCK`
    elements, ``where`` ``None`` or the masked loop's mask) runs the kernel over the loop (the
    elements ``where`` selects) with each element that has a special argument given the
    arguments of the first such element that has none, and returns the status raised (the C
    library's bits), or -1 where every element has one. It reads the status after each
    block of elements and stops once every bit of ``wanted`` is raised. ``parallel`` does the
    same in chunks on Numba's threads. For kernels that cannot raise (:func:`may_raise`).
    """
    key = None if key is None else f"{key}:refining"
    return tuple(_refining_pair(scalar, cast, finite_too, key and f"{key}:{int(finite_too)}", before_compile)
                 for finite_too in (False, True))


def _refining_pair(scalar: Callable[..., Any], cast: tuple[Any, ...], finite_too: bool, key: str | None,
                   before_compile: Callable[[], None] | None) -> tuple[Any, Any]:
    """:func:`refining_loops`' ``(serial, parallel)`` for one kind of special argument."""
    special, chosen = _special_tests(finite_too)

    @numba.njit(**options())
    def first(n, where, args):  # (of the elements computed: where[k], if there is a where)
        for k in range(n):
            if (where is None or where[k]) and not special(elements(args, k, cast)):
                return k
        return -1

    @numba.njit(**options())
    def body(scratch, lo, hi, wanted, fill, where, args):
        wide_vectors()
        clear_status()
        for start in range(lo, hi, scratch.size):
            stop = min(hi, start + scratch.size)
            block = sliced(args, start, stop)  # (indices from 0: contiguous loads, as the loops')
            if where is None:
                for i in range(stop - start):
                    scratch[i] = scalar(*chosen(elements(block, i, cast), fill))
            else:
                mask = where[start:stop]
                for i in range(stop - start):
                    if mask[i]:
                        scratch[i] = scalar(*chosen(elements(block, i, cast), fill))
            if read_status() & wanted == wanted:
                break
        return read_status()

    def serial(n, scratch, wanted, where, *args):
        args, where = flat(args), flat(where)
        k = first(n, where, args)
        return -1 if k < 0 else body(scratch, 0, n, wanted, elements(args, k, cast), where, args)

    def parallel(n, scratch, wanted, where, *args):
        args, where = flat(args), flat(where)
        k = first(n, where, args)
        if k < 0:
            return -1
        fill = elements(args, k, cast)
        pieces = chunks(n, 1)
        status = np.zeros(pieces, np.int64)
        for c in prange(pieces):
            lo, hi = c * n // pieces, (c + 1) * n // pieces
            status[c] = body(np.empty_like(scratch), lo, hi, wanted, fill, where, args)
        return combined(status, -1)

    return _jit(serial, key, before_compile), _jit(parallel, key, before_compile, parallel=True)
