"""What every target provides, and the validated call it receives.

Dispatch validates a call once per *call signature* (argument types, dtypes, shapes, strides,
keywords, target) into a :class:`Plan`, and asks the chosen target to :meth:`Target.prepare` an
executor for it. A repeated call with the same signature runs that executor directly, so
everything an executor can decide from the plan it decides in ``prepare``, not per call.

**The rule: an executor relies only on facts that are part of its call signature.** The key is
each argument's type, dtype (byte order included), shape and strides, the keywords and the
target. Everything else a fast path needs is checked on every call, cheaply, or the call takes
the general path. Facts that the key does *not* hold, and where each is handled:

* alignment (``np.frombuffer(..., offset=1)``, record fields): the cpu flat loops take every
  array as unaligned (valid at any address); the Numba ufunc path writes only C-contiguous
  arrays (NumPy buffers an unaligned one contiguously); the Numba gufunc path reads
  ``flags.aligned`` of its outputs per call;
* whether an input was replaced by a copy at run time (:func:`read_before_write`), so that its
  strides are no longer the keyed ones: no decision is taken from an input's strides about how
  an output may be written;
* whether NumPy buffers an operand, so that Numba's inner loop sees unit steps that the caller's
  ``out=`` does not have: Numba's ufunc loop is only ever given C-contiguous outputs;
* whether a stride is a whole multiple of the itemsize: strides are never divided by it;
* whether an input is the very memory of an output: safe to read in place only elementwise
  (``same_is_safe``), copied for operands with core dimensions, as NumPy does; a ``where=`` mask
  that shares memory with an output is read from a copy (:func:`mask_before_write`).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numba
import numpy as np

from ..spec import KernelSpec, Loop

#: Roles of an argument: a weak Python scalar (NEP 50), a NumPy scalar, a host array (NumPy, or
#: a subclass), or a device array of the target that recognised it.
SCALAR, NUMPY_SCALAR, HOST, DEVICE = "scalar", "numpy-scalar", "host", "device"


@dataclass(frozen=True)
class Arg:
    """What dispatch learned about one input, output or ``where`` argument.

    ``dtype`` is the Python type for a weak scalar (``float``, ``int``, ``bool``), else the
    NumPy dtype. ``strides`` are in bytes (``()`` for scalars). ``device``: the ordinal of the
    device a device array lives on (``None`` for host values and memory-less empty arrays).
    """

    role: str
    cls: type
    dtype: Any
    shape: tuple[int, ...] = ()
    strides: tuple[int, ...] = ()
    device: int | None = None

    @property
    def is_array(self) -> bool:
        return self.role in (HOST, DEVICE)


@dataclass(frozen=True)
class Plan:
    """A call that dispatch has fully validated; targets only execute it.

    Attributes
    ----------
    loop : Loop
        The selected loop: input ``i`` is cast to ``loop.inputs[i]``, new outputs are of
        ``loop.outputs`` (float16 for a float16 loop, which computes in ``loop.compiled``).
    loop_shape : tuple of int
        The broadcast shape of the inputs' loop (non-core) dimensions.
    out_shapes : tuple of tuple of int
        Full shape of each output: ``loop_shape`` plus its core dimensions.
    core_sizes : dict
        Size of every core dimension, by name (empty for elementwise kernels).
    order : str
        Memory order for allocated outputs (``'C'`` or ``'F'``).
    inputs : tuple of Arg
        The inputs, in order.
    outs : tuple of Arg, or None
        The ``out=`` arrays, or ``None`` when the call allocates its outputs.
    where : Arg or None
        The ``where=`` mask array; ``None`` when every position is written.
    cores : tuple of int
        Core dimensions of each argument: the inputs, then the outputs.
    device : int, str or None
        The ``device=`` a device target was given (``None``: where the arrays live, or the
        current device for host arrays).
    """

    loop: Loop
    loop_shape: tuple[int, ...]
    out_shapes: tuple[tuple[int, ...], ...]
    core_sizes: dict[str, int] = field(default_factory=dict)
    order: str = "C"
    inputs: tuple[Arg, ...] = ()
    outs: tuple[Arg, ...] | None = None
    where: Arg | None = None
    cores: tuple[int, ...] = ()
    device: Any = None

    @property
    def result_dtypes(self) -> tuple[np.dtype, ...]:
        """The dtype of each new output."""
        return self.loop.outputs

    @property
    def result_dtype(self) -> np.dtype:
        """The dtype of the first new output (of the only one, for most kernels)."""
        return self.loop.outputs[0]

    @property
    def size(self) -> int:
        """Loop elements of the call."""
        n = 1
        for d in self.loop_shape:
            n *= d
        return n


def library_of(cls: type) -> str:
    """The top-level package that defines ``cls`` (``'cupy'``, ``'torch'``, ``'dask'``, ...)."""
    return cls.__module__.split(".")[0]


def c_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """Byte strides of a C-contiguous array of ``shape``."""
    strides, step = [], itemsize
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def collapse(shape: tuple[int, ...],
             strides: list[list[int]]) -> tuple[tuple[int, ...], list[tuple[int, ...]]]:
    """Drop unit dimensions and merge adjacent ones that every operand steps through evenly."""
    keep = [d for d, n in enumerate(shape) if n != 1]
    if not keep:
        return (), [() for _ in strides]
    last = keep[-1]
    merged_shape = [shape[last]]
    merged = [[s[last]] for s in strides]
    for d in reversed(keep[:-1]):
        if all(s[d] == m[0] * merged_shape[0] for s, m in zip(strides, merged)):
            merged_shape[0] *= shape[d]
        else:
            merged_shape.insert(0, shape[d])
            for s, m in zip(strides, merged):
                m.insert(0, s[d])
    return tuple(merged_shape), [tuple(m) for m in merged]


def is_contiguous(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int, order: str = "C") -> bool:
    """Whether an array of ``shape`` and byte ``strides`` is contiguous in ``order`` ('C'/'F')."""
    if order == "F":
        shape, strides = shape[::-1], strides[::-1]
    step = itemsize
    for n, s in zip(reversed(shape), reversed(strides)):
        if n != 1 and s != step:
            return False
        step *= n
    return True


#: ``numpy.may_share_memory`` without its ``__array_function__`` dispatch (the arguments here are
#: always base-class ndarrays): most of the cost of a small ``out=`` call's overlap check.
_may_share_memory = getattr(np.may_share_memory, "_implementation", np.may_share_memory)


@functools.cache  # the host pipeline asks per call
def scalar_cast(dtype: np.dtype) -> Callable[[Any], Any]:
    """``value -> dtype`` as NumPy's unsafe cast converts one value. The scalar type's own
    constructor (the fast path) refuses a float beyond an integer type's range or a NaN
    (``np.int64(1e30)``: ``OverflowError``) and a complex number into a real type, which a ufunc
    called with ``casting="unsafe"`` converts as C does, with its "invalid value" warning or its
    ``ComplexWarning`` (the imaginary part discarded). A Python int out of range was refused
    when the loop was selected, as NumPy refuses it."""
    cast = dtype.type
    if dtype.kind not in "iuf":
        return cast

    def convert(value: Any) -> Any:
        try:
            return cast(value)
        except (OverflowError, ValueError, TypeError):
            if type(value) is int:
                raise
            return np.asarray(value).astype(dtype)[()]
    return convert


def casts_scalar(cls: type, dtype: np.dtype) -> bool:
    """Whether a Python scalar of type ``cls`` reaches a loop of ``dtype`` through
    :func:`scalar_cast`: a float into an integer loop, a complex number into a real one (the
    compiled loops take neither, and the types' constructors refuse some of their values)."""
    return (cls is float and dtype.kind in "iu") or (cls is complex and dtype.kind != "c")


def copy_cast(dst: np.ndarray, src: Any, where: Any = True) -> None:
    """``np.copyto(dst, src, casting="unsafe", where=where)``; nothing at all for an empty ``dst``.

    NumPy 2.4's masked casting copy of an empty 2-d array reads the bytes just before ``src``'s
    data: a segfault where ``src`` starts a mapping (the fuzzer met it on a pinned staging
    buffer of the cuda target, whose memory begins at a page). Every copy into results goes
    through here.
    """
    if dst.size:
        np.copyto(dst, src, casting="unsafe", where=where)


@functools.lru_cache(maxsize=1024)
def span(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> tuple[int, int]:
    """Byte offsets ``[lo, hi)`` from an array's address that its elements occupy."""
    if 0 in shape:
        return 0, 0
    lo = hi = 0
    for n, s in zip(shape, strides):
        if s < 0:
            lo += (n - 1) * s
        else:
            hi += (n - 1) * s
    return lo, hi + itemsize


def copy_keeping_strides(a: np.ndarray) -> np.ndarray:
    """A copy of ``a`` with its very strides (gaps, steps of 0 and negative steps included): an
    executor planned from the caller's strides reads it as it would read ``a``."""
    lo, hi = span(a.shape, a.strides, a.dtype.itemsize)
    copy = np.ndarray(a.shape, a.dtype, np.empty(hi - lo, np.uint8), -lo, a.strides)
    copy_cast(copy, a)
    return copy


def read_before_write(inputs: Any, outs: tuple[Any, ...], same_is_safe: bool = True,
                      keep_strides: bool = False) -> Any:
    """``inputs`` with each host array that shares memory with an output replaced by a copy:
    NumPy's result is that of a call that reads every input before writing anything, and loops
    (and chunks) write as they go.

    An input whose elements are exactly an output's (``f(x, out=x)``) is left as it is where
    ``same_is_safe``: an elementwise loop reads each element before it writes it. A gufunc
    with core dimensions reads a whole row (``(n)->(n)`` reversing it) while writing it, so
    its callers pass ``same_is_safe=False``, and such an input is copied too, as NumPy does.
    ``keep_strides``: copies with the input's strides (:func:`copy_keeping_strides`), for
    executors planned from them; else contiguous ones.
    """
    copied = None
    for i, a in enumerate(inputs):
        if type(a) is np.ndarray:
            for o in outs:
                if a is o and same_is_safe:
                    continue
                # Two distinct arrays that own their memory cannot overlap (cheap, and common).
                if a is not o and a.base is None and o.base is None:
                    continue
                if _may_share_memory(a, o) and not (same_is_safe and _same_elements(a, o)):
                    copied = copied or list(inputs)
                    copied[i] = copy_keeping_strides(a) if keep_strides else a.copy()
                    break
    return inputs if copied is None else type(inputs)(copied)


def overlap_guard(plan: Plan, same_is_safe: bool = True) -> Callable[[Any, tuple[Any, ...]], Any]:
    """:func:`read_before_write` for the calls of ``plan``: what a call signature already tells
    (which inputs are arrays, how many outputs) is not looked at again on every call."""
    arrays = [i for i, a in enumerate(plan.inputs) if a.is_array]
    if not arrays:
        return _unchanged
    if len(arrays) > 1 or plan.outs is None or len(plan.outs) != 1:
        return functools.partial(read_before_write, same_is_safe=same_is_safe)
    (index,) = arrays

    def guard_one(inputs: Any, outs: tuple[Any, ...]) -> Any:
        a, o = inputs[index], outs[0]
        # read_before_write's tests for one input, inline: a view (of a linspace, a slice) that
        # does not overlap ``out`` ends at may_share_memory, without a copy.
        if a is o:
            return inputs if same_is_safe else read_before_write(inputs, outs, False)
        if type(a) is not np.ndarray or (a.base is None and o.base is None) or not _may_share_memory(a, o):
            return inputs
        return read_before_write(inputs, outs, same_is_safe)

    return guard_one


def mask_before_write(where: Any, outs: tuple[Any, ...]) -> Any:
    """``where``, or a copy of it where it shares memory with an output: the mask is read
    element by element (and block by block) while outputs are written."""
    if type(where) is not np.ndarray:
        return where
    for o in outs:
        # Two arrays that own their memory cannot overlap (cheap, and the common case).
        if (where.base is not None or o.base is not None) and _may_share_memory(where, o):
            return where.copy()
    return where


def _unchanged(inputs: Any, outs: tuple[Any, ...]) -> Any:
    return inputs


def _same_elements(a: np.ndarray, o: np.ndarray) -> bool:
    return (a.__array_interface__["data"][0], a.shape, a.strides, a.dtype) == \
        (o.__array_interface__["data"][0], o.shape, o.strides, o.dtype)


_compiler_hooked = False
_compiler_hook_lock = threading.Lock()


def hold_the_compiler_across_fork() -> None:
    """Make ``os.fork`` wait for Numba's compiler lock, then llvmlite's (the order compilations
    take them in; a thread disposing of LLVM objects holds the second alone), and release them
    on both sides: the forking thread owns them in the child too, which would otherwise inherit
    them held by a thread it does not have, and hang on its first compilation. CPython does the
    same with its import lock. Installed by the first compilation (:func:`compiling`), not at
    import. Only forks from Python (``os.fork``, multiprocessing) run these hooks; ``subprocess``
    does not wait."""
    global _compiler_hooked
    with _compiler_hook_lock:
        if _compiler_hooked:
            return
        _compiler_hooked = True
    from llvmlite.binding import ffi
    from numba.core.compiler_lock import global_compiler_lock as compiler

    # llvmlite's private _LLVMLock (a context manager), if this llvmlite has it.
    llvm = getattr(getattr(ffi, "lib", None), "_lock", None) or contextlib.nullcontext()

    def before() -> None:
        compiler.acquire()
        llvm.__enter__()

    def after() -> None:
        llvm.__exit__(None, None, None)
        compiler.release()

    os.register_at_fork(before=before, after_in_parent=after, after_in_child=after)


@contextlib.contextmanager
def compiling() -> Iterator[None]:
    """What every compilation runs under: forks wait for it (:func:`hold_the_compiler_across_fork`),
    a Ctrl-C is held until it is done (:func:`interrupts_deferred`), arithmetic compiles as
    NumPy's (:func:`numpys_arithmetic`), and NumPy's error state is the default's quiet one: the
    caller's ``np.errstate(over="raise")`` is about their values, and would otherwise turn NumPy
    arithmetic in typing code (limits, constants) into a failed compilation."""
    hold_the_compiler_across_fork()
    with interrupts_deferred(), numpys_arithmetic(), np.errstate(all="ignore"):
        yield


#: What compiled kernels depend on in how :func:`compiling` compiles them: part of the disk
#: caches' keys (code cached before signed integers wrapped is not loaded).
COMPILED_AS = "signed integers wrap, -2**63 // -1 too; float remainder by fmod"

#: ``(module, attribute, replacement)``: the Numba functions :func:`numpys_arithmetic` replaces
#: while a kernel compiles (each module imported first: Numba imports its lowering modules at
#: its first compilation, which would otherwise run unreplaced). Target modules add theirs when
#: they are imported.
REPLACEMENTS: list[tuple[str, str, Callable[[Any], Any]]] = []
_replacing_lock = threading.Lock()
_replaced: list[Any] = []  # [count of compilations inside, the (module, attribute, original)s]


def no_flags(original: Any) -> Callable[[Any], list[str]]:
    """Numba's ``_int_arith_flags`` (``nsw`` for signed integers) giving no flags."""
    return lambda rettype: []


def numpys_integer_division(original: Any) -> Callable[..., Any]:
    """Numba's signed integer ``divmod`` (``//``, ``%``) with NumPy's quotient of the most
    negative integer by ``-1``: the quotient wraps to that integer itself (remainder 0), where
    Numba gives 0 (it skips the division, which traps on x86). For the cuda target's copies of
    Numba's lowering; the host's is :mod:`gpufuncs.targets.cpu.division`."""

    def int_divmod_signed(context: Any, builder: Any, ty: Any, x: Any, y: Any) -> Any:
        quotient, remainder = original(context, builder, ty, x, y)
        wraps = builder.and_(builder.icmp_signed("==", x, x.type(ty.minval)),
                             builder.icmp_signed("==", y, y.type(-1)))
        return builder.select(wraps, x, quotient), remainder

    return int_divmod_signed


REPLACEMENTS += [("numba.cpython.numbers", "_int_arith_flags", no_flags)]  # (and cpu.division's)


@contextlib.contextmanager
def numpys_arithmetic() -> Iterator[None]:
    """Numba's code generation where it computes other values than NumPy's loops, replaced
    while a kernel compiles (:data:`REPLACEMENTS`, each given the function it replaces).

    Signed integer arithmetic wraps on overflow: Numba marks signed ``+``, ``-`` and ``*``
    ``nsw`` (overflow is undefined: it lets LLVM drop the negative-index check of ``a[i + 1]``),
    and LLVM then may compute an expression that overflows as if it had not: ``abs(a - b)`` of
    int64 ``1`` and ``-2**63`` came out negative, where NumPy's difference wraps and its
    absolute value is ``2**63 - 1``. ``-2**63 // -1`` is ``-2**63`` as NumPy's (on the host
    :mod:`gpufuncs.targets.cpu.division`, which also raises NumPy's flags; on cuda
    :func:`numpys_integer_division`). The CUDA target adds its float remainder (see
    :func:`gpufuncs.targets.cuda.compat.exact_remainder`). Compilations of other code in other
    threads meanwhile get the replacements too (they only compute more exactly, or miss an
    optimization). Overlapping compilations share one replacement: the first puts it in, the
    last takes it out.
    """
    with _replacing_lock:
        if not _replaced:
            found = [(importlib.import_module(name), attr, make) for name, attr, make in REPLACEMENTS]
            _replaced[:] = [0, [(module, attr, getattr(module, attr)) for module, attr, _ in found]]
            for module, attr, make in found:
                setattr(module, attr, make(getattr(module, attr)))
        _replaced[0] += 1
    try:
        yield
    finally:
        with _replacing_lock:
            _replaced[0] -= 1
            if not _replaced[0]:
                for module, attr, original in _replaced[1]:
                    setattr(module, attr, original)
                _replaced.clear()


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Hold SIGINT (``KeyboardInterrupt``, Ctrl-C) until the block is done, then deliver it.

    For compilations: Numba installs typing and lowering registrations (``@overload``s such as
    the vector math's) into its contexts lazily, in the first compilation after they are made,
    and an exception in the middle of that loses the rest for the life of the process (every
    later compilation fails: "Unknown attribute 'sqrt'"). An interrupt that lands in one of
    llvmlite's ctypes callbacks is also swallowed there. Signals reach Python in the main
    thread only, so other threads need nothing held, and nothing is done there.
    """
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGINT) is None:
        yield  # None: a handler not set from Python (embedding), which could not be put back
        return
    received: list[tuple[int, Any]] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: received.append((signum, frame)))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if received:
            _deliver(previous, *received[0])


def _deliver(handler: Any, signum: int, frame: Any) -> None:
    """What SIGINT would have done with ``handler`` installed (Python's own handler raises
    ``KeyboardInterrupt``; under the default action the process gets the signal again)."""
    if callable(handler):
        handler(signum, frame)
    elif handler != signal.SIG_IGN:
        signal.raise_signal(signum)


#: ``executor(inputs, outs, where, stream) -> outputs``: runs one validated call signature. It
#: may carry ``plain(args, out, where, kwargs)``, the same call without ``out=``, ``where=`` or
#: ``stream=``, which returns the new output (the tuple of them, for several) and which the
#: resolved call then runs as it is (it takes and ignores the resolved call's own arguments).
Executor = Callable[[tuple[Any, ...], "tuple[Any, ...] | None", Any, Any], tuple[Any, ...]]


class Target:
    """Interface of a compilation and execution target."""

    name: str
    #: Keyword arguments of a call that only this target accepts (``stream`` for cuda).
    options: tuple[str, ...] = ()

    def unavailable_reason(self) -> str | None:
        """``None`` when the target can run here, else a sentence saying why not."""
        return None

    def compile(self, spec: KernelSpec) -> Any:
        """This target's compiled object for ``spec`` (called once per kernel, lazily)."""
        raise NotImplementedError

    def public_object(self, compiled: Any) -> Any:
        """What ``gpufuncs.get`` returns for ``compiled``: the Numba object (default: itself)."""
        return compiled

    def prepare(self, spec: KernelSpec, compiled: Any, plan: Plan) -> Executor:
        """An executor for every call whose signature produced ``plan``."""
        raise NotImplementedError


class _Unkeyable:
    """Stands in a key for an argument that is described afresh on every call; being
    unhashable, it turns the dictionary lookup of the whole key into a ``TypeError``."""

    __hash__ = None  # type: ignore[assignment]


UNKEYABLE = _Unkeyable()


class DeviceArrays:
    """How a target recognises its arrays; dispatch asks, and knows nothing of devices.

    Dispatch calls :meth:`classify` once per Python type. The answer ``True`` means every
    instance is a device array of this target, ``None`` that it depends on the instance
    (:meth:`owns` decides, as for torch tensors, which live on the CPU or the GPU).
    """

    target: str

    def classify(self, cls: type) -> bool | None:
        """Whether instances of ``cls`` are this target's arrays: True, False or None."""
        return False

    def owns(self, obj: Any) -> bool:
        """Whether this instance is one of this target's arrays."""
        return False

    def describe(self, obj: Any) -> Arg:
        """Dtype, shape and strides of one of this target's arrays."""
        raise NotImplementedError

    def keyer(self, cls: type) -> Callable[[Any], Any] | None:
        """For arrays of ``cls``: a function giving a hashable summary of what :meth:`describe`
        reads (it keys resolved calls), or ``None`` where that is not cheap. For a class
        classified ``None`` the key must tell instances this target does not own apart from
        its own (torch's holds the device), or be :data:`UNKEYABLE` for them: keying runs on
        every call, so the check is part of it."""
        return None

    def writable(self, obj: Any) -> bool:
        """Whether the array may be written (checked on every call that writes into it)."""
        return True

    def always_writable(self, cls: type) -> bool:
        """Whether every array of ``cls`` may be written (then :meth:`writable` is not asked)."""
        return False

    def view(self, obj: Any, shape: tuple[int, ...], strides: tuple[int, ...]) -> Any:
        """A view of ``obj``'s memory from the same first element, with ``shape`` and byte
        ``strides`` (a gufunc's ``axes=``: its operands transposed): an array of the same kind
        where its library makes views, never a copy (``TypeError`` where none can be made)."""
        raise TypeError(f"{type(obj).__name__} arrays cannot be viewed with other axes")


def bounds_checked(spec: KernelSpec) -> bool:
    """Whether ``spec``'s body is compiled with bounds checks: its ``boundscheck=True``, the
    environment variable ``GPUFUNCS_BOUNDSCHECK=1``, or Numba's own ``NUMBA_BOUNDSCHECK=1``
    (which turns them on in every function Numba compiles)."""
    return (spec.boundscheck or os.environ.get("GPUFUNCS_BOUNDSCHECK", "0") not in ("", "0")
            or bool(numba.config.BOUNDSCHECK))


def naming_index_errors(spec: KernelSpec, executor: Executor) -> Executor:
    """``executor``, raising a bounds check's ``IndexError`` with the kernel's name (Numba's
    says only "index is out of bounds")."""

    def checked(*args: Any, **kwargs: Any) -> Any:
        try:
            return executor(*args, **kwargs)
        except IndexError as exc:
            if "out of bounds" not in str(exc):
                raise
            raise IndexError(f"{spec.name}: an index in the kernel's body is out of bounds ({exc}; "
                             "bounds checks are on)") from exc

    return checked
