"""Conformance against NumPy itself: the same generated call on a gpufuncs kernel and on a real
:class:`numpy.ufunc` of the same arity and dtype behaviour, on ``cpu``, ``parallel`` and ``cuda``
(the CUDA simulator, in a subprocess: ``NUMBA_ENABLE_CUDASIM`` must be set before Numba's CUDA
module is first imported; a real GPU with ``pytest -m cuda``).

The float kernels are ``a + b``, ``a * b`` and ``-a``. The references are NumPy's ``add``,
``multiply`` and ``negative``, whose float16/float32/float64 loops select and compute exactly as
a gpufuncs kernel does (float16 computes in float32 and rounds), except where docs/semantics.md
lists a deliberate difference; there the reference is the call that the difference implies:

* calls without a float16 input select among the float32 and float64 loops only (the float16
  loop is for float16 inputs, where NumPy would also compute an int8 or a bool in float16), as
  a ufunc that Numba builds with those two loops does: that ufunc, itself a real
  :class:`numpy.ufunc`, is the reference (and raises NumPy's ``TypeError`` for longdouble).

Kernels of every other kind (issue 30) are checked the same way, each by :class:`Op`: integer
``a + b`` (wrapping at the extremes), integer ``a // b`` (by zero: 0), complex ``a * b``
(infinities and NaN in either part, huge magnitudes), ``a < b`` to bool, the mixed loop
``float64(float64, int32)``, ``divmod`` of two outputs (``out=`` tuples with ``None`` entries,
positional outputs), a lazy ``a + b`` (loops learned as Numba's ``DUFunc`` learns them) and a
kernel calling two kernels. NumPy's type resolver over exactly the kernel's loops (a ufunc Numba
builds with them) selects the loop, and NumPy's own ufunc computes it (``signature=``), or the
Numba ufunc where NumPy has none; complex ``a * b`` on C-contiguous copies of the inputs, where
NumPy runs its array loop on every layout (:class:`_ArrayLoop`). Left out where NumPy computes,
each with its reason in :func:`_excluded` and the tests at the end, whichever way the call names
the loop (``dtype=`` too): NumPy's scalar complex loop for a one-element result and a NumPy bug
(``where=`` with a cast, overlapping ``out=``); a complex result's NaN parts are compared as
NaN, their sign pinned on the host by a test. What the property tests found in gpufuncs
(``dtype=`` selecting by the call's casting, a Python complex beside
float32, a Python int's ``OverflowError`` after ``out=``'s errors) is fixed and pinned there.

Each example asserts the same result (bit for bit, NaN included), dtype, shape and type (a
masked array's mask too), or the same kind of exception with every ``out=`` left untouched.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import warnings
from dataclasses import dataclass, field
from typing import Any

import numba
import numpy as np
import pytest
from hypothesis import assume, example, given, note, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import mutually_broadcastable_shapes
from test_types import types_floor_divide, types_multiply

import gpufuncs as gf

SIMULATED = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
TARGETS = ["cuda"] if SIMULATED else ["cpu", "parallel", pytest.param("cuda", marks=pytest.mark.cuda)]
PROFILE = settings.get_current_profile_name()


def _examples(ci: int) -> int:
    """``ci`` examples under the CI profile (its time budget), at most the simulator's under its
    CI profile, the profile's count otherwise."""
    if PROFILE == "ci":
        return ci
    return min(ci, settings().max_examples) if PROFILE == "ci-simulator" else settings().max_examples


# -- kernels and their references -------------------------------------------------------------
def _fd(func: Any, nin: int, loops: tuple[str, ...] = ("float32", "float64"), identity: Any = None) -> Any:
    """A real numpy.ufunc with exactly the given float loops (Numba builds it)."""
    return _built(func, [f"{t}({', '.join([t] * nin)})" for t in loops], identity)


def _built(func: Any, signatures: list[str], identity: Any = None) -> Any:
    """A real numpy.ufunc with exactly these loops, in this order (Numba builds it): NumPy's type
    resolver over them is the selection a kernel of the same loops must make."""
    built = numba.vectorize(signatures, identity=identity)(func)
    return getattr(built, "ufunc", built)


@dataclass(frozen=True)
class Op:
    """A kernel and its references.

    ``resolver`` is a real ufunc with exactly the kernel's declared loops (Numba builds it; a
    kernel of several outputs gets one of the same input loops and one output): NumPy's type
    resolution over it selects the loop. ``values`` is the NumPy ufunc that computes the selected
    loop (called with ``signature=``); where NumPy has no such ufunc (``values=None``) the
    resolver computes too. Numba's ufuncs raise NumPy's iterator ``ValueError`` for any
    ``where=`` but ``True``, so those ops are drawn without ``where=``.
    """

    kernel: Any
    numpy: Any
    fd: Any  # the resolver
    values: Any = None
    nout: int = 1
    dtypes: tuple[tuple[str, ...], ...] | None = None  # per input; None: DTYPES for each
    python: tuple[str, ...] = ("?", "q", "d")  # the Python scalars drawn: bool, int, float, complex
    out_dtypes: tuple[str, ...] = ("e", "f", "d", "g", "q", "?")
    dtype_keywords: tuple[Any, ...] = (np.float16, np.float32, np.float64, np.longdouble, np.int64)
    casting: bool = True  # draw casting=
    where: bool = True  # draw where= (False: the values come from a Numba ufunc)
    lazy: bool = False
    kinds: tuple[str, ...] = ()  # the inputs' kinds; () for KINDS
    array_loop: bool = False  # the reference reads C-contiguous copies of the inputs (_ArrayLoop)

    @property
    def nin(self) -> int:
        return self.fd.nin

    @property
    def twins(self) -> bool:
        """Whether the kernel has float16 twins of float32 loops."""
        return any("e" in t for t in self.kernel.types)

    def input_dtypes(self, i: int) -> tuple[str, ...]:
        return DTYPES if self.dtypes is None else self.dtypes[i]


# Module attributes under their registry names, so that they pickle by reference as the
# built-ins do (other tests pickle every registered kernel).
@gf.ufunc(signatures=gf.float_signatures(2), reference=np.add, identity=0.0, replace=True)
def conformance_add(a, b):
    return a + b


@gf.ufunc(signatures=gf.float_signatures(2), reference=np.multiply, identity=1.0, replace=True)
def conformance_multiply(a, b):
    return a * b


@gf.ufunc(signatures=gf.float_signatures(1), reference=np.negative, replace=True)
def conformance_negative(a):
    return -a


#: The integer loops of ``np.add`` (bool excluded) then float16 (the float32 loop's twin), float32
#: and float64, as ``tests/test_types.py::types_add``.
_ADD_LOOPS = [f"{t}({t}, {t})" for t in ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64",
                                          "uint64")] + gf.float_signatures(2)


@gf.ufunc(signatures=_ADD_LOOPS, reference=np.add, replace=True)
def conformance_int_add(a, b):
    return a + b


# Integer a // b and complex a * b: test_types.py's kernels (NumPy's floor_divide, multiply).
conformance_floor_divide, conformance_complex_multiply = types_floor_divide, types_multiply


@gf.ufunc(signatures=["boolean(int64, int64)", "boolean(float64, float64)"], reference=np.less,
          replace=True)
def conformance_less(a, b):
    return a < b


@gf.ufunc(signatures=["float64(float64, int32)"], replace=True)
def conformance_scale(x, n):
    return x * n


_DIVMOD_LOOPS = ["UniTuple(int64, 2)(int64, int64)", "UniTuple(float64, 2)(float64, float64)"]


@gf.ufunc(signatures=_DIVMOD_LOOPS, reference=np.divmod, replace=True)
def conformance_divmod(a, b):
    return divmod(a, b)


@gf.ufunc(replace=True)  # no signatures: lazy, as numba.vectorize() without them (a DUFunc)
def conformance_lazy_add(a, b):
    return a + b


_COMPOSED_LOOPS = ["int64(int64, int64)", "float64(float64, float64)"]


@gf.ufunc(signatures=_COMPOSED_LOOPS, replace=True)
def conformance_composed(a, b):
    return conformance_negative(conformance_add(a, b))


