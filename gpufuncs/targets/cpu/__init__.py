"""The ``cpu`` and ``parallel`` targets: flat loops for the common case, Numba ufuncs for the rest.

For each validated call signature :meth:`CpuTarget.prepare` picks one of three executors:

* **flat**: every array is contiguous with the loop's shape (and ``out=`` too), scalars are
  passed by value; the kernel runs in a plain ``@njit`` loop (:mod:`.loops`) that LLVM vectorizes,
  split into chunks over Numba's threads on ``parallel``;
* **rows**: an elementwise call whose arrays broadcast or are strided runs the same loop over
  each row of the result, a contiguous piece at a time (:func:`.loops.rows_loops`);
* **numba**: anything else (mixed dtypes, float16, subclasses, masks that broadcast) runs through
  the Numba ``@vectorize`` / ``@guvectorize`` object, a real :class:`numpy.ufunc`, whose NumPy
  machinery does the broadcasting, strides and casts in C.

All compute with the same compiled scalar function, so results agree bit for bit.
"""

from __future__ import annotations

import functools
import hashlib
import math
import operator
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numba
import numpy as np
from numba.core import sigutils
from numba.core import types as nbtypes
from numba.np.numpy_support import from_dtype

from ...errors import KernelCompileError
from ...spec import KernelSpec, Loop
from ..base import (
    COMPILED_AS,
    HOST,
    NUMPY_SCALAR,
    SCALAR,
    Arg,
    Executor,
    Plan,
    Target,
    bounds_checked,
    c_strides,
    casts_scalar,
    collapse,
    compiling,
    copy_cast,
    is_contiguous,
    mask_before_write,
    naming_index_errors,
    overlap_guard,
    read_before_write,
    scalar_cast,
)
from ..compose import compiled_body
from ..fpstatus import ignoring_all, report
from . import auto, cache, division, fpflags, loops, vecmath  # (division registers its lowering)
from .layers import GUARD
from .vecmath import with_vector_math


def auto_host_target(auto_target: auto.AutoTarget, spec: KernelSpec, plan: Plan,
                     compiled: Callable[[str], Any]) -> tuple[str, Executor | None]:
    """The target for host arrays under ``target="auto"`` (see :mod:`.auto`): ``("cpu", None)``,
    or ``("auto", executor)`` whose executor picks ``cpu`` or ``parallel`` per call from what
    ``auto_target`` learned; ``compiled(target)`` gives the kernel's compiled object for a target."""
    if _flat_order(spec, plan) is None and _rows_plan(spec, plan) is None:
        # parallel would run Numba's parallel ufunc, which splits strided work into pieces too
        # small to pay for the threads (slower than cpu at every size in this project's
        # benchmarks before the flat loops existed); what auto learns is the flat loops' cost,
        # which the rows loops' follows (a row's pieces are flat loops).
        return "cpu", None
    return auto_target.choose(spec, plan, compiled)


# -- compiling ------------------------------------------------------------------------------------
def _numba_object(spec: KernelSpec, target: str, declared: tuple[Loop, ...]) -> Any:
    # Built from the same vector-math copy as the flat loops (so that both paths agree bit for
    # bit), and without Numba's disk cache: it keys entries by bytecode, which the copy shares
    # with the original function (see vecmath.with_vector_math).
    checks = _checks(spec)
    pyfunc = compiled_body(spec, with_vector_math, numba.njit(**loops.options(), **checks))
    sigs = [loop.signature for loop in declared]
    opts = {"target": target, "cache": False, "nopython": True, **checks}
    if spec.layout is None:
        return numba.vectorize(sigs, identity=_numba_identity(spec.identity), **opts)(pyfunc)
    # Numba refuses output-only core dimensions (numba#2797): outputs are compiled as writable
    # inputs, and the executors always allocate or validate ``out`` themselves.
    writable = tuple(range(spec.nin, spec.nin + spec.nout))
    return numba.guvectorize(sigs, spec.layout.numba_layout, writable_args=writable, **opts)(pyfunc)


def _checks(spec: KernelSpec) -> dict[str, bool]:
    """Numba's options for the kernel's body beyond :func:`.loops.options`: its bounds checks."""
    return {"boundscheck": True} if bounds_checked(spec) else {}


def _numba_identity(identity: float | None) -> int | str | None:
    # Numba stores only 0 or 1 as a ufunc identity; any other identity still makes the
    # reduction reorderable, and gpufuncs' reduce supplies the value for empty reductions.
    if identity is None:
        return None
    return int(identity) if identity in (0, 1) else "reorderable"


def _compile(spec: KernelSpec, target: str, build: Callable[[], Any]) -> Any:
    """``build()``, with errors named after the kernel and the target, and a Ctrl-C held until
    it is done (an interrupted compilation can break Numba: see ``compiling``)."""
    try:
        with compiling():
            return build()
    except Exception as exc:
        raise KernelCompileError(
            f"kernel {spec.name!r} failed to compile for target {target!r}: {exc}") from exc


@functools.cache
def _library_digest() -> str:
    """What the compiled loops depend on besides the kernel and the loops' own file (whose
    change Numba notices): the vector math's, the scalar helpers', the kernel copies', the
    complex arithmetic's and the integer division's sources."""
    from ... import scalar
    from .. import compose, numpy_complex

    sources = b"".join(Path(m.__file__).read_bytes()
                       for m in (vecmath, scalar, compose, numpy_complex, division))
    return hashlib.sha256(sources + COMPILED_AS.encode()).hexdigest()[:16]


def kernel_key(spec: KernelSpec) -> str | None:
    """What the compiled code of ``spec`` depends on, in every dtype (``None``: not cached, for
    a kernel without a source file or with closure values that cannot be digested)."""
    depends = cache.dependency_digest(spec.pyfunc)
    if spec.source_key is None or depends is None:
        return None
    checks = ":boundscheck" if bounds_checked(spec) else ""
    return f"{spec.source_key}:{depends}:{_library_digest()}{checks}"


def _cache_key(spec: KernelSpec, loop: Loop) -> str | None:
    """The flat loops' disk-cache key for ``spec``'s ``loop`` (see :func:`kernel_key`)."""
    key = kernel_key(spec)
    return None if key is None else f"{key}:{loop.types}:{fpflags.cache_tag()}"


def _scalar_argtypes(spec: KernelSpec, loop: Loop) -> tuple[Any, ...]:
    """The types the flat loops call the scalar function with in ``loop``: a scalar per
    elementwise input; for a gufunc, the row of each array with core dimensions and of each
    output (a ``()`` output is a row of one), C-contiguous (see :mod:`.loops`)."""
    if spec.layout is None:
        return tuple(from_dtype(d) for d in loop.inputs)
    inputs = tuple(_array_type(d, len(dims)) if dims else from_dtype(d)
                   for d, dims in zip(loop.inputs, spec.layout.inputs))
    return inputs + tuple(_array_type(d, max(1, len(dims)))
                          for d, dims in zip(loop.outputs, spec.layout.outputs))


