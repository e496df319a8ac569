"""The CPU's floating-point status, cleared and read inside the compiled loops.

Every flat loop (:mod:`.loops`) clears the status before its first element and reads it after
its last, as NumPy does around an inner loop: two calls of the C library's ``feclearexcept`` and
``fetestexcept`` per loop (per chunk on ``parallel``, on the chunk's own thread), no Python call
more, and nothing per element. The loops return what they read; the executor hands a non-zero
status to NumPy's error handling (:func:`gpufuncs.targets.fpstatus.report`).

The functions reach compiled code by name (``gpufuncs_fetestexcept``, registered with LLVM's
symbol table at import), not as ctypes pointers, so that the loops stay cacheable on disk.

What the hardware says is what the compiled arithmetic did, and vectorized code does more than
the scalar source says in two ways:

* an ordered comparison (``<``, ``<=``, ``>``, ``>=``) of a NaN compiles to a *signaling*
  vector compare, which raises 'invalid', where NumPy's comparisons and scalar code do not;
* both sides of a branch may be computed for every element, and one side's arithmetic can
  raise for elements that take the other (``1 / x`` under ``if x != 0``).

The first is undone after the fact (:func:`refine`): when the loop reported 'invalid' and some
input element is NaN, the loop runs once more with each such element's arguments replaced by
those of an element without NaN (in a compiled loop that replaces them as it reads them, for
large plain calls: :func:`.loops.refining_loops`), and only that run's 'invalid' counts;
likewise for overflow, underflow and divide-by-zero and elements with a NaN or infinite
argument (the vector math's ``exp`` scales an infinite argument's result, which raises
overflow; IEEE arithmetic on infinities raises none of the three). It costs a second pass,
only on calls whose flags would be acted on (not ignored) and that have such arguments. The
second is the kernel's to avoid (``docs/semantics.md``).

``GPUFUNCS_FPSTATUS=0`` in the environment compiles loops that neither clear nor read the
status (for measuring its cost); the setting is part of the loops' cache key.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
import threading
from collections.abc import Callable
from typing import Any

import llvmlite.binding as ll
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ..fpstatus import DIVIDE, INVALID, OVERFLOW, UNDERFLOW

# The C library's FE_* bits (fenv.h) of the four kinds NumPy reports, per platform.
_X86 = {"invalid": 0x01, "divide": 0x04, "over": 0x08, "under": 0x10}
_ARM = {"invalid": 0x01, "divide": 0x02, "over": 0x04, "under": 0x08}
_MSVC = {"invalid": 0x10, "divide": 0x08, "over": 0x04, "under": 0x02}
_NPY = {"invalid": INVALID, "divide": DIVIDE, "over": OVERFLOW, "under": UNDERFLOW}


def _platform_bits() -> dict[str, int] | None:
    machine, system = platform.machine().lower(), platform.system()
    if system == "Windows":
        return _MSVC if machine in ("amd64", "x86_64", "arm64") else None
    if machine in ("x86_64", "amd64", "i686", "i386"):
        return _X86
    if machine in ("aarch64", "arm64"):
        return _ARM
    return None


def _libm() -> Any:
    names = ["ucrtbase"] if platform.system() == "Windows" else [ctypes.util.find_library("m"), None]
    for name in names:
        try:
            lib = ctypes.CDLL(name)
            lib.fetestexcept, lib.feclearexcept  # noqa: B018 - both must exist
            return lib
        except (OSError, AttributeError, TypeError):
            continue
    return None


def _register() -> dict[str, int] | None:
    """Register the two functions with LLVM under gpufuncs' names; ``None`` where unsupported."""
    bits, lib = _platform_bits(), _libm()
    if bits is None or lib is None or os.environ.get("GPUFUNCS_FPSTATUS", "1") == "0":
        return None
    for name in ("fetestexcept", "feclearexcept"):
        ll.add_symbol(f"gpufuncs_{name}", ctypes.cast(getattr(lib, name), ctypes.c_void_p).value)
    return bits


_BITS = _register()

#: Whether the loops read the status (the platform is known and ``GPUFUNCS_FPSTATUS`` is not 0).
ENABLED = _BITS is not None
_MASK = sum(_BITS.values()) if _BITS else 0

#: The loops' status (the C library's bits) as NumPy's bits, for every value they can return.
TO_NUMPY = [sum(_NPY[k] for k, b in (_BITS or {}).items() if raw & b) for raw in range(_MASK + 1)]

def to_raw(bits: int) -> int:
    """NumPy's bits ``bits`` as the loops' status bits (the C library's)."""
    return sum(b for k, b in (_BITS or {}).items() if bits & _NPY[k])