def _plain_composed(a, b):
    return -(a + b)


#: Numba's own lazy ufunc of the same function: its loops are learned as the lazy kernel's
#: must be. One pair for the whole run: both sides learn from the same calls in the same order
#: (the loops accumulate identically, which every example asserts), as in a user's session;
#: a fresh pair per example would compile every loop again for every example.
LAZY_DUFUNC = numba.vectorize()(conformance_lazy_add.spec.pyfunc)

_INTS = ("?", "b", "H", "q", "Q")
#: np.ma's __array_wrap__ masks the invalid domain of NumPy's own division ufuncs, found by their
#: identity (np.ma.core.ufunc_domain: division by zero masked, its data filled), which no other
#: ufunc gets: the division kernels are called without masked arrays.
_UNMASKED = ("array", "array", "array", "numpy-scalar", "python", "list", "matrix", "tagged", "loud")
#: Numba's ufuncs raise RuntimeError for an np.matrix that broadcasts to 3-d (NumPy's own return
#: the matrix, as gpufuncs does): the ops they compute are called without np.matrix.
_NO_MATRIX = ("array", "array", "array", "numpy-scalar", "python", "list", "masked", "tagged", "loud")
OPS = {
    "add": Op(conformance_add, np.add, _fd(conformance_add.spec.pyfunc, 2, identity=0), np.add),
    "multiply": Op(conformance_multiply, np.multiply, _fd(conformance_multiply.spec.pyfunc, 2, identity=1),
                   np.multiply),
    "negative": Op(conformance_negative, np.negative, _fd(conformance_negative.spec.pyfunc, 1), np.negative),
    # wrapping integer loops beside float ones: few dtypes, since each loop compiles
    "int_add": Op(conformance_int_add, np.add, _built(conformance_int_add.spec.pyfunc,
                                                      [*_ADD_LOOPS[:8], "float32(float32, float32)",
                                                       "float64(float64, float64)"]),
                  np.add, dtypes=((*_INTS, "e", "d"),) * 2, out_dtypes=("b", "q", "Q", "d", "?"),
                  dtype_keywords=(np.int8, np.int64, np.uint64, np.float16, np.float64, np.bool_)),
    "floor_divide": Op(conformance_floor_divide, np.floor_divide,
                       _built(conformance_floor_divide.spec.pyfunc,
                              ["int64(int64, int64)", "uint64(uint64, uint64)"]),
                       np.floor_divide, dtypes=((*_INTS, "d"),) * 2, python=("?", "q"),
                       out_dtypes=("b", "q", "Q", "d"), dtype_keywords=(np.int64, np.uint64, np.float64),
                       kinds=_UNMASKED),
    "complex_multiply": Op(conformance_complex_multiply, np.multiply,
                           _built(conformance_complex_multiply.spec.pyfunc,
                                  ["complex64(complex64, complex64)", "complex128(complex128, complex128)"]),
                           np.multiply, dtypes=(("F", "D", "f", "d", "b"),) * 2, python=("q", "d", "D"),
                           out_dtypes=("F", "D", "d"),
                           dtype_keywords=(np.complex64, np.complex128, np.float64), array_loop=True),
    "less": Op(conformance_less, np.less, _built(conformance_less.spec.pyfunc,
                                                 ["boolean(int64, int64)", "boolean(float64, float64)"]),
               np.less, dtypes=(("?", "b", "q", "Q", "f", "d"),) * 2, out_dtypes=("?", "q", "d"),
               dtype_keywords=(np.bool_, np.float64)),
    "scale": Op(conformance_scale, np.multiply, _built(conformance_scale.spec.pyfunc,
                                                       ["float64(float64, int32)"]),
                dtypes=(("e", "f", "d", "q"), ("?", "b", "i", "q")), python=("q", "d"), out_dtypes=("f", "d"),
                dtype_keywords=(np.float64, np.float32), where=False, kinds=_NO_MATRIX),
    "divmod": Op(conformance_divmod, np.divmod, _built(lambda a, b: a // b,
                                                       ["int64(int64, int64)", "float64(float64, float64)"]),
                 np.divmod, nout=2, dtypes=(("?", "b", "q", "Q", "f", "d"),) * 2, out_dtypes=("q", "d"),
                 dtype_keywords=(np.int64, np.float64, np.float32), kinds=_UNMASKED),
    "lazy_add": Op(conformance_lazy_add, np.add, LAZY_DUFUNC, np.add,
                   dtypes=(("?", "b", "q", "Q", "e", "f", "d"),) * 2, out_dtypes=("q", "f", "d"),
                   dtype_keywords=(), casting=False, lazy=True),
    "composed": Op(conformance_composed, np.negative, _built(_plain_composed, _COMPOSED_LOOPS),
                   dtypes=(("?", "b", "q", "f", "d"),) * 2, out_dtypes=("q", "f", "d"),
                   dtype_keywords=(np.int64, np.float64, np.float32), where=False, kinds=_NO_MATRIX),
}
FLOAT_OPS = ("add", "multiply", "negative")

FLOATS = ("e", "f", "d")
HALF = np.dtype(np.float16)


class _Raise:
    """A reference that raises what NumPy raised while selecting the loop."""

    __name__ = "raise"
    types: list[str] = []

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise self.error


Loop = tuple[np.dtype, ...]


def reference(op: Op, inputs: list[Any], dtype: Any,
              casting: str = "same_kind") -> tuple[Any, dict[str, Any], Loop | None]:
    """The real ufunc, and keywords to add, whose answer a kernel must give for ``inputs``, and
    the loop it computes (inputs' dtypes, then the first output's; None where NumPy selects
    none, or the Numba ufunc of the kernel's loops computes): what :func:`_excluded` asks, on
    every route, ``dtype=`` included."""
    dtypes = [_dtype_of(v) for v in inputs]
    given = tuple(np.dtype(np.bool_) if d is bool else d for d in dtypes)  # never weak
    if op.lazy:
        return _lazy_reference(op, inputs, given)
    if op.values is None:
        return _ContiguousOut(op.fd), {}, None  # Numba's ufunc of the same loops computes them
    outs = (None,) * op.fd.nout
    try:
        if dtype is None:
            loop = op.fd.resolve_dtypes((*given, *outs))
        elif np.dtype(dtype) == HALF and op.twins:
            return op.values, {}, (HALF,) * (op.nin + 1)  # the float16 twin is NumPy's float16 loop
        else:
            # NumPy 2.4's ufunc.resolve_dtypes crashes the process (a segmentation fault, np.add's
            # as well as Numba's ufuncs') on the error "cannot cast Python int to float32 under
            # the casting rule 'equiv'": the call itself says whether it raises one.
            weak = any(isinstance(d, type) for d in given)
            refused = _error_of_call(op.fd, inputs, dtype, casting, TypeError) \
                if casting == "equiv" and weak else None
            if refused is not None:
                return _Raise(refused), {}, None
            loop = op.fd.resolve_dtypes((*given, *outs), signature=(*(None,) * op.nin, np.dtype(dtype)),
                                        casting=casting)
    except TypeError:  # no loop: NumPy's TypeError, raised where NumPy raises it
        if op.nout == 1:
            return _ContiguousOut(op.fd), {}, None
        overflow = _error_of_call(op.fd, inputs, dtype, casting, OverflowError)
        if overflow is not None:  # NumPy converts a Python int to the loop type before the cast check
            return _Raise(overflow), {}, None
        lacking = ("l", "l", "d", "d")  # a loop np.divmod lacks
        return op.values, {"signature": lacking}, tuple(np.dtype(t) for t in lacking[:3])
    if dtype is None and op.twins:
        loop = _twin(given, loop)
    if dtype is not None and all(t == np.dtype(dtype) for t in loop):
        # NumPy's own dtype=: it casts a Python float into an integer loop as C does (-1.5 into
        # uint64: 2**64 - 1), where the same loop named by signature= raises OverflowError.
        return op.values, {}, loop
    return op.values, {"signature": (*loop, *loop[op.nin:] * (op.nout - 1))}, loop