def _array_type(dtype: np.dtype, ndim: int, layout: str = "C") -> nbtypes.Array:
    """The Numba type of a C-contiguous array as the flat loops take it: *unaligned*, so that
    every load and store is valid at any address. Alignment is not part of a call signature
    (``np.frombuffer(..., offset=1)``, record fields), and on x86 the vectorized loops are the
    same instructions either way (same speed, measured on the 2-core machine)."""
    return nbtypes.Array(from_dtype(dtype), ndim, layout, aligned=False)


class CpuKernel:
    """What the ``cpu`` or ``parallel`` target compiles for one kernel, each part on first use:
    the flat loops per loop dtype (cached on disk), and the Numba ufunc object."""

    def __init__(self, spec: KernelSpec, target: str) -> None:
        self.spec, self.target = spec, target
        self._lock = threading.Lock()
        self._numba: dict[tuple[str, str | None], Any] = {}
        self._loops: dict[tuple[str, Any], tuple[Any, ...]] = {}  # (signature, wide or 'refining')
        self._scalar: Any = None
        self._raising: dict[str, bool] = {}  # loop signature -> whether the kernel can raise
        self._holds_loops = spec.layout is not None  # a gufunc's scalar function holds its loops

    def scalar(self) -> Any:
        """The scalar function compiled with Numba, as every loop of this kernel calls it: its
        ``math`` functions replaced by ones that vectorize (see :mod:`.vecmath`). An elementwise
        kernel's is inlined into the loops (:func:`.loops.inline_into_loops`)."""
        if self._scalar is None:
            key = kernel_key(self.spec)

            def prepare(pyfunc: Any) -> Any:
                copy = with_vector_math(pyfunc)
                if key is not None:  # it is linked into the cached loops: see cache.name_after
                    cache.name_after(copy, key)
                return copy

            # (and the options the function asks for: a fused reduction's body, made by
            # gpufuncs.fuse.emit.reduction_function, is compiled without reference counts)
            jit = numba.njit(**loops.options(), **_checks(self.spec),
                             **getattr(self.spec.pyfunc, "numba_options", {}))
            self._scalar = jit(compiled_body(self.spec, prepare, jit))
        return self._scalar

    def numba_object(self, serial: bool = False, loop: Loop | None = None) -> Any:
        """The Numba ``DUFunc`` (``cpu``), ``numpy.ufunc`` (``parallel``) or ``GUFunc`` of every
        declared loop, or of ``loop`` alone (what an executor runs: Numba compiles every loop
        of such an object when it is made, 8 s each for ``parallel``); ``serial``: the ``cpu``
        one whatever this kernel's target."""
        target = "cpu" if serial else self.target
        key = (target, None if loop is None else loop.signature)
        with self._lock:
            if key not in self._numba:
                loops = self.spec.loops if loop is None else (loop,)
                self._numba[key] = _compile(self.spec, target,
                                            lambda: _numba_object(self.spec, target, loops))
        return self._numba[key]

    def loops(self, loop: Loop, wide: bool = True) -> tuple[Any, ...]:
        """The flat loop dispatchers of the declared ``loop`` (see :mod:`.loops`); ``wide``: the
        elementwise ones for calls of :data:`.loops.WIDE_MIN` elements and more."""
        def build(scalar: Any, casts: tuple[Any, ...], key: str | None, inline: Callable[[], None]) -> Any:
            # (a kernel that cannot raise runs its serial loop in parallel chunks)
            raising = self.target != "parallel" or self.may_raise(loop)
            if self.spec.layout is None:
                return loops.ufunc_loops(scalar, casts, key, wide, raising, inline)
            return loops.gufunc_loops(scalar, casts, key, raising, inline)

        return self._made((loop.signature, wide), loop, build)

    def rows(self, loop: Loop, wide: bool) -> tuple[Any, Any]:
        """The rows loops of the declared elementwise ``loop`` (see :func:`.loops.rows_loops`)."""
        def build(scalar: Any, casts: tuple[Any, ...], key: str | None, inline: Callable[[], None]) -> Any:
            return loops.rows_loops(scalar, casts, key, wide, inline)

        return self._made((loop.signature, ("rows", wide)), loop, build)

    def refining(self, loop: Loop) -> tuple[tuple[Any, Any], ...]:
        """The refinement loops of the declared elementwise ``loop`` (see
        :func:`.loops.refining_loops`), made on first use (a call on data with NaN whose flags
        are acted on), cached on disk with the other loops."""
        return self._made((loop.signature, "refining"), loop, loops.refining_loops)

    def _made(self, key: tuple[str, Any], loop: Loop,
              build: Callable[[Any, tuple[Any, ...], str | None, Callable[[], None]], Any]) -> Any:
        """The dispatchers ``build(scalar, casts, cache key, inline)`` makes for the declared
        ``loop``, made once (under the kernel's lock) and kept under ``key``."""
        found = self._loops.get(key)
        if found is None:
            with self._lock:
                if key not in self._loops:
                    self._loops[key] = self._build(loop, build)
                found = self._loops[key]
        return found

    def _build(self, loop: Loop, build: Callable[..., Any]) -> Any:
        scalar = self.scalar()
        # (what the loops' caches hold: the scalar and its types, not this kernel, which a
        # replaced kernel's loops, kept by Numba for good, would keep alive)
        inline = functools.partial(loops.inline_into_loops, scalar, _scalar_argtypes(self.spec, loop),
                                   self._holds_loops)
        # The scalar function is compiled (and marked for inlining) just before a loop is: not
        # at all where every loop comes from the disk cache (0.18 s of a fresh process's first
        # gaussian call on 2 cores).
        found = build(scalar, tuple(d.type for d in loop.inputs), _cache_key(self.spec, loop), inline)
        flat = [d for item in found for d in (item if isinstance(item, tuple) else (item,))]
        if not all(cache.keyed(d) for d in flat):  # compiled whenever called
            _compile(self.spec, self.target, inline)
        return found

    def inline(self, loop: Loop) -> None:
        """Compile the scalar function for the declared ``loop`` and mark it for inlining into
        the flat loops (:func:`.loops.inline_into_loops`): what :meth:`loops` has done just
        before any loop of ``loop`` compiles (not where they all come from the disk cache)."""
        loops.inline_into_loops(self.scalar(), _scalar_argtypes(self.spec, loop), self._holds_loops)

    def may_raise(self, loop: Loop) -> bool:
        """Whether the kernel, compiled for ``loop``, can raise an exception (see
        :func:`.loops.may_raise`); decided once per loop."""
        found = self._raising.get(loop.signature)
        if found is None:
            argtypes, _ = sigutils.normalize_signature(loop.signature)
            scalar = self.scalar()
            if self.spec.tuple_results:
                # Asked of the body the storing function calls, on the inputs: the stores into
                # one-element rows cannot raise, and a body too large to be inlined there would
                # leave its status a call's result, which reads as "may raise".
                scalar, argtypes = scalar.py_func.body, argtypes[: self.spec.nin]

            def compute() -> bool:
                return _compile(self.spec, self.target,
                                lambda: loops.may_raise(scalar, tuple(argtypes), self._holds_loops))

            # Kept on the disk with the loops: a fresh process whose loops all come from there
            # compiles nothing (the answer depends only on what the loops' cache key covers).
            key = _cache_key(self.spec, loop)
            found = self._raising[loop.signature] = (
                compute() if key is None else cache.remembered(loops.may_raise, f"{key}:may_raise", compute))
        return found

    def compile_loop(self, dispatcher: Any, argtypes: tuple[Any, ...]) -> Callable[..., None]:
        """Compile one flat loop for ``argtypes`` now (errors name the kernel), and return its
        entry point: called with exactly those types (the call signature guarantees it), it
        skips Numba's dispatch by argument types, 40% of a small call. It takes the inputs as
        one tuple (the loops' ``*args``)."""
        def build() -> Any:
            with loops.interleaved():
                return dispatcher.compile(argtypes)

        return _compile(self.spec, self.target, build)


