"""Operands as views of shared byte buffers, and NumPy's answer for a call on them.

The differential fuzzer of ``tests/test_views_fuzz.py`` builds every operand of a call as a
:class:`View`: a dtype, a byte offset, a shape and byte strides on one of a few shared base
buffers (``np.uint8``, a few hundred bytes), made with :func:`numpy.lib.stride_tricks.as_strided`.
Inputs and ``out=`` come from the same buffers, so they overlap, interleave or are the same
memory; strides may be negative, zero (inputs only) or no multiple of the itemsize (a record
field, ``z.real``), offsets unaligned, dtypes byte-swapped or cast.

:func:`oracle` is NumPy's semantics applied explicitly, never the fast path under test: every
input is read into a fresh contiguous copy first (a NumPy call reads all its inputs before it
writes), the values come from the kernel's Numba ``cpu`` object on contiguous copies into a fresh
contiguous array (Numba's own ``@vectorize`` loop ignores a strided output's step when every
input is unit-strided, so it never sees the caller's ``out``), and they are assigned through the
same ``out`` view on a copy of the buffers with NumPy's casting and ``where``.
:func:`check` then compares every byte of every buffer after the call with the oracle's copies:
the values ``out=`` names, bit for bit (NaN equal to NaN), and every other byte unchanged.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import assume
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from numpy.lib.stride_tricks import as_strided

import gpufuncs as gf

SIMULATED = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"

#: Data buffers shared by the operands of one call, their size in bytes, and the buffer of
#: ``where=`` masks (0/1 bytes, viewed as bool), the last of a case's buffers.
DATA_BASES = 2
BASE_BYTES = 256
MASK_BYTES = 64
MASK_BASE = DATA_BASES

#: ``GPUFUNCS_FUZZ_TRACE=1``: print every case before the call, to find the one that crashes the
#: process (a write far outside every buffer, which no canary sees).
TRACE = os.environ.get("GPUFUNCS_FUZZ_TRACE") == "1"

#: Bytes of canary on either side of every buffer: a write past a view's end lands there (and
#: is reported) rather than in memory that the process needs.
GUARD = 8192

#: Input dtypes: the loops' own, byte-swapped, and ones that are cast (integers run the float64
#: loop, float16 the float32 loop with a float16 result). Outputs: the loops' and byte-swapped.
INPUT_DTYPES = ("<f8", "<f4", ">f8", "<i4", "|u1", "<f2", ">f4", "<i2", "<i8")
OUT_DTYPES = ("<f8", "<f4", ">f8")

#: Values a buffer holds besides normal(0, 3) ones: special floats, and -60 for a kernel that
#: raises below -50.
SPECIALS = (math.nan, math.inf, -math.inf, -0.0, -60.0, 5e-324, 1e300, 700.0)


@dataclass(frozen=True)
class View:
    """An array of ``dtype`` at byte ``offset`` of buffer ``base`` with byte ``strides``."""

    base: int
    dtype: str
    offset: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]

    def on(self, bases: Sequence[np.ndarray]) -> np.ndarray:
        """This view of ``bases[self.base]`` (writable if the buffer is)."""
        dtype = np.dtype(self.dtype)
        begin = GUARD + self.offset
        start = bases[self.base][begin:begin + dtype.itemsize].view(dtype)
        return as_strided(start, self.shape, self.strides, writeable=True)

    def addresses(self) -> np.ndarray:
        """Byte offset in the buffer of every element, in C order."""
        if not self.shape:
            return np.array([self.offset])
        index = np.indices(self.shape).reshape(len(self.shape), -1)
        return self.offset + np.asarray(self.strides, dtype=np.int64) @ index

    def byte_mask(self, size: int) -> np.ndarray:
        """Which bytes of a ``size``-byte guarded buffer this view's elements cover."""
        mask = np.zeros(size, bool)
        for start in GUARD + self.addresses() if math.prod(self.shape) else ():
            mask[start:start + np.dtype(self.dtype).itemsize] = True
        return mask

    def overlaps_itself(self) -> bool:
        """Whether two distinct elements share a byte (never allowed for ``out=``)."""
        starts = np.sort(self.addresses()) if math.prod(self.shape) else np.array([])
        return bool(np.any(np.diff(starts) < np.dtype(self.dtype).itemsize))

    @classmethod
    def of(cls, array: np.ndarray, bases: Sequence[np.ndarray]) -> View:
        """The view that ``array`` is, in whichever of the (unguarded) ``bases`` holds its memory."""
        address = array.__array_interface__["data"][0]
        for index, base in enumerate(bases):
            offset = address - base.__array_interface__["data"][0]
            if 0 <= offset < base.size:
                view = cls(index, array.dtype.str, offset, array.shape, array.strides)
                assert view.on([guarded(b) for b in bases]).tobytes() == array.tobytes()
                return view
        raise ValueError("the array is in none of the buffers")

    def __str__(self) -> str:
        return f"b{self.base}[{self.dtype} +{self.offset} shape={self.shape} strides={self.strides}]"