#: The loops' status fits below this bit (the parallel loops return a failed index above it).
STATUS_BITS = 8


def _call(builder: ir.IRBuilder, name: str) -> ir.Value:
    i32 = ir.IntType(32)
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(i32, [i32]), f"gpufuncs_{name}")
    return builder.call(fn, [ir.Constant(i32, _MASK)])


@intrinsic
def clear_status(typingctx: Any) -> Any:
    """Clear the four flags of this thread's floating-point status (nothing if not ENABLED)."""

    def codegen(context, builder, sig, args):
        if ENABLED:
            _call(builder, "feclearexcept")
        return context.get_dummy_value()

    return types.none(), codegen


@intrinsic
def read_status(typingctx: Any) -> Any:
    """This thread's flags since :func:`clear_status` (the C library's bits; 0 if not ENABLED)."""

    def codegen(context, builder, sig, args):
        if not ENABLED:
            return ir.Constant(ir.IntType(64), 0)
        return builder.sext(_call(builder, "fetestexcept"), ir.IntType(64))

    return types.int64(), codegen


def cache_tag() -> str:
    """What the loops' compiled code depends on here (part of their disk-cache key)."""
    return "fp" if ENABLED else "nofp"


#: Bytes of the largest input's rows that a refinement runs at a time: the copies of the
#: inputs and the output rows stay in a core's L2 cache.
ROWS_BYTES = 1 << 19

Rerun = Callable[[tuple[Any, ...]], int]
RerunRows = Callable[[tuple[Any, ...], int, int], int]
#: ``replacing(finite_too, wanted)``: the status of the loop with each element that has a NaN
#: (``finite_too``: a NaN or infinite) argument given the arguments of the first that has none,
#: until ``wanted`` is raised; 0 where every element has one (NumPy's bits, as :func:`_without`).
Replacing = Callable[[bool, int], int]


def refine(run: Rerun, inputs: tuple[Any, ...], core: tuple[int, ...], status: int,
           run_rows: RerunRows | None = None, replacing: Replacing | None = None,
           where: np.ndarray | None = None) -> int:
    """``status`` (NumPy's bits) without what only special arguments raised (see the module
    docstring): 'invalid' is kept only if the loop raises it on the elements without a NaN
    argument, divide-by-zero, overflow and underflow only if it raises them on the elements
    whose arguments are all finite. IEEE arithmetic raises neither from NaN operands, nor
    overflow, underflow or divide-by-zero from infinite ones; vectorized code does (signaling
    comparisons of NaN, the vector math's final scaling of an infinite argument).

    ``run(inputs)`` runs the same loop on ``inputs`` into scratch outputs and returns its
    status (NumPy's bits); ``inputs`` are the loop's arguments (arrays of the loop's shape,
    plus ``core[i]`` core dimensions, and scalars). Each refinement runs the loop once more,
    with every element that has such an argument given the arguments of one that has none.
    ``run_rows(inputs, lo, hi)``, where given, runs the loop on rows ``lo:hi`` of the loop's
    shape (``inputs``: every array's rows ``lo:hi``, the scalars): the refinement then goes
    :data:`ROWS_BYTES` at a time, in copies that stay in cache, and stops at the first
    piece that confirms every flag (a call on data with NaN took 7x to 22x NumPy's time in
    fresh copies of whole arrays). ``replacing``, where given, does the same in a compiled loop
    that replaces the arguments as it reads them (see :func:`.loops.refining_loops`): no
    copies, no pass of NumPy's, and on ``parallel`` on every thread. ``where`` (the loop's
    shape), where given, is the mask of the elements the loop computes: the arguments given
    are those of one of them (an element the loop skips may be one the kernel raises on).
    """
    finite_kinds = DIVIDE | OVERFLOW | UNDERFLOW

    def without(finite_too: bool, wanted: int) -> int:
        if replacing is not None:
            return replacing(finite_too, wanted)
        return _without(run, run_rows, inputs, core, _not_finite if finite_too else np.isnan, wanted, where)

    if status & INVALID:
        status &= ~INVALID | without(False, INVALID)
    if status & finite_kinds:
        status &= ~finite_kinds | without(True, status & finite_kinds)
    return status


def _not_finite(a: Any) -> Any:
    return ~np.isfinite(a)