class CpuTarget(Target):
    """Numba's ``cpu`` (one core) or ``parallel`` (all cores) target."""

    def __init__(self, name: str) -> None:
        self.name = name

    def compile(self, spec: KernelSpec) -> CpuKernel:
        return CpuKernel(spec, self.name)

    def public_object(self, compiled: CpuKernel) -> Any:
        return compiled.numba_object()

    def prepare(self, spec: KernelSpec, compiled: CpuKernel, plan: Plan) -> Executor:
        executor = self._prepare(spec, compiled, plan)
        return naming_index_errors(spec, executor) if bounds_checked(spec) else executor

    def _prepare(self, spec: KernelSpec, compiled: CpuKernel, plan: Plan) -> Executor:
        if self.name != "parallel":
            return _executor(spec, compiled, plan, threaded=False)
        # Numba's threading layer can take the process down: see layers.py.
        serial = functools.partial(_executor, spec, compiled, plan, threaded=False)
        if not GUARD.parallel_usable or not _raises_from_threads(spec, compiled, plan):
            return serial()
        return GUARD.wrap(_executor(spec, compiled, plan, threaded=True), serial)


def _raises_from_threads(spec: KernelSpec, compiled: CpuKernel, plan: Plan) -> bool:
    """Whether the threaded executor of ``plan`` raises the kernel's exceptions as ``cpu`` does.

    The flat loops do (see :mod:`.loops`). Numba's parallel ufunc and gufunc objects run the
    kernel on their threads and lose its exception: the call returns with elements never
    written, or fails with a ``SystemError``. Calls that take them run serially if the kernel
    can raise at all, as compiled for the types those objects compile it with.
    """
    if _flat_order(spec, plan) is not None:
        return True
    return not compiled.may_raise(plan.loop.compiled)


def _executor(spec: KernelSpec, compiled: CpuKernel, plan: Plan, threaded: bool) -> Executor:
    """The flat-loop executor where the call allows one, else the Numba ufunc's; ``threaded``
    runs them on Numba's threads."""
    order = _flat_order(spec, plan)
    if order is not None:
        make = _flat_ufunc if spec.layout is None else _flat_gufunc
        return make(spec, compiled, plan, order, threaded)
    if spec.layout is None:
        rows = _rows_plan(spec, plan)
        if rows is not None:
            return _rows_ufunc(spec, compiled, plan, rows, threaded)
        return _numba_ufunc(spec, compiled, plan, threaded)
    return _numba_gufunc(compiled, plan, threaded)


# -- which calls take the flat loops ------------------------------------------------------------------
def _native_array(a: Arg, dtypes: str = "biufc") -> bool:
    return (a.role == HOST and a.cls is np.ndarray and a.dtype.isnative and a.dtype.kind in dtypes
            and a.dtype != np.float16)


def _is_scalar(a: Arg) -> bool:
    return a.role == SCALAR or (a.role == NUMPY_SCALAR and a.dtype.kind in "biufc"
                                and a.dtype.itemsize <= 16 and a.dtype != np.float16
                                and a.dtype != np.longdouble)


def _complex_scalar(a: Arg) -> bool:
    return a.cls is complex or (a.role == NUMPY_SCALAR and a.dtype.kind == "c")


def _flat_order(spec: KernelSpec, plan: Plan) -> str | None:
    """'C' or 'F' if the call can run on a flat loop (every array of the loop's dtype, contiguous
    in that order with the loop's shape, plus core dimensions for gufuncs), else ``None``."""
    order = "F" if plan.order == "F" and len(plan.loop_shape) > 1 else "C"
    if spec.layout is not None:
        order = "C"
    if plan.loop.runs is not None:
        return None  # float16 loops
    # Arrays of the loop's dtypes only: each combination of argument types is a compilation,
    # and NumPy's casting machinery serves the rarer mixed-dtype calls well enough.
    arrays = []
    for a, core, dtype in zip(plan.inputs, plan.cores, plan.loop.inputs):
        if _is_scalar(a) and not core:
            if _complex_scalar(a) and dtype.kind != "c":
                return None  # a complex number cast into a real loop: NumPy casts it there
            continue
        if not _native_array(a) or a.dtype != dtype:
            return None
        if not _whole(plan, a, core):
            arrays.append((a, core))
    for o, core, dtype in zip(plan.outs or (), plan.cores[spec.nin:], plan.loop.outputs):
        if not _native_array(o) or o.dtype != dtype:
            return None
        arrays.append((o, core))
    if plan.where is not None:
        if not _native_array(plan.where, "b"):
            return None
        arrays.append((plan.where, 0))
    for a, core in arrays:
        if not _in_rows(plan, a, core) or not is_contiguous(a.shape, a.strides, a.dtype.itemsize, order):
            return None
    return order


def _in_rows(plan: Plan, a: Arg, core: int) -> bool:
    """Whether array ``a`` (``core`` core dimensions) has the loop's shape before its core."""
    return a.shape == (plan.loop_shape + a.shape[len(a.shape) - core:] if core else plan.loop_shape)


def _whole(plan: Plan, a: Arg, core: int) -> bool:
    """Whether input ``a`` is one core for every loop element, in C order: core dimensions and
    no other but ones (a vector of weights for every row). The flat gufunc loops pass it whole
    to each row, as it is, where it would otherwise have to be broadcast to the loop's rows
    (which the flat loops cannot take: Numba's gufunc object would run the call, on one thread
    wherever the kernel may raise)."""
    split = len(a.shape) - core
    return (core > 0 and not _in_rows(plan, a, core) and math.prod(a.shape[:split]) == 1
            and is_contiguous(a.shape[split:], a.strides[split:], a.dtype.itemsize))