def _error_of_call(resolver: Any, inputs: list[Any], dtype: Any, casting: str,
                   kind: type[BaseException]) -> BaseException | None:
    """The ``kind`` error that ``resolver`` (a ufunc of the kernel's loops, one output) raises
    when called as the kernel is: NumPy's own order of errors (its other errors are left to the
    reference call)."""
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            resolver(*inputs, dtype=dtype, casting=casting)
    except kind as exc:
        return exc
    except Exception:
        pass
    return None


class _ContiguousOut:
    """A Numba-built ufunc that writes through a C-contiguous ``out``.

    Numba's ``@vectorize`` loop (0.68, ``wrappers.build_ufunc_wrapper``) writes its output as if
    contiguous whenever every input has a unit step, whatever ``out``'s step: into a strided
    ``out=`` it writes the wrong elements. Computed into a C-contiguous array of ``out``'s shape
    and dtype (NumPy's same checks) and then copied, the reference gives NumPy's answer.
    """

    def __init__(self, ufunc: Any) -> None:
        self.ufunc = ufunc
        self.__name__ = ufunc.__name__
        self.types = ufunc.types

    def __call__(self, *args: Any, out: Any = None, **kwargs: Any) -> Any:
        nin = self.ufunc.nin
        if out is None and len(args) > nin:
            args, out = args[:nin], args[nin]
        given = out[0] if isinstance(out, tuple) else out
        masked = kwargs.get("where", True) is not True  # Numba's ufuncs refuse where= anyway
        if not isinstance(given, np.ndarray) or given.flags.c_contiguous or masked:
            return self.ufunc(*args, out=out, **kwargs)
        computed = np.empty(given.shape, given.dtype)
        self.ufunc(*args, out=computed, **kwargs)
        given[...] = computed
        return given


class _ArrayLoop:
    """``ufunc`` given C-contiguous copies of its array inputs (subclass, mask and tag kept): the
    answer of NumPy's SIMD loop, which a kernel's complex ``*`` follows on every layout.

    NumPy's own answer depends on the layout (docs/semantics.md, complex arithmetic): its
    complex64 loop falls back to its scalar loop, four rounded products, for an input it reads
    at a negative stride (a reversed view; NumPy from 2.1, 2.4.6 here, in its AVX2 loop:
    ``npyv_loadable_stride_f32`` divides the byte stride by ``sizeof(float)`` in unsigned
    arithmetic, so -8 reads as 2**62 - 2, beyond its limit). ``(1e30+1e30j) * (1e30+1e30j)`` in
    complex64 is ``-inf+infj`` in the SIMD loop, ``fma(a, c, -(b*d))``, and ``nan+infj`` in the
    scalar one, ``inf - inf``. Copies are read at positive strides; casts are buffered anyway,
    and NumPy reads overlapping inputs as if copied first. The output step 0 of a one-element
    result is left out in :func:`_excluded`.
    """

    def __init__(self, ufunc: Any, nin: int) -> None:
        self.ufunc, self.nin = ufunc, nin
        self.__name__ = f"{getattr(ufunc, '__name__', ufunc)} on C-contiguous copies"
        self.types = getattr(ufunc, "types", "")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        nin = self.nin
        inputs = [a.copy(order="C") if isinstance(a, np.ndarray) else a for a in args[:nin]]
        return self.ufunc(*inputs, *args[nin:], **kwargs)


def _twin(given: tuple[Any, ...], loop: tuple[np.dtype, ...]) -> tuple[np.dtype, ...]:
    """The float16 twin of the float32 ``loop`` NumPy selected, which comes just before it, where
    a call with a float16 input casts to it safely (Python scalars weak); else ``loop``."""
    nin = len(given)
    if HALF not in given or not any(t.char == "f" for t in loop):
        return loop
    twin = tuple(HALF if t.char == "f" else t for t in loop)
    if not any(not isinstance(d, type) and d == HALF and to == HALF for d, to in zip(given, twin[:nin])):
        return loop  # no float16 input in a float16 place: a Python float there stays out of it
    for d, to in zip(given, twin[:nin]):
        if isinstance(d, type):  # weak: an int fits any loop type, a float a floating or complex one
            if d is not int and to.kind not in "fc":
                return loop
        elif not np.can_cast(d, to, "safe"):
            return loop
    return twin


def _lazy_reference(op: Op, inputs: list[Any], given: tuple[Any, ...]) -> tuple[Any, dict[str, Any],
                                                                              Loop | None]:
    """Numba's DUFunc learns the loop for these inputs' types (float16 as float32, as
    gpufuncs/dispatch/lazy.py types it: Numba's DUFunc compiles no float16), and each learned
    float32 loop has its float16 twin, as declared loops do (``kernel.types`` lists them); NumPy's
    add computes the loop in its output type (the type Numba promotes the inputs to: ``bb->l`` is
    ``np.add``'s ``ll->l`` on the cast inputs, bit for bit)."""
    proxies = []
    for value, d in zip(inputs, given):
        if isinstance(d, type):
            proxies.append(value)  # a Python scalar, weak as in the call
        else:
            proxy = np.zeros(np.shape(value)[:0] if np.ndim(value) == 0 else (1,),
                             np.float32 if d == HALF else d)
            proxies.append(proxy[()] if isinstance(value, np.generic) else proxy)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            op.fd(*proxies)
        loop = _twin(given, op.fd.ufunc.resolve_dtypes((*given, None)))
    except Exception as exc:  # what selecting the loop raised (OverflowError, TypeError)
        return _Raise(exc), {}, None
    return _InLoopTypes(op.values, loop), {}, loop


class _InLoopTypes:
    """``ufunc`` computing in ``loop``'s output type, each input first cast to a narrower
    floating type its place in the loop has: a Python float in a float32 place of a ``df->d``
    loop is read as float32, as the loop reads it."""

    def __init__(self, ufunc: Any, loop: tuple[np.dtype, ...]) -> None:
        self.ufunc, self.loop, self.__name__ = ufunc, loop, ufunc.__name__
        self.types = "".join(t.char for t in loop[:-1]) + "->" + loop[-1].char

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        nin, result = len(self.loop) - 1, self.loop[-1]
        inputs = [_cast_to(a, t) if t.kind == "f" and t != result else a
                  for a, t in zip(args[:nin], self.loop)]
        return self.ufunc(*inputs, *args[nin:], signature=(result,) * (nin + 1), **kwargs)


def _cast_to(value: Any, dtype: np.dtype) -> Any:
    if type(value) in (bool, int, float, complex):
        return dtype.type(value)
    if isinstance(value, np.ndarray | np.generic):
        return value.astype(dtype)  # (keeps an array's subclass and mask)
    return np.asarray(value).astype(dtype)


# -- array subclasses ---------------------------------------------------------------------------
class Tagged(np.ndarray):
    """A user's subclass that carries an attribute through __array_finalize__."""

    def __array_finalize__(self, obj: Any) -> None:
        self.tag = getattr(obj, "tag", "fresh")


class Loud(np.ndarray):
    """A user's subclass of higher priority than a masked array and np.matrix."""

    __array_priority__ = 30.0


# -- generated calls: a recipe, built afresh for each side -------------------------------------
DTYPES = ("e", "f", "d", "g", "?", "b", "q", "Q")
_BIG = (1e30 + 1e30j, 3e38 - 3e38j, 1.34e154 + 1.34e154j, 1e200 - 1e-200j, 1.7e308 + 1.7e308j)
_VALUES = {
    "f": (0.0, -0.0, 1.0, -1.5, 0.1, 3.0, 65504.0, 1e-7, 1e30, math.inf, -math.inf, math.nan),
    "b": (0, 1, -1, 7, 127, -128),
    "B": (0, 1, 7, 128, 255),
    "H": (0, 1, 7, 32768, 65535),
    "i": (0, 1, -1, 7, 2**31 - 1, -(2**31)),
    # integer extremes: the integer loops wrap as NumPy's do
    "q": (0, 1, -1, 7, 2**53 + 1, -(2**62), 2**63 - 1, -(2**63)),
    "Q": (0, 1, 7, 2**53 + 1, 2**63, 2**64 - 1),
    "?": (False, True),
    # infinities and NaN in either part, huge and tiny magnitudes
    "D": (0j, -0.0 + 0j, 1 + 1j, -1.5 + 0.5j, 0.1 - 3j, 2j, complex(math.inf, 0.0), complex(-math.inf, 1.0),
          complex(1.0, math.inf), complex(math.nan, 0.0), complex(0.0, math.nan), complex(math.inf, math.nan),
          complex(-math.inf, -math.inf), 1e-300 + 1e-300j, *_BIG),
}
_PYTHON_INTS = (0, 1, -1, 3, 300, -(2**40))  # 300 and -2**40 overflow narrow integer loops
KINDS = ("array", "array", "array", "numpy-scalar", "python", "list", "masked", "matrix", "tagged",
         "loud")