def _without(run: Rerun, run_rows: RerunRows | None, inputs: tuple[Any, ...], core: tuple[int, ...],
             special: Callable[[Any], Any], wanted: int, where: np.ndarray | None = None) -> int:
    """The status of the loop on ``inputs`` with every element that has an argument where
    ``special`` is true given the arguments of one that has none (all bits set when no
    element has one: nothing to refine with; 0 when every element has one); by rows where
    ``run_rows`` is given and every array has the loop's rows, until ``wanted`` is raised."""
    if any(not isinstance(a, np.ndarray) and isinstance(a, float | complex | np.inexact) and special(a)
           for a in inputs):
        return 0  # every element has such an argument
    step = n = 0
    if run_rows is not None:
        arrays = [a for a in inputs if isinstance(a, np.ndarray)]
        n = arrays[0].shape[0] if arrays and arrays[0].ndim else 0
        if n and all(a.ndim and a.shape[0] == n for a in arrays):
            step = max(1, ROWS_BYTES // max(a.nbytes // n for a in arrays))
    if n <= step:
        replaced = _replaced(inputs, core, special, where=where)
        return replaced if isinstance(replaced, int) else run(replaced)
    raised, seen = 0, False
    for lo in range(0, n, step):
        hi = min(n, lo + step)
        replaced = _replaced(tuple(a[lo:hi] if isinstance(a, np.ndarray) else a for a in inputs),
                             core, special, keep=True, where=None if where is None else where[lo:hi])
        if isinstance(replaced, int):
            continue  # every element of these rows has such an argument
        seen = True
        raised |= run_rows(replaced, lo, hi)
        if raised & wanted == wanted:
            break
    return raised if seen else 0


def _replaced(inputs: tuple[Any, ...], core: tuple[int, ...], special: Callable[[Any], Any],
              keep: bool = False, where: np.ndarray | None = None) -> tuple[Any, ...] | int:
    """``inputs`` with every element that has a special argument given the arguments of the
    first one that has none (of those ``where`` selects, if given), in copies; ``~0`` where no
    element has one (``inputs`` themselves if ``keep``), 0 where every element has one."""
    bad = None
    for a, c in zip(inputs, core):
        if isinstance(a, np.ndarray) and a.dtype.kind in "fc":
            found = special(a)
            if c:
                found = found.any(axis=tuple(range(a.ndim - c, a.ndim)))
            bad = found if bad is None else bad | found
    if bad is None or not bad.any():
        return inputs if keep else ~0  # no such argument: what the loop raised stands
    # The loop's shape (inputs that broadcast, on the Numba ufuncs' path, are copied whole)
    shapes = {a.shape[: a.ndim - c] for a, c in zip(inputs, core) if isinstance(a, np.ndarray)}
    if len(shapes) > 1 or bad.shape not in shapes:
        bad = np.broadcast_to(bad, np.broadcast_shapes(*shapes))
    unusable = bad if where is None else bad | ~np.broadcast_to(where, bad.shape)
    index = int(np.argmin(unusable.reshape(-1)))  # the first element without one (no index
    if unusable.flat[index]:                      # array: a call on NaN data pays this each call)
        return 0
    first = np.unravel_index(index, bad.shape)
    replaced = []
    for a, c in zip(inputs, core):
        if isinstance(a, np.ndarray) and a.ndim:
            whole = a if a.shape[: a.ndim - c] == bad.shape else np.broadcast_to(
                a, bad.shape + a.shape[a.ndim - c:])
            copy = whole.copy(order="K")  # the same layout: the loop was compiled for it
            copy[bad] = whole[first]  # (a core operand's rows replaced whole)
            replaced.append(copy)
        else:
            replaced.append(a)
    return tuple(replaced)


def numpy_status(run: Callable[[], Any]) -> int:
    """The status (NumPy's bits) that NumPy read after the loops ``run()`` ran through it (a
    Numba ufunc's, on the general path), caught in ``errstate``'s ``'call'`` mode rather than
    reported by NumPy: reported as the flat loops' is, refined, under the kernel's name."""
    _caught.status = 0
    token = _set_extobj(_CATCHING)
    try:
        run()
    finally:
        _reset_extobj(token)
    return _caught.status


class _Caught(threading.local):
    status = 0


_caught = _Caught()


def _catch(kind: str, flag: int) -> None:
    _caught.status |= flag


try:  # NumPy's error state as np.errstate sets it, in a quarter of the time (0.3 us, not 1.2)
    from numpy._core._ufunc_config import _extobj_contextvar, _make_extobj

    _CATCHING: Any = _make_extobj(all="call", call=_catch)
    _set_extobj, _reset_extobj = _extobj_contextvar.set, _extobj_contextvar.reset
except (ImportError, AttributeError, TypeError):  # pragma: no cover - another NumPy's internals
    _CATCHING = {"all": "call", "call": _catch}

    def _set_extobj(state: Any) -> Any:
        errstate = np.errstate(**state)
        errstate.__enter__()
        return errstate

    def _reset_extobj(errstate: Any) -> None:
        errstate.__exit__(None, None, None)