class Rows(NamedTuple):
    """A call as the rows loops take it (:func:`.loops.rows_loops`)."""

    shape: np.ndarray  # the loop's shape, in the loop's order, dimensions merged
    offsets: np.ndarray  # each operand's byte steps along the loop's other dimensions
    steps: np.ndarray  # each operand's byte step along a row
    order: str  # "C" or "F": the order of a new output
    padded: tuple[tuple[int, tuple[None, ...]], ...]  # (input, index adding its missing dimensions)


def _rows_plan(spec: KernelSpec, plan: Plan) -> Rows | None:
    """How an elementwise call runs on the rows loops, or ``None``: every input a scalar or an
    array of the loop's dtype (any strides: broadcast, stepped, reversed, a block of columns),
    one output of the loop's dtype none of whose elements share memory, no ``where=``. The
    loop runs in the order of the output's strides (a row along its smallest step), its
    dimensions merged where every operand steps through them evenly. All of it is read from
    the call signature."""
    if spec.layout is not None or spec.tuple_results or plan.where is not None or plan.size == 0:
        return None
    if plan.loop.runs is not None:
        return None
    shape, dtype = plan.loop_shape, plan.result_dtype
    strides = []  # each operand's byte steps over the loop's dimensions (0: the same along it)
    for a, loop_dtype in zip(plan.inputs, plan.loop.inputs):
        if _is_scalar(a):
            if _complex_scalar(a) and loop_dtype.kind != "c":
                return None  # cast by NumPy's rules on the general path
            strides.append([0] * len(shape))
        elif _native_array(a) and a.dtype == loop_dtype:
            own = [0 if n == 1 else s for n, s in zip(a.shape, a.strides)]
            strides.append([0] * (len(shape) - len(a.shape)) + own)
        else:
            return None
    order = "F" if plan.order == "F" and len(shape) > 1 else "C"
    out = c_strides(shape[::-1], dtype.itemsize)[::-1] if order == "F" else c_strides(shape, dtype.itemsize)
    if plan.outs is not None:
        o, order, item = plan.outs[0], "C", dtype.itemsize
        if not (_native_array(o) and o.dtype == dtype and _distinct_elements(o.shape, o.strides, item)):
            return None
        out = o.strides
    dims = sorted(range(len(shape)), key=lambda d: -abs(out[d]))  # (stable: C order for ties)
    merged, steps = collapse(tuple(shape[d] for d in dims), [[s[d] for d in dims] for s in (*strides, out)])
    if not merged:
        return None
    offsets = np.array([s[:-1] for s in steps], np.int64).reshape(len(steps), len(merged) - 1)
    padded = tuple((i, (None,) * (len(shape) - len(a.shape))) for i, a in enumerate(plan.inputs)
                   if a.is_array and not _is_scalar(a) and len(a.shape) < len(shape))
    return Rows(np.array(merged, np.int64), np.ascontiguousarray(offsets.T),
                np.array([s[-1] for s in steps], np.int64), order, padded)