LAYOUTS = ("C", "F", "strided", "reversed")


def _pool(dtype: str) -> tuple[Any, ...]:
    if dtype in "FD":
        return _VALUES["D"]
    return _VALUES.get(dtype, _VALUES["q"] if dtype in "lh" else _VALUES["f"])


@dataclass
class Operand:
    kind: str
    dtype: str
    shape: tuple[int, ...]
    layout: str
    values: tuple[Any, ...]
    mask: tuple[bool, ...] = ()


@dataclass
class Alias:
    """``out=`` over the memory of input ``index``: the same array, or a view shifted by
    ``shift`` elements and/or reversed, inside one buffer of ``values``."""

    index: int
    shift: int
    reverse: bool
    values: tuple[Any, ...]


@dataclass
class Recipe:
    op: str
    inputs: list[Operand]
    # one output: None, an Operand or an Alias; several: a list of those, one per output
    out: Operand | Alias | list[Operand | Alias | None] | None = None
    out_style: str = "keyword"  # keyword, tuple, positional
    where: Any = None  # None (not given), a bool, or an Operand of dtype '?'
    where_list: bool = False
    keywords: dict[str, Any] = field(default_factory=dict)


@st.composite
def operands(draw: Any, shape: tuple[int, ...], kinds: tuple[str, ...] = KINDS,
             dtypes: tuple[str, ...] = DTYPES, python: tuple[str, ...] = ("?", "q", "d")) -> Operand:
    kind = draw(st.sampled_from(kinds))
    if kind in ("numpy-scalar", "python"):
        shape = ()
    if kind == "matrix" and len(shape) != 2:
        kind = "masked" if "masked" in kinds else "array"
    dtype = draw(st.sampled_from(dtypes))
    if kind == "python":
        dtype = draw(st.sampled_from(python))
    size = math.prod(shape)
    pool = _pool(dtype) if kind != "python" or dtype != "q" else _PYTHON_INTS
    values = tuple(draw(st.lists(st.sampled_from(pool), min_size=size, max_size=size)))
    mask = tuple(draw(st.lists(st.booleans(), min_size=size, max_size=size))) if kind == "masked" else ()
    return Operand(kind, dtype, shape, draw(st.sampled_from(LAYOUTS)), values, mask)