def guarded(buffer: np.ndarray) -> np.ndarray:
    """A copy of the bytes of ``buffer`` between two :data:`GUARD` canaries."""
    result = np.full(buffer.nbytes + 2 * GUARD, 0xA5, np.uint8)
    result[GUARD:GUARD + buffer.nbytes] = buffer.view(np.uint8).reshape(-1)
    return result


def inner(buffer: np.ndarray) -> np.ndarray:
    """The buffer that :func:`guarded` surrounds."""
    return buffer[GUARD:buffer.size - GUARD]


def base_buffers(seed: int) -> list[np.ndarray]:
    """The data buffers and the mask buffer that ``seed`` names (fresh, writable, guarded)."""
    rng = np.random.default_rng(seed)
    bases = []
    for _ in range(DATA_BASES):
        values = rng.normal(0.0, 3.0, BASE_BYTES // 8)
        special = rng.random(values.size) < 0.1
        values[special] = rng.choice(SPECIALS, int(special.sum()))
        bases.append(guarded(values))
    bases.append(guarded(rng.integers(0, 2, MASK_BYTES, dtype=np.uint8)))
    return bases


@dataclass(frozen=True)
class Case:
    """One call: ``kernel(*inputs, *sizes, out=out, where=where)`` on the buffers of ``seed``
    (or on copies of ``explicit`` buffers, for the hand-written regression cases); for a
    kernel of several outputs, ``out=(out, *more_outs)``."""

    kernel: str
    inputs: tuple[View, ...]
    out: View | None = None
    where: View | None = None
    sizes: tuple[int, ...] = ()
    seed: int = 0
    explicit: tuple[bytes, ...] | None = None
    more_outs: tuple[View, ...] = ()

    @property
    def outs(self) -> tuple[View, ...]:
        """Every ``out=`` view, in order (none: the call allocates its results)."""
        return (self.out, *self.more_outs) if self.out is not None else ()

    def out_argument(self, bases: Sequence[np.ndarray]) -> np.ndarray | tuple[np.ndarray, ...]:
        """``out=`` on ``bases``: the view, or the tuple of views of a kernel of several outputs."""
        views = tuple(v.on(bases) for v in self.outs)
        return views if self.more_outs else views[0]

    def bases(self) -> list[np.ndarray]:
        if self.explicit is not None:
            return [guarded(np.frombuffer(b, np.uint8)) for b in self.explicit]
        return base_buffers(self.seed)

    def __str__(self) -> str:
        args = [str(v) for v in self.inputs] + [str(n) for n in self.sizes]
        args += [f"out=({', '.join(map(str, self.outs))})" if self.more_outs else f"out={self.out}"] \
            if self.out else []
        args += [f"where={self.where}"] if self.where else []
        return f"{self.kernel}({', '.join(args)})  [seed={self.seed}]"


# -- strategies -----------------------------------------------------------------------------

def _strides(itemsize: int, zero: bool) -> st.SearchStrategy[int]:
    """Steps in bytes: the usual multiples, a record field's 12 and ``.real``'s 16 on float64,
    anything else small, negative too; zero only where ``zero`` (inputs)."""
    special = st.sampled_from([itemsize, 2 * itemsize, -itemsize, -2 * itemsize, 12, 16, -16,
                               3 * itemsize, itemsize + 1])
    step = st.one_of(special, st.integers(-3 * itemsize, 3 * itemsize))
    return step if zero else step.filter(bool)


def _compact(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """C-order strides with the signs of ``strides``: a view whose elements never share a byte."""
    result, step = [], itemsize
    for size, stride in zip(reversed(shape), reversed(strides)):
        result.append(step if stride >= 0 else -step)
        step *= max(size, 1)
    return tuple(reversed(result))


@st.composite
def views(draw: st.DrawFn, shape: tuple[int, ...], dtypes: Sequence[str], *, out: bool = False,
          near: View | None = None, mask: bool = False) -> View:
    """A view of ``shape`` on a shared buffer that stays inside it; an ``out`` view's elements
    never share a byte; a view ``near`` another often starts within a few bytes of it."""
    dtype = draw(st.sampled_from(dtypes))
    itemsize = np.dtype(dtype).itemsize
    strides = tuple(draw(_strides(itemsize, zero=not out)) for _ in shape)
    if out and View(0, dtype, 0, shape, strides).overlaps_itself():
        strides = _compact(shape, strides, itemsize)
    size = MASK_BYTES if mask else BASE_BYTES
    if math.prod(shape):
        low = -sum(min(0, (n - 1) * s) for n, s in zip(shape, strides))
        high = size - itemsize - sum(max(0, (n - 1) * s) for n, s in zip(shape, strides))
    else:
        low, high = 0, size - itemsize
    assume(low <= high)
    if mask:
        base = MASK_BASE
    elif near is not None and draw(st.booleans()):
        base = near.base
    else:
        base = draw(st.integers(0, DATA_BASES - 1))
    if near is not None and base == near.base and draw(st.booleans()):
        offset = min(max(near.offset + draw(st.integers(-16, 16)), low), high)
    else:
        offset = draw(st.integers(low, high))
    return View(base, dtype, offset, shape, strides)


def _signature(kernel: gf.Kernel, sizes: dict[str, int]) -> str:
    """The kernel's layout for :func:`hypothesis.extra.numpy.mutually_broadcastable_shapes`,
    with the output-only core dimensions fixed to ``sizes``."""
    layout = kernel.spec.layout
    if layout is None:
        return ",".join(["()"] * kernel.spec.nin) + "->()"

    def group(dims: tuple[str, ...]) -> str:
        return "(" + ",".join(str(sizes.get(d, d)) for d in dims) + ")"

    return ",".join(map(group, layout.inputs)) + "->" + ",".join(map(group, layout.outputs))


def core_out(kernel: gf.Kernel) -> tuple[str, ...]:
    layout = kernel.spec.layout
    return layout.outputs[0] if layout is not None else ()


def core_in(kernel: gf.Kernel) -> tuple[tuple[str, ...], ...]:
    layout = kernel.spec.layout
    return layout.inputs if layout is not None else ((),) * kernel.spec.nin


@st.composite
def cases(draw: st.DrawFn, kernel: gf.Kernel) -> Case:
    """A call of ``kernel`` whose operands are views of shared buffers."""
    layout = kernel.spec.layout
    only = layout.output_only_dims if layout is not None else ()
    fixed = {d: draw(st.integers(0, 4)) for d in only}
    shapes = draw(hnp.mutually_broadcastable_shapes(
        signature=_signature(kernel, fixed), max_dims=3, max_side=4,
        min_side=draw(st.sampled_from([1, 0]))))
    result_shape = shapes.result_shape
    out = draw(views(result_shape, OUT_DTYPES, out=True)) if draw(st.integers(0, 3)) else None
    more_outs: tuple[View, ...] = ()
    if out is not None and kernel.nout > 1:
        # The other outputs: views too, near the first; outputs that share a byte are NumPy's
        # undefined order of writes, so they never do.
        more_outs = tuple(draw(views(result_shape, OUT_DTYPES, out=True, near=out))
                          for _ in range(kernel.nout - 1))
        size = BASE_BYTES + 2 * GUARD
        masks = [(v.base, v.byte_mask(size)) for v in (out, *more_outs)]
        assume(not any(b == c and np.any(m & n) for i, (b, m) in enumerate(masks) for c, n in masks[i + 1:]))
    inputs = []
    for shape in shapes.input_shapes:
        if out is not None and shape == out.shape and draw(st.integers(0, 3)) == 0:
            inputs.append(out)  # the very memory of out= (k(x, out=x))
        else:
            inputs.append(draw(views(shape, INPUT_DTYPES, near=out)))
    where = None
    if out is not None and draw(st.booleans()):
        loop = result_shape[:len(result_shape) - len(core_out(kernel))]
        kept = loop[len(loop) - draw(st.integers(0, len(loop))):]  # trailing dims, some of them 1
        shape = tuple(n if draw(st.booleans()) else 1 for n in kept)
        where = draw(views(shape, ("?",), mask=True))
    seed = draw(st.integers(0, 2**32 - 1))
    return Case(kernel.__name__, tuple(inputs), out, where, tuple(fixed.values()), seed,
                more_outs=more_outs)


# -- the oracle -------------------------------------------------------------------------------

def loop_and_result(kernel: gf.Kernel, dtypes: Sequence[np.dtype]) -> tuple[np.dtype, np.dtype]:
    """(loop dtype, result dtype): NumPy's first loop that every input casts to safely, except
    that float16 runs the narrowest loop with a float16 result, and is selected only for a
    float16 input (gpufuncs' documented choices, in ``dispatch/plan.py:resolve_loop``)."""
    natural = np.result_type(*dtypes)
    loops = [loop.dtype for loop in kernel.spec.loops]
    if natural == np.float16:
        return loops[0], natural
    wanted = next(d for d in loops if np.can_cast(natural, d, "safe"))
    return wanted, wanted


def cpu_values(kernel: gf.Kernel, inputs: list[np.ndarray], core_shape: tuple[int, ...],
               dtype: np.dtype, sizes: tuple[int, ...]) -> np.ndarray | tuple[np.ndarray, ...]:
    """The kernel's Numba ``cpu`` object on contiguous inputs (one row per loop element), into a
    fresh contiguous array (a tuple of them for a kernel of several outputs)."""
    compiled = gf.get(kernel.__name__, target="cpu")
    values = tuple(np.empty((len(inputs[0]), *core_shape), dtype) for _ in range(kernel.nout))
    if kernel.spec.layout is None and kernel.nout == 1:
        compiled(*inputs, out=values[0])
    else:
        compiled(*inputs, *values)  # Numba's gufuncs (several outputs: one) take their outputs as arguments
    return values if kernel.nout > 1 else values[0]


Compute = Callable[[gf.Kernel, list[np.ndarray], tuple[int, ...], np.dtype, tuple[int, ...]],
                   np.ndarray | tuple[np.ndarray, ...]]


@dataclass
class Expected:
    """What NumPy gives: the exception the kernel raises, or the values of each output (``loop
    shape + core``, in the result dtype, defined where ``mask``), written into the oracle's
    buffers."""

    error: BaseException | None
    values: tuple[np.ndarray, ...] = ()
    mask: np.ndarray | None = None


def oracle(kernel: gf.Kernel, case: Case, bases: list[np.ndarray], written: list[np.ndarray],
           compute: Compute = cpu_values) -> Expected:
    """NumPy's answer for ``case`` on ``bases``; writes ``out=`` of ``written`` as NumPy would."""
    arrays = [v.on(bases) for v in case.inputs]
    loop_dtype, result_dtype = loop_and_result(kernel, [a.dtype for a in arrays])
    copies = [np.array(a, dtype=loop_dtype, order="C") for a in arrays]  # read all, first
    cores = [c.shape[c.ndim - len(dims):] for c, dims in zip(copies, core_in(kernel))]
    dims = dict(zip((d for group in core_in(kernel) for d in group), (n for s in cores for n in s)))
    dims.update(zip(kernel.spec.layout.output_only_dims if kernel.spec.layout else (), case.sizes))
    out_core = tuple(dims[d] for d in core_out(kernel))
    if case.out is not None:
        loop = case.out.shape[:len(case.out.shape) - len(out_core)]
    else:
        loop = np.broadcast_shapes(*(c.shape[:c.ndim - len(s)] for c, s in zip(copies, cores)))
    mask = np.ones(loop, bool)
    if case.where is not None:
        mask = np.broadcast_to(case.where.on(bases), loop).copy()
    rows = [np.ascontiguousarray(np.broadcast_to(c, loop + s)[mask]) for c, s in zip(copies, cores)]
    try:
        values = compute(kernel, rows, out_core, loop_dtype, case.sizes)
    except Exception as exc:  # the kernel's own exception, as NumPy's call raises it
        return Expected(exc)
    fulls = []
    for k, value in enumerate(values if isinstance(values, tuple) else (values,)):
        full = np.zeros(loop + out_core, result_dtype)
        full[mask] = value.astype(result_dtype)
        if case.out is not None:
            np.copyto(case.outs[k].on(written), full, casting="unsafe",
                      where=mask.reshape(loop + (1,) * len(out_core)))
        fulls.append(full)
    return Expected(None, tuple(fulls), mask)


# -- the property -----------------------------------------------------------------------------

def _differences(actual: np.ndarray, expected: np.ndarray, inside: np.ndarray) -> str:
    changed = np.flatnonzero(actual != expected)
    outside = int(np.sum((changed < GUARD) | (changed >= actual.size - GUARD)))
    return (f"{changed.size} bytes differ, {int(inside[changed].sum())} of them in out='s "
            f"elements, {outside} outside the buffer; first (offsets in the buffer): "
            f"{(changed[:12] - GUARD).tolist()}")


def _same_values(actual: np.ndarray, expected: np.ndarray) -> bool:
    """Bit for bit, a NaN equal to any NaN."""
    a, e = np.ascontiguousarray(actual), np.ascontiguousarray(expected)
    bits = np.dtype(f"u{a.itemsize}")
    same = a.view(bits) == e.view(bits)
    return bool(np.all(same | (np.isnan(a) & np.isnan(e))))


def check(kernel: gf.Kernel, case: Case, target: str, compute: Compute = cpu_values) -> None:
    """Call ``kernel`` as ``case`` says on ``target`` and compare with :func:`oracle`: the
    result or exception, and every byte of every buffer."""
    original = case.bases()
    written = [b.copy() for b in original]
    with np.errstate(all="ignore"):
        expected = oracle(kernel, case, original, written, compute)
    actual = [b.copy() for b in original]
    args = [v.on(actual) for v in case.inputs] + list(case.sizes)
    keywords: dict[str, Any] = {}
    if case.out is not None:
        keywords["out"] = case.out_argument(actual)
    if case.where is not None:
        keywords["where"] = case.where.on(actual)
    if TRACE:
        print(f"calling on {target}: {case!r}", file=sys.stderr, flush=True)
    raised = None
    with np.errstate(all="ignore"):
        try:
            result = kernel(*args, target=target, **keywords)
        except Exception as exc:
            raised = exc
    # Numba's CUDA simulator runs kernels with Python's math, which raises where CUDA's gives
    # inf or NaN ("math range error"), also on elements a mask leaves out (harmless on a GPU):
    # such a case says nothing about the call path, so it is not counted.
    if SIMULATED and target == "cuda" and isinstance(raised, ArithmeticError | ValueError) \
            and "math " in str(raised):
        assume(False)
    inside = [np.zeros(b.size, bool) for b in original]
    for view in case.outs:
        inside[view.base] |= view.byte_mask(original[view.base].size)
    if expected.error is not None:
        assert type(raised) is type(expected.error) and str(raised) == str(expected.error), (
            f"{case}: NumPy raises {expected.error!r}, {target} gave {raised!r}")
        for index, (a, o) in enumerate(zip(actual, original)):
            assert np.array_equal(a[~inside[index]], o[~inside[index]]), (
                f"{case}: after the exception, buffer {index} changed outside out=: "
                f"{_differences(a, o, inside[index])}")
        return
    assert raised is None, f"{case}: NumPy gives values, {target} raised {raised!r}"
    several = len(expected.values) > 1
    if case.out is None:
        assert not several or (type(result) is tuple and len(result) == len(expected.values)), (
            f"{case}: {target} returned {type(result)}, not a tuple of {len(expected.values)}")
        for got, want in zip(result if several else (result,), expected.values):
            scalar = want.ndim == 0  # NumPy returns a scalar for a 0-d result
            assert isinstance(got, np.generic if scalar else np.ndarray), (
                f"{case}: {target} returned {type(got)}")
            got = np.asarray(got)
            assert got.dtype == want.dtype and got.shape == want.shape, (
                f"{case}: {target} gave {got.dtype}{got.shape}, NumPy {want.dtype}{want.shape}")
            assert _same_values(got[expected.mask], want[expected.mask]), (
                f"{case}: values differ on {target}:\n{got}\nNumPy:\n{want}")
    else:
        given = keywords["out"] if several else (keywords["out"],)
        returned = result if several else (result,)
        assert len(returned) == len(given) and all(r is g for r, g in zip(returned, given)), (
            f"{case}: {target} did not return out=")
        for view in case.outs:
            got, want = view.on(actual), view.on(written)
            np.copyto(got, want, where=np.isnan(got) & np.isnan(want))  # any NaN equals any NaN
    for index, (a, w) in enumerate(zip(actual, written)):
        assert np.array_equal(a, w), (
            f"{case}: buffer {index} differs from NumPy's on {target}: "
            f"{_differences(a, w, inside[index])}\nout= {target}: "
            f"{case.out_argument(actual) if case.out else None}\nout= NumPy: "
            f"{case.out_argument(written) if case.out else None}")