def _distinct_elements(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> bool:
    """Whether no two elements of an array of ``shape`` and byte ``strides`` share memory (an
    ``out=`` made with ``as_strided`` may repeat one: NumPy writes it in its own order)."""
    span = itemsize
    for n, s in sorted(((n, abs(s)) for n, s in zip(shape, strides) if n > 1), key=lambda p: p[1]):
        if s < span:
            return False
        span += s * (n - 1)
    return True


def _rows_ufunc(spec: KernelSpec, compiled: CpuKernel, plan: Plan, rows: Rows, threaded: bool) -> Executor:
    """The executor of a call on the rows loops (:func:`_rows_plan`); threaded only for kernels
    that cannot raise (see :func:`_raises_from_threads`), and for calls of at least
    :data:`.loops.MIN_CHUNK` elements: below, the threaded loop would run one chunk, and its
    compilation (2 to 3 s on 2 cores, per number of dimensions) would buy nothing."""
    threaded = threaded and plan.size >= loops.MIN_CHUNK
    serial, parallel = compiled.rows(plan.loop, wide=threaded or plan.size >= loops.WIDE_MIN)
    shape, dtype = plan.out_shapes[0], plan.result_dtype
    tables = (_array_type(t.dtype, t.ndim) for t in (rows.shape, rows.offsets, rows.steps))
    run = compiled.compile_loop(parallel if threaded else serial,
                                (_array_type(dtype, len(shape), "A"), *tables, _numba_args(plan, len(shape))))
    ints, cores, signature = _int_scalars(plan), (0,) * spec.nin, plan.loop.compiled.types

    def rerun(inputs: tuple[Any, ...]) -> int:  # (NumPy's bits: the inputs broadcast whole)
        ufunc = compiled.numba_object(serial=True, loop=plan.loop.compiled).ufunc
        return fpflags.numpy_status(lambda: ufunc(*inputs, casting="unsafe", signature=signature))

    def execute(inputs: tuple[Any, ...], outs: Any, where: Any, stream: Any) -> tuple[Any, ...]:
        args = _loop_args(inputs, outs, ints, keep_strides=True)  # (planned from their strides)
        for i, missing in rows.padded:  # the loop's number of dimensions (broadcasting the same)
            args[i] = args[i][missing]
        args = tuple(args)
        out = np.empty(shape, dtype, order=rows.order) if outs is None else outs[0]
        raw = run(out, rows.shape, rows.offsets, rows.steps, args)
        if raw:
            report(fpflags.TO_NUMPY[raw], spec.name, lambda s: fpflags.refine(rerun, args, cores, s))
        return (out,) if outs is None else outs

    return execute


def _numba_args(plan: Plan, ndim: int | None = None) -> Any:
    """Numba type of the flat loop's ``*args``: the tuple of inputs, as Numba's dispatcher folds
    them at call time (so that the specialization compiled here is the one the call finds).
    Python floats and ints arrive as float64 (see :func:`_int_scalars`; an integer loop's
    Python ints are NumPy scalars by now, see ``dispatch.operands``), complex numbers as
    complex128, NumPy scalars as their own type: the loop casts each value to its type."""
    result = []
    for a in plan.inputs:
        if a.is_array:
            # (``ndim``: every array as the rows loops take it, any layout, that many dimensions)
            given = _array_type(a.dtype, len(a.shape)) if ndim is None else _array_type(a.dtype, ndim, "A")
            result.append(given)
        elif a.role == SCALAR:
            result.append(_PYTHON_SCALARS.get(a.dtype, nbtypes.float64))
        else:
            result.append(from_dtype(a.dtype))
    return nbtypes.BaseTuple.from_types(tuple(result))


_PYTHON_SCALARS = {bool: nbtypes.boolean, complex: nbtypes.complex128}


def _int_scalars(plan: Plan) -> list[int]:
    """Inputs that are Python ints: passed as floats (Numba would refuse ints past int64; the
    value the loop computes with is the same)."""
    return [i for i, a in enumerate(plan.inputs) if a.role == SCALAR and a.dtype is int]


def _loop_args(inputs: tuple[Any, ...], outs: Any, ints: list[int], same_is_safe: bool = True,
               keep_strides: bool = False) -> list[Any]:
    """The inputs as a flat loop takes them: Python ints as floats, and read from a copy where
    they overlap an ``out=`` array (see :func:`.base.read_before_write`)."""
    args = list(inputs)
    for i in ints:
        args[i] = float(args[i])
    return args if outs is None else read_before_write(args, outs, same_is_safe, keep_strides)


def _elementwise(plan: Plan) -> bool:
    """Whether every operand of ``plan`` is elementwise (no core dimensions): only then may an
    input be the very memory of an output without a copy."""
    return not any(plan.cores)


def _checked(spec: KernelSpec, threaded: Callable[..., int]) -> Callable[..., int]:
    """A parallel flat loop that returns its floating-point status, and raises where it
    returns an element too (see :func:`.loops.ufunc_loops`: the kernel raised on a thread, and
    not when run again on that element's values)."""
    low = (1 << fpflags.STATUS_BITS) - 1

    def run(*args: Any) -> int:
        result = threaded(*args)
        if result > low:
            raise RuntimeError(
                f"kernel {spec.name!r} raised an exception on a thread of target 'parallel' at "
                f"loop element {(result >> fpflags.STATUS_BITS) - 1}, and none when run again "
                "on the same values: a kernel's result must depend on its arguments only")
        return result & low

    return run


def _report(spec: KernelSpec, raw: int, inputs: Any, cores: tuple[int, ...],
            rerun: Callable[[tuple[Any, ...]], int],
            rerun_rows: Callable[[tuple[Any, ...], int, int], int] | None = None,
            replacing: Replacing | None = None, where: Any = None) -> None:
    """Report the status ``raw`` (the C library's bits) that a flat loop returned for
    ``inputs`` through NumPy's error handling; ``rerun(inputs)`` runs the same loop again into
    scratch outputs and returns its status, ``rerun_rows(inputs, lo, hi)`` (where the loop can
    run on rows ``lo:hi`` of its shape) on those rows, ``replacing`` (where given: see
    :func:`_replacing`, with the mask ``where``) refines in a compiled loop (for
    :func:`.fpflags.refine`)."""
    by_rows = None if rerun_rows is None else (
        lambda ins, lo, hi: fpflags.TO_NUMPY[rerun_rows(ins, lo, hi)])
    compiled = None if replacing is None else (
        lambda finite_too, wanted: replacing(tuple(inputs), where, finite_too, wanted))

    def refine(status: int) -> int:
        return fpflags.refine(lambda ins: fpflags.TO_NUMPY[rerun(ins)], tuple(inputs), cores, status,
                              by_rows, compiled, where)

    report(fpflags.TO_NUMPY[raw], spec.name, refine)


#: From this many loop elements a flat loop's refinement (:func:`.fpflags.refine`) runs in a
#: compiled loop of its own: below, its compilation (once per call signature and machine, kept
#: on disk) would cost more than refining in NumPy passes does; above, those passes' copies
#: cost more and more (clamp on 60,000 float64 with 1% NaN: 524 us in NumPy passes, their
#: fresh pages most of it, 37 us compiled, 15 us unchecked; 2-core AMD EPYC).
COMPILED_REFINEMENT_MIN = 1 << 13


Replacing = Callable[[tuple[Any, ...], Any, bool, int], int]


def _replacing(compiled: CpuKernel, plan: Plan, parallel: bool) -> Replacing | None:
    """``replacing(inputs, where, finite_too, wanted)`` for :func:`_report`: a flat loop's
    refinement in the compiled loops of :func:`.loops.refining_loops` (NumPy's bits; 0 where
    every element computed has a special argument; ``where``: ``None``, or the masked loop's
    mask as it takes it), for calls of :data:`COMPILED_REFINEMENT_MIN` elements and more of a
    kernel that cannot raise; else ``None``."""
    if plan.size < COMPILED_REFINEMENT_MIN or not fpflags.ENABLED or compiled.may_raise(plan.loop):
        return None
    dtype = plan.result_dtype
    where_type = nbtypes.none if plan.where is None else _array_type(plan.where.dtype, len(plan.where.shape))
    argtypes = (nbtypes.int64, _array_type(dtype, 1), nbtypes.int64, where_type, _numba_args(plan))
    low = (1 << fpflags.STATUS_BITS) - 1

    @functools.cache
    def entry(finite_too: bool) -> Callable[..., int]:
        return compiled.compile_loop(compiled.refining(plan.loop)[finite_too][parallel], argtypes)

    def replacing(inputs: tuple[Any, ...], where: Any, finite_too: bool, wanted: int) -> int:
        scratch = np.empty(loops.REFINE_BLOCK, dtype)
        raw = entry(finite_too)(plan.size, scratch, fpflags.to_raw(wanted), where, inputs)
        return 0 if raw < 0 else fpflags.TO_NUMPY[raw & low]

    return replacing


def _flat_ufunc(spec: KernelSpec, compiled: CpuKernel, plan: Plan, order: str, parallel: bool) -> Executor:
    loop, masked, threaded = compiled.loops(plan.loop, wide=parallel or plan.size >= loops.WIDE_MIN)
    ints = _int_scalars(plan)
    transposed = order == "F"  # F-contiguous arrays, seen through their C-contiguous transposes
    shape, dtype = plan.out_shapes[0], plan.result_dtype
    out_type = _array_type(dtype, len(shape))
    if plan.where is not None:
        where_type = _array_type(plan.where.dtype, len(plan.where.shape))
        run = compiled.compile_loop(masked, (out_type, where_type, _numba_args(plan)))
    elif parallel:
        run = _checked(spec, compiled.compile_loop(threaded, (out_type, _numba_args(plan))))
    else:
        run = compiled.compile_loop(loop, (out_type, _numba_args(plan)))

    guard = overlap_guard(plan)
    cores = (0,) * spec.nin
    replacing = _replacing(compiled, plan, parallel)

    def rows(lo: int, hi: int) -> np.ndarray:  # scratch for rows lo:hi of the loop
        return np.empty((hi - lo, *shape[1:]), dtype)

    if not ints and not transposed and plan.where is None:
        def rerun(inputs: tuple[Any, ...]) -> int:
            return run(np.empty(shape, dtype), inputs)

        def rerun_rows(inputs: tuple[Any, ...], lo: int, hi: int) -> int:
            return run(rows(lo, hi), inputs)

        def execute(inputs: tuple[Any, ...], outs: Any, where: Any, stream: Any) -> tuple[Any, ...]:
            if outs is None:
                out = np.empty(shape, dtype)
                raw = run(out, inputs)
                if raw:
                    _report(spec, raw, inputs, cores, rerun, rerun_rows, replacing)
                return (out,)
            inputs = guard(inputs, outs)
            raw = run(outs[0], inputs)
            if raw:
                _report(spec, raw, inputs, cores, rerun, rerun_rows, replacing)
            return outs

        return execute

    if not ints and not transposed and plan.outs is not None:
        def execute_masked(inputs: tuple[Any, ...], outs: Any, where: Any, stream: Any) -> tuple[Any, ...]:
            where, inputs = mask_before_write(where, outs), guard(inputs, outs)
            raw = run(outs[0], where, inputs)
            if raw:
                _report(spec, raw, inputs, cores, lambda ins: run(np.empty(shape, dtype), where, ins),
                        lambda ins, lo, hi: run(rows(lo, hi), where[lo:hi], ins), replacing, where)
            return outs

        return execute_masked

    def compute(args: list[Any], out: np.ndarray, masks: tuple[Any, ...]) -> int:
        if transposed:
            out, masks, args = out.T, tuple(m.T for m in masks), [getattr(a, "T", a) for a in args]
        return run(out, *masks, tuple(args))

    # (Python int scalars converted, F-ordered arrays as their transposes, as compute passes them)
    general = None if replacing is None or not transposed else (
        lambda ins, mask, finite_too, wanted: replacing(tuple(getattr(a, "T", a) for a in ins),
                                                        None if mask is None else mask.T, finite_too, wanted))

    def execute_general(inputs: tuple[Any, ...], outs: Any, where: Any, stream: Any) -> tuple[Any, ...]:
        args = _loop_args(inputs, outs, ints)
        out = outs[0] if outs is not None else np.empty(shape, dtype, order=order)
        masks = () if where is True else (mask_before_write(where, (out,)),)
        raw = compute(args, out, masks)
        if raw:
            _report(spec, raw, args, cores,
                    lambda ins: compute(list(ins), np.empty(shape, dtype, order=order), masks),
                    None, general or replacing, masks[0] if masks else None)
        return outs if outs is not None else (out,)

    return execute_general


def _flat_gufunc(spec: KernelSpec, compiled: CpuKernel, plan: Plan, order: str, parallel: bool) -> Executor:
    loop, masked, threaded = compiled.loops(plan.loop)
    n = plan.size
    # One loop element (a fused reduction to one value) leaves the threads nothing to share:
    # the serial loop, the same bits, with no parallel loop to compile for it (the parallel
    # loops would run it on the caller's thread anyway: see loops.MAX_CHUNKS).
    run = masked if plan.where is not None else threaded if parallel and n > 1 else loop
    ints = _int_scalars(plan)
    # Arrays as the loop takes them: ``(n, *core)`` (``(n,)`` without core dimensions), a
    # ``()`` output as ``(n, 1)``; ``None`` where the array already has that shape.
    rows = [((n, *a.shape[len(a.shape) - core:]) if core else (n,)) if a.is_array else None
            for a, core in zip(plan.inputs, plan.cores)]
    rows = [r if r is not None and r != a.shape else None for r, a in zip(rows, plan.inputs)]
    # Inputs passed whole to every row (see _whole): (index, core shape).
    whole = [(i, a.shape[len(a.shape) - core:]) for i, (a, core) in enumerate(zip(plan.inputs, plan.cores))
             if a.is_array and _whole(plan, a, core)]
    for i, _ in whole:
        rows[i] = None
    out_rows = [(n, *shape[len(shape) - core:]) if core else (n, 1)
                for shape, core in zip(plan.out_shapes, plan.cores[spec.nin:])]
    dtypes = plan.loop.outputs

    def args_type(whole_repeated: bool) -> Any:
        """The loop's inputs' types: a whole input as its core repeated for every row (layout
        ``A``: see :func:`.loops.elements`), as calls pass it, or (``whole_repeated`` false)
        as rows, as the floating-point check's reruns copy it."""
        cores_of = dict(whole)
        return nbtypes.BaseTuple.from_types(tuple(
            _array_type(a.dtype, 1 + len(cores_of[i]), "A" if whole_repeated else "C") if i in cores_of
            else _array_type(a.dtype, len(r or a.shape)) if a.is_array else t
            for i, (a, r, t) in enumerate(zip(plan.inputs, rows, _numba_args(plan)))))

    outs_type = nbtypes.Tuple(tuple(_array_type(d, len(r)) for d, r in zip(dtypes, out_rows)))
    mask_types = () if plan.where is None else (_array_type(plan.where.dtype, len(plan.where.shape)),)
    threads = run is threaded
    run = compiled.compile_loop(run, (outs_type, *mask_types, args_type(True)))
    if threads:
        run = _checked(spec, run)
    by_rows: list[Callable[..., int]] = []  # (with whole inputs: the loop reruns take, made on first use)

    def rerun(masks: tuple[Any, ...], inputs: tuple[Any, ...]) -> int:
        """The loop's status on ``inputs`` (the floating-point check's copies, see
        :func:`.fpflags.refine`), into scratch outputs. Whole inputs arrive there copied to
        the loop's rows, which a loop compiled for rows takes."""
        if not whole:
            return run(scratch(), *masks, inputs)
        if not by_rows:
            by_rows.append(compiled.compile_loop(masked if masks else loop,
                                                 (outs_type, *mask_types, args_type(False))))
        inputs = tuple(np.ascontiguousarray(a) if isinstance(a, np.ndarray) else a for a in inputs)
        return by_rows[0](scratch(), *masks, inputs)

    elementwise = _elementwise(plan)
    cores = plan.cores[: spec.nin]

    def scratch(lo: int = 0, hi: int = n) -> tuple[np.ndarray, ...]:  # (rows lo:hi of the loop)
        return tuple(np.empty((hi - lo, *r[1:]), d) for r, d in zip(out_rows, dtypes))

    # (what each call does, listed once: a small call's time was mostly its Python)
    reshaped = [(i, shape) for i, shape in enumerate(rows) if shape is not None]
    allocated = list(zip(plan.out_shapes, dtypes))

    if not ints and not any(rows) and not whole and out_rows == list(plan.out_shapes):
        guard = overlap_guard(plan, elementwise)

        def execute_flat(inputs: tuple[Any, ...], outs: Any, where: Any, stream: Any) -> tuple[Any, ...]:
            if outs is None:
                outs = tuple([np.empty(shape, d) for shape, d in allocated])
            else:
                inputs = guard(inputs, outs)
            masks = () if where is True else (mask_before_write(where, outs),)
            raw = run(outs, *masks, inputs)
            if raw:
                _report(spec, raw, inputs, cores, lambda ins: run(scratch(), *masks, ins),
                        lambda ins, lo, hi: run(scratch(lo, hi), *(m[lo:hi] for m in masks), ins))
            return outs

        return execute_flat

    def execute(inputs: tuple[Any, ...], outs: Any, where: Any, stream: Any) -> tuple[Any, ...]:
        args = _loop_args(inputs, outs, ints, elementwise)
        outs = tuple([np.empty(shape, d) for shape, d in allocated]) if outs is None else tuple(outs)
        for i, shape in reshaped:
            args[i] = args[i].reshape(shape)
        looped = args
        if whole:
            looped = list(args)
            for i, core in whole:  # (the core repeated for every row: a stride of 0 between them)
                given = args[i] = args[i].reshape(core)
                looped[i] = np.ndarray((n, *core), given.dtype, given, strides=(0, *given.strides))
        shaped = tuple([o if o.shape == r else o.reshape(r) for o, r in zip(outs, out_rows)])
        masks = () if where is True else (mask_before_write(where, outs),)
        raw = run(shaped, *masks, tuple(looped))
        if raw:
            _report(spec, raw, args, cores, lambda ins: rerun(masks, ins))
        return outs

    return execute


# -- everything else: the Numba ufunc ------------------------------------------------------------------
#: Loop elements computed at a time where results go through a buffer (a masked or oddly laid
#: out ``out=``, a cast result): the buffer is a small constant (2 MiB of float64), not a
#: temporary the size of the output.
BLOCK_ELEMENTS = 1 << 18


def _scalar_casts(plan: Plan, dtypes: tuple[np.dtype, ...]) -> list[tuple[int, Callable[[Any], Any]]]:
    """``(input, cast)`` for each Python float into an integer loop and each complex number into
    a real one (``casting="unsafe"``): NumPy's cast of its value, which the loop type's own
    constructor refuses for some (1e30, NaN, 1j)."""
    return [(i, scalar_cast(d)) for i, (a, d) in enumerate(zip(plan.inputs, dtypes))
            if casts_scalar(a.cls, d)]


class _LoopRuns:
    """One call's runs of a Numba ufunc's loops through NumPy, with the floating-point status
    NumPy read after each (:func:`.fpflags.numpy_status`) and its inputs, reported once after
    the call as a flat loop's status is: under the kernel's name, at the caller's line, and
    refined (the invalid that vector compares raise for NaN arguments is dropped), where NumPy
    itself would have reported all of it from inside gpufuncs, under the Python function's name.

    ``rerun(inputs)`` runs the loop again on ``inputs`` into new outputs and returns its status.
    """

    __slots__ = ("cores", "rerun", "runs")

    def __init__(self, rerun: Callable[[tuple[Any, ...]], int], cores: tuple[int, ...]) -> None:
        self.rerun, self.cores = rerun, cores
        self.runs: list[tuple[int, tuple[Any, ...]]] = []

    def run(self, loop: Callable[[], Any], inputs: Sequence[Any]) -> None:
        """``loop()``, which runs the loop on ``inputs``, its status kept."""
        status = fpflags.numpy_status(loop)
        if status:  # (the loop's view of its arrays: subclasses' data)
            seen = tuple(np.asarray(a) if isinstance(a, np.ndarray) else a for a in inputs)
            self.runs.append((status, seen))

    def report(self, name: str) -> None:
        """Report what the runs raised (see :func:`gpufuncs.targets.fpstatus.report`)."""
        if not self.runs:
            return
        status = functools.reduce(operator.or_, (s for s, _ in self.runs), 0)

        def refine(_: int) -> int:
            return functools.reduce(operator.or_, (fpflags.refine(self.rerun, inputs, self.cores, s)
                                                   for s, inputs in self.runs), 0)

        report(status, name, refine)


def _numba_objects(compiled: CpuKernel, plan: Plan, threaded: bool,
                   unwrap: bool) -> tuple[Any, Callable[[], Any]]:
    """``(serial, now)``: the serial Numba ufunc (or gufunc) object of ``plan``'s loop (its real
    ``np.ufunc`` if ``unwrap``), and ``now()``, the one a call runs now. Numba's parallel object
    runs its loop on threads whose floating-point status NumPy never reads (sqrt(-inf) under
    ``np.errstate(invalid='raise')`` returned NaN silently): it runs only calls whose every kind
    NumPy ignores (or all of them where the status is not read at all)."""
    def made(serial: bool) -> Any:
        found = compiled.numba_object(serial=serial, loop=plan.loop.compiled)
        return getattr(found, "ufunc", found) if unwrap else found

    serial = made(True)
    if not threaded:
        return serial, lambda: serial
    threads = made(False)
    if not fpflags.ENABLED:
        return serial, lambda: threads
    return serial, lambda: threads if ignoring_all() else serial


def _numba_ufunc(spec: KernelSpec, compiled: CpuKernel, plan: Plan, threaded: bool) -> Executor:
    serial, ufunc_now = _numba_objects(compiled, plan, threaded, unwrap=True)  # (DUFunc: its np.ufunc)
    signature = plan.loop.compiled.types
    shape, dtype = plan.out_shapes[0], plan.result_dtype
    transposed = plan.order == "F" and len(shape) > 1
    # Numba's @vectorize loop (0.68, ``wrappers.build_ufunc_wrapper``) takes its contiguous
    # path whenever every *input* has a unit step, and then writes the output contiguously
    # too, ignoring its step: an ``out`` NumPy iterates with another step gets wrong values,
    # or writes past its end (an input copied at run time, or buffered by NumPy, has a unit
    # step whatever the call signature says). So the loop only ever writes a C-contiguous
    # array: NumPy iterates one in C order with a unit inner step, whatever the other
    # operands' order (an unaligned or byte-swapped one through a contiguous buffer). Any
    # other ``out`` gets its values through such a buffer (see below).
    direct = plan.outs is not None and _c_contiguous(plan.outs[0])

    # the ufunc would convert a Python scalar with the loop type's constructor (1e30, NaN, 1j)
    scalars = _scalar_casts(plan, plan.loop.compiled.inputs)
    cores = (0,) * spec.nin

    def rerun(inputs: tuple[Any, ...]) -> int:
        return fpflags.numpy_status(lambda: serial(*inputs, casting="unsafe", signature=signature))

    def compute(runs: _LoopRuns, inputs: list[Any], out: np.ndarray) -> None:
        for i, cast in scalars:
            inputs[i] = cast(inputs[i])
        ufunc = ufunc_now()
        # The casts were checked by dispatch against the caller's ``casting=``.
        runs.run(lambda: ufunc(*inputs, out=out, casting="unsafe", signature=signature), inputs)

    def execute(inputs: tuple[Any, ...], outs: Any, where: Any, stream: Any) -> tuple[Any, ...]:
        runs = _LoopRuns(rerun, cores)
        results = produce(runs, list(inputs), outs, where)
        runs.report(spec.name)
        return results

    def produce(runs: _LoopRuns, args: list[Any], outs: Any, where: Any) -> tuple[Any, ...]:
        if outs is None:
            if not transposed:
                out = np.empty(shape, dtype)
                compute(runs, args, out)
                return (out,)
            # order="F": computed into the C-contiguous transpose of an F-ordered array.
            out = np.empty(shape[::-1], dtype).T
            compute(runs, [np.broadcast_to(a, shape).T if np.ndim(a) else a for a in args], out.T)
            return (out,)
        given = outs[0]
        args = read_before_write(args, outs)
        if where is True and direct:
            compute(runs, args, given)
            return (given,)
        # Numba's ufunc loops take no write mask, and other layouts of ``out`` need a buffer:
        # compute block by block into one, then copy (kernels are pure: this only costs time).
        where = mask_before_write(where, outs)
        buffer = np.empty(min(BLOCK_ELEMENTS, given.size), dtype)
        for index in _blocks(shape, BLOCK_ELEMENTS):
            target = given[index]
            block = [_block_of(a, shape, index) for a in args]
            mask = _block_of(where, shape, index)
            if mask is True:
                part = buffer[: target.size].reshape(target.shape)
                compute(runs, block, part)
                copy_cast(target, part)
                continue
            # Only the elements the mask selects are computed, as NumPy's masked loops do: the
            # kernel never sees (and cannot raise on) the others.
            mask = np.broadcast_to(mask, target.shape)
            picked = [np.broadcast_to(a, target.shape)[mask] if np.ndim(a) else a for a in block]
            part = buffer[: np.count_nonzero(mask)]
            compute(runs, picked, part)
            target[mask] = part
        return (given,)

    return execute


def _c_contiguous(a: Arg) -> bool:
    return a.cls is np.ndarray and is_contiguous(a.shape, a.strides, a.dtype.itemsize)


def _numba_gufunc(compiled: CpuKernel, plan: Plan, threaded: bool) -> Executor:
    serial, ufunc_now = _numba_objects(compiled, plan, threaded, unwrap=False)
    loop, loop_shape = plan.loop.compiled, plan.loop_shape
    rows = max(1, BLOCK_ELEMENTS // max(1, *(math.prod(s[len(loop_shape):]) for s in plan.out_shapes)))

    elementwise = _elementwise(plan)
    scalars = _scalar_casts(plan, loop.inputs)  # np.asarray(1e30, dtype=np.int64) below would refuse it
    cores = plan.cores[: compiled.spec.nin]
    out_cores = [s[len(loop_shape):] for s in plan.out_shapes]

    def rerun(inputs: tuple[Any, ...]) -> int:  # (the outputs are the gufunc's last inputs)
        rows = np.broadcast_shapes(*(np.shape(a)[: np.ndim(a) - c] for a, c in zip(inputs, cores)))
        outs = [np.empty(rows + core, d) for core, d in zip(out_cores, loop.outputs)]
        return fpflags.numpy_status(lambda: serial(*inputs, *outs))

    def execute(inputs: tuple[Any, ...], outs: Any, where: Any, stream: Any) -> tuple[Any, ...]:
        runs = _LoopRuns(rerun, cores)
        results = produce(runs, ufunc_now(), inputs, outs, where)
        runs.report(compiled.spec.name)
        return results

    def produce(runs: _LoopRuns, ufunc: Any, inputs: Any, outs: Any, where: Any) -> tuple[Any, ...]:
        if scalars:
            inputs = list(inputs)
            for i, cast in scalars:
                inputs[i] = cast(inputs[i])
        if outs is not None:
            inputs = read_before_write(list(inputs), outs, elementwise)
            where = mask_before_write(where, outs)
        results = outs or tuple(np.empty(s, d, order=plan.order)
                                for s, d in zip(plan.out_shapes, plan.result_dtypes))
        # Outputs are writable *inputs* of the Numba gufunc, so NumPy would cast a mismatched
        # (or byte-swapped) dtype, or copy an unaligned array, into a temporary and the writes
        # would be lost: such outputs (alignment is read per call: it is not in the call
        # signature), and masked ones, go through buffers, a block of rows at a time (as do
        # inputs that need a cast).
        if where is True and all(r.dtype == d and r.flags.aligned for r, d in zip(results, loop.outputs)):
            args = [np.asarray(a, dtype=d) for a, d in zip(inputs, loop.inputs)]
            runs.run(lambda: ufunc(*args, *results), args)
            return tuple(results)
        shapes = [loop_shape + np.shape(a)[np.ndim(a) - c:] if c else loop_shape
                  for a, c in zip(inputs, plan.cores)]
        for index in _blocks(loop_shape, rows):
            args = [np.asarray(_block_of(a, s, index), dtype=d)
                    for a, s, d in zip(inputs, shapes, loop.inputs)]
            mask = _block_of(where, loop_shape, index)
            if mask is not True:  # only the rows the mask selects are computed (see _numba_ufunc)
                mask = np.broadcast_to(mask, np.broadcast_to(False, loop_shape)[index].shape)
                args = [np.broadcast_to(a, mask.shape + a.shape[a.ndim - c:] if c else mask.shape)[mask]
                        if a.ndim else a for a, c in zip(args, plan.cores)]
            bufs = [np.empty(r[index][mask].shape if mask is not True else r[index].shape, d)
                    for r, d in zip(results, loop.outputs)]
            runs.run(lambda: ufunc(*args, *bufs), args)  # noqa: B023 - run at once
            for r, buf in zip(results, bufs):
                if mask is True:
                    copy_cast(r[index], buf)
                else:
                    r[index][mask] = buf
        return tuple(results)

    return execute


def _blocks(shape: tuple[int, ...], limit: int) -> Iterator[tuple[Any, ...]]:
    """Indices that cut an array of ``shape`` into blocks of at most ``limit`` elements: runs
    along one axis, whole in the axes after it (single elements of the last axis if one row of
    it is already longer). An array within ``limit`` is one block, ``(...,)``."""
    inner, axis = 1, len(shape)
    while axis > 0 and inner * shape[axis - 1] <= limit:
        axis -= 1
        inner *= shape[axis]
    if axis == 0:
        yield (Ellipsis,)  # the whole array, as an array even when it is 0-d
        return
    axis -= 1
    step = max(1, limit // inner)
    for outer in np.ndindex(*shape[:axis]):
        for lo in range(0, shape[axis], step):
            yield (*outer, slice(lo, lo + step))


def _block_of(a: Any, shape: tuple[int, ...], index: tuple[Any, ...]) -> Any:
    """Argument ``a`` (an array, a scalar, or ``True`` for no mask) broadcast to ``shape``, at
    ``index``: a view, as broadcasting never materializes; scalars as they are."""
    if np.ndim(a) == 0:
        return a
    return np.broadcast_to(a, shape)[index]