def _array(o: Operand) -> np.ndarray:
    """The values of ``o`` as a plain array laid out as ``o.layout`` says."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        a = np.array(o.values, dtype=o.dtype).reshape(o.shape)
    if o.layout == "F" and a.ndim:  # (np.asfortranarray makes a 0-d array 1-d)
        return np.asfortranarray(a)
    if o.layout == "strided" and a.ndim:
        wide = np.zeros((*a.shape[:-1], 2 * a.shape[-1]), a.dtype)
        wide[..., ::2] = a
        return wide[..., ::2]
    if o.layout == "reversed" and a.ndim:
        return np.ascontiguousarray(a[::-1])[::-1]
    return a


def build_operand(o: Operand) -> Any:
    if o.kind == "python":
        return {"?": bool, "q": int, "d": float, "D": complex}[o.dtype](o.values[0])
    a = _array(o)
    if o.kind == "numpy-scalar":
        return a[()]
    if o.kind == "list":
        return a.tolist()
    if o.kind == "masked":
        return np.ma.masked_array(a, mask=np.array(o.mask, bool).reshape(o.shape))
    if o.kind == "matrix":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PendingDeprecationWarning)
            return np.asmatrix(a)
    if o.kind == "tagged":
        tagged = a.view(Tagged)
        tagged.tag = "input"
        return tagged
    return a.view(Loud) if o.kind == "loud" else a


@st.composite
def recipes(draw: Any, op_names: tuple[str, ...] = FLOAT_OPS) -> Recipe:
    name = draw(st.sampled_from(op_names))
    op = OPS[name]
    nin = op.nin
    shapes = draw(mutually_broadcastable_shapes(num_shapes=nin, min_dims=0, max_dims=3, min_side=0,
                                                max_side=3))
    recipe = Recipe(name, [draw(operands(s, op.kinds or KINDS, op.input_dtypes(i), op.python))
                           for i, s in enumerate(shapes.input_shapes)])
    _draw_out(draw, recipe, shapes.result_shape)
    if op.where:
        _draw_where(draw, recipe, shapes.result_shape)
    elif draw(st.integers(0, 5)) == 0:
        recipe.where = True  # the one where= Numba's ufuncs take
    keywords: dict[str, Any] = {}
    if op.dtype_keywords and draw(st.integers(0, 3)) == 0:
        keywords["dtype"] = draw(st.sampled_from(op.dtype_keywords))
    if op.casting and draw(st.integers(0, 2)) == 0:
        # Python ints and floats beside other inputs under 'no' and 'equiv': a deliberate
        # difference, tested on its own.
        weak = nin > 1 and any(o.kind in ("python", "list") and not o.shape and o.dtype != "?"
                               for o in recipe.inputs)  # a 0-d array's tolist() is a Python scalar
        rules = ("safe", "same_kind", "unsafe") if weak else ("no", "equiv", "safe", "same_kind", "unsafe")
        keywords["casting"] = draw(st.sampled_from(rules))
    if draw(st.integers(0, 3)) == 0:
        keywords["order"] = draw(st.sampled_from("KACF"))
    recipe.keywords = keywords
    return recipe


def _draw_out(draw: Any, recipe: Recipe, shape: tuple[int, ...]) -> None:
    op = OPS[recipe.op]
    outs = [_draw_one_out(draw, recipe, shape, op.out_dtypes) for _ in range(op.nout)]
    if op.nout == 1:
        recipe.out = outs[0]
        if recipe.out is not None:
            recipe.out_style = draw(st.sampled_from(("keyword", "tuple", "positional")))
    elif any(o is not None for o in outs) or draw(st.booleans()):
        # out=(o1, None), (None, o2), (None, None), positional outputs (trailing ones left
        # out), and out=o1 alone: NumPy's TypeError for a ufunc of several outputs
        recipe.out = outs
        styles = ("tuple", "tuple", "positional", "positional")
        styles += ("keyword",) if outs[0] is not None else ()
        recipe.out_style = draw(st.sampled_from(styles))


def _draw_one_out(draw: Any, recipe: Recipe, shape: tuple[int, ...], dtypes: tuple[str, ...]) -> Any:
    mode = draw(st.sampled_from(("none", "none", "new", "new", "alias")))
    if mode == "new":
        kinds = ("array", "array", "masked", "tagged") if not OPS[recipe.op].kinds else ("array", "tagged")
        # Mostly the result's shape, sometimes a wrong one (a ValueError, out untouched).
        wrong = draw(st.integers(0, 5)) == 0
        out_shape = (*shape, 2) if wrong else shape
        return draw(operands(out_shape, kinds, dtypes))
    if mode == "alias":
        drawn = recipe.out if isinstance(recipe.out, list) else []
        taken = [o.index for o in drawn if isinstance(o, Alias)]
        candidates = [i for i, o in enumerate(recipe.inputs)
                      if o.kind in ("array", "tagged") and o.shape == shape and o.dtype != "g"
                      and i not in taken]
        if not candidates:
            return None
        index = draw(st.sampled_from(candidates))
        n = math.prod(shape)
        shift = draw(st.sampled_from((0, 0, 1, -1, 2)))
        values = tuple(draw(st.lists(st.sampled_from(_pool(recipe.inputs[index].dtype)),
                                     min_size=n + abs(shift), max_size=n + abs(shift))))
        return Alias(index, shift, draw(st.booleans()), values)
    return None


def _draw_where(draw: Any, recipe: Recipe, shape: tuple[int, ...]) -> None:
    mode = draw(st.sampled_from(("none", "none", "none", "bool", "array", "array", "bad")))
    if mode == "bool":
        recipe.where = draw(st.booleans())
    elif mode in ("array", "bad"):
        dims = draw(st.integers(0, len(shape)))
        where_shape = shape[len(shape) - dims:]
        if mode == "bad":
            where_shape = (*where_shape[:-1], where_shape[-1] + 2) if where_shape else (2,)
        recipe.where = draw(operands(where_shape, ("array",), ("?",)))
        recipe.where_list = draw(st.integers(0, 3)) == 0


def build(recipe: Recipe) -> tuple[list[Any], dict[str, Any], list[np.ndarray]]:
    """Fresh arguments and keywords for one side, and the buffers ``out=`` lives in."""
    args = [build_operand(o) for o in recipe.inputs]
    kwargs = dict(recipe.keywords)
    buffers: list[np.ndarray] = []
    entries = recipe.out if isinstance(recipe.out, list) else [recipe.out]
    outs = []
    for entry in entries:
        if isinstance(entry, Alias):
            outs.append(_alias(entry, args, recipe.inputs[entry.index], buffers))
        elif entry is not None:
            outs.append(build_operand(entry))
            buffers.append(np.asarray(outs[-1]))
        else:
            outs.append(None)
    if isinstance(recipe.out, list):  # several outputs
        if recipe.out_style == "positional":
            while outs and outs[-1] is None:
                outs.pop()
            args.extend(outs)
        else:
            kwargs["out"] = outs[0] if recipe.out_style == "keyword" else tuple(outs)
    elif outs[0] is not None:
        if recipe.out_style == "positional":
            args.append(outs[0])
        else:
            kwargs["out"] = (outs[0],) if recipe.out_style == "tuple" else outs[0]
    if isinstance(recipe.where, bool):
        kwargs["where"] = recipe.where
    elif recipe.where is not None:
        mask = _array(recipe.where)
        kwargs["where"] = mask.tolist() if recipe.where_list else mask
    return args, kwargs, buffers


def _alias(alias: Alias, args: list[Any], source: Operand, buffers: list[np.ndarray]) -> np.ndarray:
    n = math.prod(source.shape)
    with warnings.catch_warnings(), np.errstate(all="ignore"):  # 1e30 is inf in float16
        warnings.simplefilter("ignore")
        base = np.array(alias.values, dtype=source.dtype)
    start_in, start_out = (0, alias.shift) if alias.shift >= 0 else (-alias.shift, 0)
    view_in = base[start_in:start_in + n]
    view_out = base[start_out:start_out + n]
    if alias.reverse:
        view_out = view_out[::-1]
    wrap = Tagged if source.kind == "tagged" else np.ndarray
    args[alias.index] = view_in.reshape(source.shape).view(wrap)
    buffers.append(base)
    return view_out.reshape(source.shape)


# -- running one side ---------------------------------------------------------------------------
@dataclass
class Outcome:
    result: Any = None
    error: BaseException | None = None
    buffers: list[np.ndarray] = field(default_factory=list)
    untouched: bool = True
    out: Any = None


def run(call: Any, recipe: Recipe, **extra: Any) -> Outcome:
    args, kwargs, buffers = build(recipe)
    if "signature" in extra:  # the loop dtype= named, already resolved
        kwargs.pop("dtype", None)
    before = [b.tobytes() for b in buffers]
    op = OPS[recipe.op]
    if op.nout == 1:
        out = kwargs.get("out", args[op.nin] if len(args) > op.nin else None)
    else:
        out = kwargs.get("out", tuple(args[op.nin:]))
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            result = call(*args, **kwargs, **extra)
    except Exception as exc:  # compared with the reference's exception below
        return Outcome(error=exc, buffers=buffers,
                       untouched=[b.tobytes() for b in buffers] == before)
    return Outcome(result=result, buffers=buffers, out=out)


_KINDS_OF_ERROR = (np.exceptions.AxisError, TypeError, ValueError, IndexError, OverflowError)


def check(recipe: Recipe, target: str) -> None:
    """Run ``recipe`` on the kernel and on its reference; assert they agree."""
    op = OPS[recipe.op]
    inputs = [build_operand(o) for o in recipe.inputs]
    ref, extra, loop = reference(op, inputs, recipe.keywords.get("dtype"),
                                 recipe.keywords.get("casting", "same_kind"))
    if op.array_loop:
        ref = _ArrayLoop(ref, op.nin)
    note(f"reference: {getattr(ref, '__name__', ref)} {getattr(ref, 'types', '')} {extra}")
    theirs = run(ref, recipe, **extra)
    # Left out only where NumPy computes (the loop's values or writes differ there); where it
    # raises, the kernel must raise the same.
    excluded = _excluded(op, recipe, inputs, loop, target) if theirs.error is None else ""
    if excluded:
        note(f"excluded: {excluded}")
        if op.lazy:  # the kernel learns the loop Numba's DUFunc learned for the reference
            run(op.kernel, recipe, target=target)
        assume(False)
    ours = run(op.kernel, recipe, target=target)
    if op.lazy:  # the same loops learned, in the same order
        note(f"loops learned: {op.kernel.types}; Numba's DUFunc's: {op.fd.types}")
        learned = [t for t in op.kernel.types if "e" not in t]  # less the float16 twins
        assert learned == op.fd.types, f"loops {op.kernel.types}, Numba's DUFunc's {op.fd.types}"
    if theirs.error is not None:
        note(f"NumPy: {type(theirs.error).__name__}: {theirs.error}")
        first = isinstance(theirs.error, OverflowError) and isinstance(ours.error, (TypeError, ValueError))
        if first and ("out=" in str(ours.error) or "where" in str(ours.error)):
            note("excluded: test_a_python_int_out_of_range_is_reported_before_the_out_cast")
            assume(False)
        kind = next(k for k in _KINDS_OF_ERROR if isinstance(theirs.error, k))
        assert ours.error is not None, f"NumPy raised {theirs.error!r}, gpufuncs returned {ours.result!r}"
        assert isinstance(ours.error, kind), f"{ours.error!r} is not a {kind.__name__} ({theirs.error!r})"
        assert ours.untouched, f"out= was written before {ours.error!r}"
        return
    if ours.error is not None:
        raise AssertionError(f"gpufuncs raised {ours.error!r}; NumPy returned {theirs.result!r}") \
            from ours.error
    # A GPU's NaN has the GPU's sign and payload (docs/semantics.md), as CuPy's.
    nan_bits = target != "cuda" or SIMULATED
    if op.nout == 1:
        same_result(ours.result, theirs.result, _where_mask(recipe, theirs.result, recipe.out is not None),
                    nan_bits)
        assert (ours.result is ours.out) == (theirs.result is theirs.out)
    else:
        assert type(ours.result) is tuple and len(ours.result) == op.nout, repr(ours.result)
        for i, (mine, numpys) in enumerate(zip(ours.result, theirs.result)):
            note(f"output {i}")
            given = ours.out[i] if i < len(ours.out) else None
            # where= broadcasts with the inputs and any out= given (an np.matrix result has
            # dropped the 1s of that shape: its own shape would broadcast it wrongly)
            outs_given = (np.shape(o) for o in theirs.out if o is not None)
            defined = _where_mask(recipe, numpys, given is not None, *outs_given)
            same_result(mine, numpys, defined, nan_bits)
            assert (mine is given) == (numpys is (theirs.out[i] if i < len(theirs.out) else None))
    for mine, numpys in zip(ours.buffers, theirs.buffers):
        assert same_values(mine, numpys, nan_bits), f"out= buffer differs:\n{mine}\n{numpys}"
    order = recipe.keywords.get("order")
    first, first_theirs = (ours.result, theirs.result) if op.nout == 1 else (ours.result[0], theirs.result[0])
    if order in ("C", "F") and recipe.out is None and np.ndim(first_theirs) > 1:
        flag = "C_CONTIGUOUS" if order == "C" else "F_CONTIGUOUS"
        assert first.flags[flag] == first_theirs.flags[flag]


def _excluded(op: Op, recipe: Recipe, inputs: list[Any], loop: Loop | None, target: str) -> str:
    """Why an example is left out ('' if not): docs/semantics.md's deliberate differences, a
    NumPy bug, and what the strict xfail tests below pin. ``loop`` is the one the reference
    computes, whichever way the call names it (``dtype=`` included: a cast into the loop's type
    can make the values these differences are about)."""
    outs = recipe.out if isinstance(recipe.out, list) else [recipe.out]
    # NumPy copies an out= that overlaps an input (the views of an Alias overlap where the shift
    # is less than their size) into a temporary of the loop's output dtype, and writes all of it
    # back; of another dtype, its where= False elements come back cast through the loop's.
    if loop is not None and recipe.where not in (None, True) and any(
            isinstance(o, Alias) and abs(o.shift) < math.prod(recipe.inputs[o.index].shape)
            and np.dtype(recipe.inputs[o.index].dtype) != loop[op.nin] for o in outs):
        return ("NumPy's bug: with where= and an out= that overlaps an input and is not of the loop's "
                "output dtype, NumPy writes back every element of its buffer, where= False ones too "
                "(see test_numpy_rewrites_a_cast_overlapping_out_where_false)")
    if op.kernel is conformance_complex_multiply and _one_element(inputs):
        return ("NumPy's scalar complex multiply: a one-element loop NumPy calls with an output step "
                "of 0 (where=, some broadcasts) rounds all four products, its array loop (which "
                "kernels follow) fuses two, docs/semantics.md")
    return ""


def _one_element(inputs: list[Any]) -> bool:
    try:
        return math.prod(np.broadcast_shapes(*(np.shape(v) for v in inputs))) == 1
    except ValueError:  # no broadcast: the call raises
        return False


def _dtype_of(value: Any) -> np.dtype | type:
    if type(value) in (bool, int, float, complex):
        return type(value)
    return np.asarray(value).dtype


def _where_mask(recipe: Recipe, result: Any, given: bool, *also: tuple[int, ...]) -> Any:
    """Where a result not ``given`` as ``out=`` is defined (``where=`` leaves the rest
    uninitialized)."""
    if given or recipe.where is None or recipe.where is True:
        return None
    if isinstance(recipe.where, bool):
        mask = np.asarray(recipe.where)
    else:  # as passed: a list of an empty 2-d array is an empty 1-d one
        mask = np.asarray(_array(recipe.where).tolist() if recipe.where_list else _array(recipe.where),
                          dtype=bool)
    full = np.broadcast_shapes(mask.shape, *(np.shape(build_operand(o)) for o in recipe.inputs), *also)
    return np.broadcast_to(mask, full).reshape(np.shape(result))  # np.matrix drops 1s


def same_result(mine: Any, numpys: Any, defined: Any = None, nan_bits: bool = True) -> None:
    assert type(mine) is type(numpys), f"type {type(mine).__name__}, NumPy's {type(numpys).__name__}"
    assert np.shape(mine) == np.shape(numpys) and np.result_type(mine) == np.result_type(numpys), \
        f"{np.shape(mine)} {np.result_type(mine)}, NumPy's {np.shape(numpys)} {np.result_type(numpys)}"
    if isinstance(numpys, np.ma.MaskedArray):
        np.testing.assert_array_equal(np.ma.getmaskarray(mine), np.ma.getmaskarray(numpys))
        mine, numpys = mine.data, numpys.data
    if isinstance(numpys, Tagged):
        assert mine.tag == numpys.tag
    mine, numpys = np.asarray(mine), np.asarray(numpys)
    if defined is not None:
        mine, numpys = mine[defined], numpys[defined]
    assert same_values(mine, numpys, nan_bits), f"values differ:\n{mine!r}\n{numpys!r}"


def same_values(a: np.ndarray, b: np.ndarray, nan_bits: bool = True) -> bool:
    """Bit for bit (NaN payloads included, unless not ``nan_bits``); longdouble by value (its
    padding bytes are junk)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.kind not in "fc" or a.dtype.itemsize > 8 * (1 + (a.dtype.kind == "c")):
        return bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
    if a.dtype.kind == "c" or not nan_bits:  # NaN where NumPy has one, of any sign and payload
        if a.dtype.kind == "c":
            a, b = a[..., None].view(a.real.dtype), b[..., None].view(b.real.dtype)
        if not (np.isnan(a) == np.isnan(b)).all():
            return False
        a, b = np.where(np.isnan(a), np.nan, a), np.where(np.isnan(b), np.nan, b)
    unsigned = f"u{a.dtype.itemsize}"
    return bool((a.view(unsigned) == b.view(unsigned)).all())


# -- the tests ------------------------------------------------------------------------------------
if not SIMULATED:

    @pytest.mark.slow
    def test_cuda_target_conforms_on_the_simulator() -> None:
        """The call suite again with ``target="cuda"`` on the CUDA simulator (few examples: the
        simulator runs every GPU thread in Python)."""
        env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1"}
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__],
                              env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
        assert " passed" in proc.stdout and "failed" not in proc.stdout, proc.stdout[-3000:]


@pytest.mark.parametrize("target", TARGETS)
@settings(max_examples=_examples(60 if SIMULATED else 200))
@given(recipe=recipes())
def test_calls_agree_with_numpy(recipe: Recipe, target: str) -> None:
    check(recipe, target)


KINDS_OF_KERNEL = [name for name in OPS if name not in FLOAT_OPS]


@pytest.mark.parametrize("target", [t for t in TARGETS if t != "parallel"])
@pytest.mark.parametrize("op", KINDS_OF_KERNEL)
@settings(max_examples=_examples(8 if SIMULATED else 15))
@given(data=st.data())
def test_kernels_of_every_kind_agree_with_numpy(op: str, target: str, data: Any) -> None:
    """Integer (wrapping, division by zero), bool, complex, mixed, two outputs, lazy and composed
    kernels, each against NumPy's ufunc of its loop (see :class:`Op`)."""
    check(data.draw(recipes((op,)), label="recipe"), target)


@pytest.mark.skipif(SIMULATED, reason="host targets")
@pytest.mark.parametrize("op", KINDS_OF_KERNEL)
@settings(max_examples=_examples(5))
@given(data=st.data())
def test_kernels_of_every_kind_agree_with_numpy_in_parallel(op: str, data: Any) -> None:
    """The same on ``parallel``, fewer examples under CI (each loop compiles again for it; its
    chunks and threads are the float kernels' test above)."""
    check(data.draw(recipes((op,)), label="recipe"), "parallel")


#: Examples the thorough profile (HYPOTHESIS_PROFILE=thorough) found, run as the property tests
#: run them: complex64 times a reversed view (NumPy's scalar loop there, see _ArrayLoop), where=
#: False beside an np.matrix for a kernel of two outputs (the mask was broadcast to the matrix's
#: shape, which has dropped the 1s), a Python float cast into the int64 loop of a kernel of two
#: outputs with an input to cast (gpufuncs raised OverflowError).
FOUND = {
    "complex64-reversed": Recipe("complex_multiply", [
        Operand("array", "F", (), "C", (1e30 + 1e30j,)),
        Operand("array", "F", (2, 1, 1), "reversed", (1e30 + 1e30j, 0.1 - 3j))]),
    "where-false-matrix": Recipe("divmod", [
        Operand("array", "?", (2, 2, 1), "C", (False,) * 4),
        Operand("matrix", "?", (1, 1), "C", (False,))], where=False, keywords={"order": "K"}),
    "float-into-int64": Recipe("divmod", [
        Operand("array", "?", (), "C", (False,)),
        Operand("list", "f", (), "C", (1e30,))], keywords={"dtype": np.int64, "casting": "unsafe"}),
}


@pytest.mark.skipif(SIMULATED, reason="host targets")
@pytest.mark.parametrize("target", ["cpu", "parallel"])
@pytest.mark.parametrize("found", FOUND)
@settings(max_examples=1, database=None)
@given(nothing=st.none())
def test_examples_the_thorough_profile_found(found: str, target: str, nothing: None) -> None:
    check(FOUND[found], target)


# -- ufunc methods: reduce and accumulate against the same loops in a real ufunc -----------------
@dataclass
class Reduction:
    op: str
    method: str
    values: Operand
    keywords: dict[str, Any]
    out: tuple[tuple[int, ...], str] | None = None  # (shape, dtype) of a new out=


@st.composite
def reductions(draw: Any) -> Reduction:
    op = draw(st.sampled_from(("add", "multiply")))
    method = draw(st.sampled_from(("reduce", "accumulate")))
    shape = tuple(draw(st.lists(st.integers(0, 3), max_size=3)))
    values = draw(operands(shape, ("array", "array", "masked", "tagged", "loud"), ("f", "d")))
    ndim = len(shape)
    axes = [None, 0, -1, ndim, -ndim - 1, *range(ndim)]
    if method == "reduce":
        axes += [(), tuple(range(ndim)), (0, 0)]
    keywords: dict[str, Any] = {"axis": draw(st.sampled_from(axes))}
    if draw(st.booleans()):
        keywords["dtype"] = draw(st.sampled_from((np.float32, np.float64)))
    if method == "reduce":
        if draw(st.booleans()):
            keywords["keepdims"] = True
        if draw(st.integers(0, 2)) == 0:
            keywords["initial"] = draw(st.sampled_from((0.0, 2.5, -math.inf)))
        if draw(st.integers(0, 2)) == 0:
            keywords["where"] = _array(draw(operands(shape[draw(st.integers(0, ndim)):], ("array",), ("?",))))
    out = None
    if draw(st.integers(0, 2)) == 0:
        out = (tuple(draw(st.lists(st.integers(0, 3), max_size=3))), draw(st.sampled_from("fdq")))
    return Reduction(op, method, values, keywords, out)


def run_reduction(ufunc: Any, r: Reduction, **extra: Any) -> Outcome:
    out = np.full(r.out[0], 7, r.out[1]) if r.out is not None else None
    values = build_operand(r.values)
    if r.method == "accumulate" and out is not None and np.ndim(values) and out.shape != np.shape(values):
        # NumPy 2.4 crashes on a 0-d out= and accepts an empty one; the answer: ValueError.
        return Outcome(error=ValueError("out= of the wrong shape"))
    before = out.tobytes() if out is not None else b""
    kwargs = {**r.keywords, **({"out": out} if out is not None else {}), **extra}
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            result = getattr(ufunc, r.method)(values, **kwargs)
    except Exception as exc:
        return Outcome(error=exc, untouched=out is None or out.tobytes() == before)
    return Outcome(result=result, out=out, buffers=[out] if out is not None else [])


@pytest.mark.skipif(SIMULATED, reason="host methods; the cuda reduce runs in tests/test_cuda_sim.py")
@settings(max_examples=_examples(120))
@given(r=reductions())
# Found by the README's run (Hypothesis's default profile): an int64 out= makes NumPy sum float32
# values in float64, its accumulator, with -inf's cast into it first (INT64_MIN, then + 65504).
@example(r=Reduction("add", "reduce", Operand("array", "f", (), "C", (65504.0,)),
                     {"axis": None, "initial": -math.inf}, ((), "q")))
def test_reduce_and_accumulate_agree_with_numpy(r: Reduction) -> None:
    """Numba's ufunc with the kernel's float32/float64 loops and identity is a real numpy.ufunc:
    its methods are NumPy's (axis, out=, where=, initial, keepdims, 0-d, subclasses)."""
    op = OPS[r.op]
    theirs, ours = run_reduction(op.fd, r), run_reduction(op.kernel, r, target="cpu")
    if theirs.error is not None:
        kind = next(k for k in _KINDS_OF_ERROR if isinstance(theirs.error, k))
        assert isinstance(ours.error, kind), f"{ours.error!r}, {ours.result!r}: NumPy: {theirs.error!r}"
        assert ours.untouched, f"out= was written before {ours.error!r}"
        return
    assert ours.error is None, f"gpufuncs raised {ours.error!r}, NumPy returned {theirs.result!r}"
    same_result(ours.result, theirs.result)
    assert (ours.result is ours.out) == (theirs.result is theirs.out)


@pytest.mark.skipif(SIMULATED, reason="host methods; the cuda reduce runs in tests/test_cuda_sim.py")
@pytest.mark.parametrize("out_dtype", [np.float64, np.float16, np.int64, np.int32, np.int16, np.int8,
                                       np.uint32, np.bool_])
@pytest.mark.parametrize("method", ["reduce", "accumulate"])
def test_reduce_and_accumulate_compute_in_the_loop_of_out_and_values(method: str, out_dtype: type) -> None:
    """NumPy's rule, found by the property test above: without dtype=, out= is the accumulator
    and takes the loop's first input place, so the loop is the first that both the out= dtype
    and the values cast to safely. float32 values sum into a float64, int64, int32 or uint32
    out= in float64 (16777216 + 1 is 16777217), into a float16, int16, int8 or bool one in
    float32 (16777216)."""
    op = OPS["add"]
    x = np.array([16777216.0, 1.0, 0.0, 1e-7], np.float32)
    shape = () if method == "reduce" else x.shape
    results = []
    for ufunc, extra in ((op.fd, {}), (op.kernel, {"target": "cpu"})):
        out = np.zeros(shape, out_dtype)
        with np.errstate(all="ignore"):  # (16777217 overflows the small integers, as NumPy's)
            assert getattr(ufunc, method)(x, out=out, **extra) is out
        results.append(out)
    assert same_values(results[1], results[0]), f"{results[1]!r}, NumPy's {results[0]!r}"


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("shift", [0, 1, -1, 3])
def test_one_input_viewing_its_out_is_read_before_writing(target: str, shift: int) -> None:
    """A single array input that is a view of the same memory as ``out=`` (neither owns its
    memory), repeated so that the resolved call's own overlap check decides: the values of the
    same call on a copy of the input, as NumPy's rule has it."""
    n = 1001
    for _ in range(3):
        base = np.linspace(-2.0, 2.0, n + abs(shift)) + 0.0
        x, out = base[max(0, -shift):][:n], base[max(0, shift):][:n]
        expected = base.copy()
        expected[max(0, shift):][:n] = gf.exp(x.copy(), target=target)
        assert gf.exp(x, out=out, target=target) is out
        assert same_values(base, expected)


@pytest.mark.skipif(SIMULATED, reason="large arrays: the host targets' threads and chunks")
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("shift", [0, 1, -1, 4097, -70001])
@pytest.mark.parametrize("reverse", [False, True])
def test_out_overlapping_inputs_of_large_arrays(target: str, shift: int, reverse: bool) -> None:
    """NumPy's rule for any overlap: as if every input were read before anything is written,
    here where the parallel loop splits the work between threads and chunks."""
    n = 300_001
    results = []
    for call in (np.add, OPS["add"].kernel):
        base = np.linspace(-2.0, 2.0, n + abs(shift))
        a = base[max(0, -shift):max(0, -shift) + n]
        out = base[max(0, shift):max(0, shift) + n]
        extra = {} if call is np.add else {"target": target}
        call(a[::-1] if reverse else a, a, out=out, **extra)
        results.append(base)
    assert same_values(*results)


# -- what the property tests above found, pinned --------------------------------------------------
@pytest.mark.parametrize("target", ["cpu"])
def test_dtype_selects_the_loop_as_numpys_resolver_does(target: str) -> None:
    flags, big = np.array([False]), np.array([2**63], np.uint64)
    want = OPS["less"].fd(flags, big, dtype=np.bool_)  # 'dd->?': [True]
    assert np.array_equal(conformance_less(flags, big, dtype=np.bool_, target=target), want)
    with pytest.raises(TypeError):  # NumPy: no loop; gpufuncs wraps 2**40 into int32: [0.0]
        OPS["scale"].fd(np.ones(1), np.array([2**40]), dtype=np.float64)
    with pytest.raises(TypeError):
        conformance_scale(np.ones(1), np.array([2**40]), dtype=np.float64, target=target)


def test_a_python_complex_is_weak_beside_float32() -> None:
    x = np.ones(2, np.float32)
    assert OPS["complex_multiply"].fd(x, 1j).dtype == np.multiply(x, 1j).dtype == np.complex64
    assert conformance_complex_multiply(x, 1j, target="cpu").dtype == np.complex64


def test_complex_multiply_gives_numpys_nan_signs() -> None:
    """The property test compares a complex result's NaN parts as NaN; their signs are NumPy's
    on the host (kernels compute complex products in NumPy's order of operations)."""
    a, b = np.array([0j], np.complex64), np.array([complex(math.inf, math.nan)], np.complex64)
    with np.errstate(invalid="ignore"):
        ours, numpys = conformance_complex_multiply(a, b, target="cpu"), np.multiply(a, b)
    bits, numpys_bits = ours.view(np.uint32), numpys.view(np.uint32)
    assert (bits == numpys_bits).all(), (bits, numpys_bits)


def _numpy_fuses_complex() -> bool:
    """Whether NumPy's complex multiply fuses products here (its SIMD loop, on a CPU with FMA)."""
    x, y = np.array([complex(2.0**512, 2.0**459)]), np.array([complex(2.0**512, 2.0**512)])
    with np.errstate(all="ignore"):
        return bool(np.isfinite(np.multiply(x, y)[0].real))


@pytest.mark.skipif(SIMULATED or not _numpy_fuses_complex(),
                    reason="host calls; NumPy's complex loop fuses products (a CPU with FMA)")
@pytest.mark.parametrize("target", ["cpu", "parallel"])
def test_complex64_multiply_is_numpys_array_loop_on_every_layout(target: str) -> None:
    """Found by the thorough profile (a 0-d ``1e30+1e30j`` times a reversed view): NumPy 2.1 to
    2.4's complex64 multiply reads an input at a negative stride in its scalar loop (see
    :class:`_ArrayLoop`), ``nan+infj`` where its SIMD loop gives ``-inf+infj`` for the same
    values read forwards. A kernel gives the SIMD loop's answer on both layouts, which the
    property test now asks of it. (NumPy 2.0 reads both alike.)"""
    z = np.complex64(1e30 + 1e30j)
    forwards = np.full((2, 1, 1), z)
    backwards = np.ascontiguousarray(forwards[::-1])[::-1]  # the same values, strides (-8, 8, 8)
    with np.errstate(all="ignore"):
        numpys_forwards, numpys_backwards = np.multiply(z, forwards), np.multiply(z, backwards)
        ours = [conformance_complex_multiply(z, x, target=target) for x in (forwards, backwards)]
    array_loop = np.full(forwards.shape, complex(-math.inf, math.inf), np.complex64)  # fma(a, c, -(b*d))
    scalar_loop = np.full(forwards.shape, complex(math.nan, math.inf), np.complex64)  # a*c - b*d
    assert same_values(numpys_forwards, array_loop)
    assert same_values(numpys_backwards, scalar_loop) or same_values(numpys_backwards, array_loop)
    for got in ours:
        assert same_values(got, array_loop), got


@pytest.mark.skipif(SIMULATED, reason="host calls")
def test_numpy_rewrites_a_cast_overlapping_out_where_false() -> None:
    """Why the property test leaves out where= with an out= that overlaps an input and is not of
    the loop's output dtype: NumPy writes its whole buffer back (0.5 < 0.5 is False: 0.0, and
    -0.0 through bool is 0.0) where where= is False. gpufuncs leaves those elements alone."""
    results = []
    for call, extra in ((np.less, {}), (conformance_less, {"target": "cpu"})):
        x = np.array([0.0, 0.5, -0.0], np.float32)
        call(x[:2], x[:2], out=x[1:], where=np.array([True, False]), **extra)
        results.append(x)
    assert results[0].tolist() == [0.0, 0.0, 0.0]  # NumPy's: x[2] rewritten
    assert results[1].tolist() == [0.0, 0.0, -0.0] and np.signbit(results[1][2])


@pytest.mark.skipif(SIMULATED, reason="host calls")
def test_numpy_rewrites_a_cast_overlapping_out_where_false_with_dtype() -> None:
    """The same where dtype= names the loop (the thorough profile found that route left in: the
    exclusion was not given its loop). nditer copies an out= that overlaps an input into a
    temporary of the loop's dtype (COPY_IF_OVERLAP: uint16 300 read as int8 44, 500 as -12) and
    writes all of it back (WRITEBACKIFCOPY), where= False elements included. gpufuncs writes
    nothing; an out= that does not overlap NumPy leaves alone too."""
    for overlapping in (True, False):
        results = []
        for call, extra in ((np.add, {}), (conformance_int_add, {"target": "cpu"})):
            x = np.array([1, 2, 300, 4, 500], np.uint16)
            n = 3 if overlapping else 2
            call(x[:n], x[:n], out=x[-n:], where=[False], dtype=np.int8, casting="unsafe", **extra)
            results.append(x.tolist())
        assert results[1] == [1, 2, 300, 4, 500]
        assert results[0] == ([1, 2, 44, 4, 2**16 - 12] if overlapping else results[1])


@pytest.mark.skipif(SIMULATED, reason="the simulator runs the kernel in Python: NumPy's value")
def test_exclusions_see_the_loop_that_dtype_names() -> None:
    """Found by the thorough profile: with dtype= naming a loop of that one dtype the reference
    is NumPy's own dtype=, and the exclusions were given no loop. uint64 2**63 cast by
    dtype=np.int64 is -2**63: divmod by -1 is NumPy's (-2**63, 0) with an overflow warning, and
    the kernel's too (it was (0, 0), Numba's integer division, then excluded; now NumPy's: see
    targets.base.numpys_integer_division)."""
    big, minus_one = np.array([2**63], np.uint64), np.array([-1], np.int8)
    with pytest.warns(RuntimeWarning, match="overflow"):
        numpys = np.divmod(big, minus_one, dtype=np.int64)
    assert [v.tolist() for v in numpys] == [[-(2**63)], [0]]
    for target in ("cpu", "parallel"):
        ours = conformance_divmod(big, minus_one, dtype=np.int64, target=target)
        assert [v.tolist() for v in ours] == [[-(2**63)], [0]]
    where_false = Operand("array", "?", (1,), "C", (False,))
    add_recipe = Recipe("int_add", [Operand("array", "H", (3,), "C", (1, 2, 300))] * 2,
                        out=Alias(0, 2, False, (1, 2, 300, 4, 500)), where=where_false, where_list=True,
                        keywords={"dtype": np.int8, "casting": "unsafe"})
    op, inputs = OPS["int_add"], [build_operand(o) for o in add_recipe.inputs]
    _, extra, loop = reference(op, inputs, np.int8, "unsafe")
    assert extra == {} and loop is not None  # NumPy's own dtype=
    assert "where= False ones too" in _excluded(op, add_recipe, inputs, loop, "cpu")
    add_recipe.out = Alias(0, 3, False, (1, 2, 300, 4, 500, 6))  # no overlap: NumPy copies nothing
    op, inputs = OPS["int_add"], [build_operand(o) for o in add_recipe.inputs]
    assert _excluded(op, add_recipe, inputs, reference(op, inputs, np.int8, "unsafe")[2], "cpu") == ""


def test_a_python_int_out_of_range_is_reported_before_the_out_cast() -> None:
    x, out = np.array([1]), np.zeros(1, bool)
    with pytest.raises(OverflowError):
        np.floor_divide(x, 2**63, out=out)
    with pytest.raises(OverflowError):
        conformance_floor_divide(x, 2**63, out=out, target="cpu")
    with pytest.raises(OverflowError):  # the same with an out= of the wrong shape: ValueError
        conformance_floor_divide(x, 2**63, out=np.zeros(2, np.int64), target="cpu")
