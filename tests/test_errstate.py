"""Floating-point errors inside kernels follow ``np.errstate`` as NumPy's own ufuncs do.

Each case is checked against NumPy's equivalent ufunc on the same values: the same kinds are
reported, in the same words, and inputs that raise nothing in NumPy raise nothing here.
"""

from __future__ import annotations

import io
import itertools
import math
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import gpufuncs as gf

HOST_TARGETS = ["cpu", "parallel", "auto"]
N = 37  # vectorized body and scalar remainder both


def numpy_kinds(f, *args) -> list[str]:
    """The kinds NumPy's ``f(*args)`` reports, in order, through ``errstate(all='call')``."""
    seen: list[str] = []
    with np.errstate(all="call", call=lambda kind, status: seen.append(kind)):
        f(*args)
    return seen


def gf_kinds(f, *args, **kwargs) -> list[str]:
    seen: list[str] = []
    with np.errstate(all="call", call=lambda kind, status: seen.append(kind)):
        f(*args, **kwargs)
    return seen


def full(value, dtype=np.float64, n=N):
    return np.full(n, value, dtype)


@gf.ufunc(signatures=gf.float_signatures(2))
def divide(x, y):
    return x / y


@gf.ufunc(signatures=gf.float_signatures(2))
def subtract(x, y):
    return x - y


@gf.ufunc(signatures=gf.float_signatures(2))
def multiply(x, y):
    return x * y


@gf.ufunc(signatures=gf.float_signatures(1))
def vsqrt(x):
    return math.sqrt(x)


@gf.ufunc(signatures=gf.float_signatures(1))
def vlog1p(x):
    return math.log1p(x)


@gf.ufunc(signatures=gf.float_signatures(1))
def vexp2(x):
    return math.exp2(x)


CASES = [  # (gpufuncs kernel, NumPy's equivalent, arguments)
    (gf.exp, np.exp, (full(1000.0),)),
    (gf.exp, np.exp, (full(-1000.0),)),
    (gf.exp, np.exp, (full(np.nan),)),
    (gf.exp, np.exp, (full(np.inf),)),
    (gf.exp, np.exp, (full(-np.inf),)),
    (gf.exp, np.exp, (np.linspace(-5, 5, N),)),
    (gf.exp, np.exp, (full(100.0, np.float32),)),
    (gf.exp, np.exp, (full(np.inf, np.float32),)),
    (gf.clamp, np.clip, (full(np.nan), 0.0, 1.0)),
    (gf.clamp, np.clip, (full(0.5), np.nan, 1.0)),
    (gf.clamp, np.clip, (np.array([np.nan, 2.0, -1.0, 0.5] * 10), 0.0, 1.0)),
    (divide, np.divide, (full(1.0), full(0.0))),
    (divide, np.divide, (full(0.0), full(0.0))),
    (divide, np.divide, (full(np.nan), full(0.0))),
    (divide, np.divide, (full(1e300), full(1e-300))),
    (divide, np.divide, (full(1e-300), full(1e300))),
    (subtract, np.subtract, (full(np.inf), full(np.inf))),
    (multiply, np.multiply, (full(np.inf), full(2.0))),
    (multiply, np.multiply, (full(0.0), full(np.inf))),
    (vsqrt, np.sqrt, (full(-1.0),)),
    (vsqrt, np.sqrt, (full(np.nan),)),
    (vlog1p, np.log1p, (full(-1.0),)),
    (vlog1p, np.log1p, (full(-2.0),)),
    (vlog1p, np.log1p, (full(np.inf),)),
    (vexp2, np.exp2, (full(2000.0),)),
    (vexp2, np.exp2, (full(-np.inf),)),
]


def case_id(case) -> str:
    kernel, _, args = case
    shown = ",".join(str(a[0]) if isinstance(a, np.ndarray) else str(a) for a in args)
    return f"{kernel.__name__}({shown})"


@pytest.mark.parametrize("target", HOST_TARGETS)
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_kinds_reported_match_numpy(case, target):
    kernel, reference, args = case
    assert gf_kinds(kernel, *args, target=target) == numpy_kinds(reference, *args)


@pytest.mark.parametrize("target", HOST_TARGETS)
def test_warn_gives_numpy_message_at_the_callers_line(target):
    x = full(1000.0)
    with pytest.warns(RuntimeWarning) as record, np.errstate(over="warn"):
        gf.exp(x, target=target)
    assert [str(w.message) for w in record] == ["overflow encountered in exp"]
    assert record[0].filename == __file__


@pytest.mark.parametrize("target", HOST_TARGETS)
def test_raise_raises_floating_point_error(target):
    with np.errstate(over="raise"), pytest.raises(FloatingPointError, match=r"^overflow encountered in exp$"):
        gf.exp(full(1000.0), target=target)
    with np.errstate(divide="raise"), pytest.raises(FloatingPointError,
                                                    match=r"^divide by zero encountered in divide$"):
        divide(full(1.0), full(0.0), target=target)


@pytest.mark.parametrize("target", HOST_TARGETS)
def test_ignore_and_clean_inputs_give_no_warning(target):
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        with np.errstate(all="ignore"):
            gf.exp(full(1000.0), target=target)
        with np.errstate(all="raise"):
            gf.exp(np.linspace(-700, 700, 10_001), target=target)
            gf.gaussian(np.linspace(-30, 30, 1001), 0.5, 1.5, target=target)
            gf.clamp(np.linspace(-2, 2, 1001), -1.0, 1.0, target=target)
        gf.clamp(np.array([np.nan, 0.5, np.inf] * 100), 0.0, 1.0, target=target)
        gf.exp(np.array([np.nan, np.inf, -np.inf] * 100), target=target)
    assert record == []


_INTS = ("int8", "uint8", "int64", "uint64")


@gf.ufunc(signatures=[f"{t}({t}, {t})" for t in _INTS])
def int_floor_divide(a, b):
    return a // b


@gf.ufunc(signatures=[f"{t}({t}, {t})" for t in _INTS])
def int_remainder(a, b):
    return a % b


@gf.ufunc(signatures=[f"UniTuple({t}, 2)({t}, {t})" for t in _INTS])
def int_divmod(a, b):
    return divmod(a, b)


@pytest.mark.parametrize("target", HOST_TARGETS)
@pytest.mark.parametrize("dtype", _INTS)
@pytest.mark.parametrize(("kernel", "reference"), [(int_floor_divide, np.floor_divide),
                                                   (int_remainder, np.remainder),
                                                   (int_divmod, np.divmod)],
                         ids=["floor_divide", "remainder", "divmod"])
def test_integer_division_reports_as_numpy(kernel, reference, dtype, target):
    """NumPy's integer loops raise divide by zero for a zero divisor, and overflow for the
    quotient (not the remainder) of the most negative integer by -1; the host's compiled
    integer division raises the same (targets/cpu/division.py) on every layout, with NumPy's
    values. (Numba types int8 // int8 as int64: -128 // -1 is 128 there, stored as -128, the
    value NumPy gives, without NumPy's overflow: docs/semantics.md.)"""
    info = np.iinfo(dtype)
    a = np.resize(np.array([7, info.min, 5, info.max, 0], dtype), N)
    cases = {"clean": np.resize(np.array([2, 3, 1, 7, 5], dtype), N),
             "zero": np.resize(np.array([2, 3, 0, 7, 5], dtype), N)}
    if info.min < 0 and info.bits == 64:  # (narrower ones divide in int64, as Numba types
        cases["wraps"] = np.resize(np.array([2, -1, 1, 7, 5], dtype), N)  # them: no overflow)
    for name, b in cases.items():
        for x, y in ((a, b), (a[::-2], b[::-2]), (a[:3], b[:3])):
            want = numpy_kinds(reference, x, y)
            assert gf_kinds(kernel, x, y, target=target) == want, name
            assert bool(want) == (name != "clean" and (name, reference) != ("wraps", np.remainder))
            if want:
                with np.errstate(all="raise"), pytest.raises(FloatingPointError, match=want[0]):
                    kernel(x, y, target=target)
            with np.errstate(all="ignore"):
                got, expected = kernel(x, y, target=target), reference(x, y)
            for mine, numpys in zip(*((v,) if isinstance(v, np.ndarray) else v for v in (got, expected))):
                np.testing.assert_array_equal(mine, numpys)


@pytest.mark.parametrize("target", [*HOST_TARGETS, pytest.param("cuda", marks=pytest.mark.cuda)])
def test_a_first_call_under_raise_compiles(target):
    """Compiling is not computing: a kernel's first call inside ``np.errstate(all="raise")``
    compiles (typing code does NumPy arithmetic on limits) and computes the caller's values."""
    @gf.ufunc(signatures=gf.float_signatures(2), name=f"fresh_scale_{target}", replace=True)
    def fresh_scale(x, y):
        return x * y + 1.0

    x = np.linspace(-3.0, 3.0, N)
    with np.errstate(all="raise"):
        got = fresh_scale(x, 2.0, target=target)
        with pytest.raises(FloatingPointError, match="overflow"):
            fresh_scale(full(1e300), 1e300, target=target)
    np.testing.assert_array_equal(got, x * 2.0 + 1.0)


def test_defaults_warn_overflow_and_ignore_underflow():
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        with np.errstate(divide="warn", over="warn", under="ignore", invalid="warn"):  # NumPy's defaults
            gf.exp(np.array([1000.0, -1000.0]), target="cpu")
    assert [str(w.message) for w in record] == ["overflow encountered in exp"]


def test_call_print_and_log_modes():
    calls = []
    with np.errstate(divide="call", invalid="call", call=lambda kind, flag: calls.append((kind, flag))):
        divide(np.array([1.0, 0.0]), np.array([0.0, 0.0]), target="cpu")
    expected = []
    with np.errstate(divide="call", invalid="call", call=lambda kind, flag: expected.append((kind, flag))):
        np.divide(np.array([1.0, 0.0]), np.array([0.0, 0.0]))
    assert calls == expected == [("divide by zero", 9), ("invalid value", 9)]

    class Log(io.StringIO):
        pass

    log = Log()
    with np.errstate(over="log", call=log):
        gf.exp(full(1000.0), target="cpu")
    assert log.getvalue() == "Warning: overflow encountered in exp\n"


def test_print_mode(capsys):
    with np.errstate(over="print"):
        gf.exp(full(1000.0), target="cpu")
    assert capsys.readouterr().err == "Warning: overflow encountered in exp\n"


@pytest.mark.parametrize("target", ["cpu", "parallel"])
def test_parallel_chunks_report_from_their_threads(target):
    x = np.zeros(1 << 20)
    x[-3] = 1000.0  # in the last chunk only
    with np.errstate(over="raise"), pytest.raises(FloatingPointError):
        gf.exp(x, target=target)


@pytest.mark.parametrize("target", ["cpu", "parallel"])
def test_general_path_strided_and_masked(target):
    x = full(1000.0, n=2 * N)
    with np.errstate(over="raise"), pytest.raises(FloatingPointError, match="overflow encountered in exp"):
        gf.exp(x[::2], target="cpu")
    out = np.zeros(N)
    where = np.arange(N) % 2 == 0
    with np.errstate(over="raise"), pytest.raises(FloatingPointError):
        gf.exp(full(1000.0), out=out, where=where, target=target)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        gf.exp(np.where(where, 1.0, 1000.0), out=out, where=where, target=target)  # masked out
    assert record == []


@gf.ufunc(signatures=gf.float_signatures(1))
def root_below_3(x):
    return math.sqrt(x) if x < 3.0 else 3.0  # (a vector compare of NaN raises invalid)


@gf.ufunc(signatures=["UniTuple(float64, 2)(float64)"])
def root_below_3_and_square(x):
    return (math.sqrt(x) if x < 3.0 else 3.0), x * x


def numpy_root_below_3(x):
    return np.where(x < 3.0, np.sqrt(x), 3.0)


@pytest.mark.parametrize("target", ["cpu", "parallel"])
def test_large_arrays_refine_their_flags_by_rows(target, monkeypatch):
    """Where the refinement is not compiled (here: COMPILED_REFINEMENT_MIN raised past the
    call, for a kernel whose calls are planned after that), arrays of several of its pieces
    (fpflags.ROWS_BYTES) with NaN throughout: the pieces' vector compares raise a spurious
    invalid, which is not reported; a genuine one (a negative sqrt argument) in the last piece
    only, or the first, is, as NumPy's; so on the masked loop (where=), and on a kernel of two
    outputs (its gufunc loop, which refines whole)."""
    from gpufuncs.targets import cpu
    from gpufuncs.targets.cpu import fpflags

    monkeypatch.setattr(cpu, "COMPILED_REFINEMENT_MIN", 1 << 62)
    by_rows = gf.ufunc(signatures=gf.float_signatures(1), name=f"root_below_3_by_rows_{target}",
                       replace=True)(root_below_3.spec.pyfunc)
    pieces = []
    original = fpflags._replaced
    monkeypatch.setattr(fpflags, "_replaced",
                        lambda ins, *a, **k: pieces.append(ins) or original(ins, *a, **k))
    n = 3 * fpflags.ROWS_BYTES // 8 + 5
    where = np.arange(n) % 3 != 0
    x = np.linspace(0.0, 4.0, n)
    x[::97] = np.nan
    for negative in (None, n - 2, 3):
        y = x.copy()
        if negative is not None:
            y[negative] = -1.0
        pieces.clear()
        assert gf_kinds(by_rows, y, target=target) == numpy_kinds(numpy_root_below_3, y)
        assert len(pieces) >= (1 if negative == 3 else 4), "refined by rows"
        got = np.zeros(n)
        assert gf_kinds(by_rows, y, out=got, where=where, target=target) == \
            numpy_kinds(lambda v: np.sqrt(v, out=np.zeros(n), where=where), y)
        with np.errstate(invalid="ignore"):
            np.testing.assert_array_equal(got, np.where(where, numpy_root_below_3(y), 0.0))
        assert gf_kinds(root_below_3_and_square, y, target=target) == numpy_kinds(numpy_root_below_3, y)
    assert gf_kinds(gf.clamp, x, 0.5, 1.5, target=target) == [] == numpy_kinds(np.clip, x, 0.5, 1.5)


@gf.ufunc(signatures=gf.float_signatures(1))
def vexp(x):
    return math.exp(x)


@pytest.mark.parametrize("target", ["cpu", "parallel"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_large_calls_refine_in_a_compiled_loop(target, dtype, monkeypatch):
    """Calls of COMPILED_REFINEMENT_MIN elements and more refine in a compiled loop that gives
    each element with a special argument the arguments of the first one without (no NumPy
    pass: fpflags._without is never called): NaN and infinities anywhere, genuine flags in the
    first element, the last, or none, every element special, a special scalar argument; the
    kinds reported are NumPy's for the same call (underflow aside, docs/semantics.md); so on the
    general flat path (Python int scalars, F-ordered arrays)."""
    from gpufuncs.targets import cpu
    from gpufuncs.targets.cpu import fpflags

    def refuse(*args, **kwargs):
        raise AssertionError("refined in NumPy passes")

    monkeypatch.setattr(fpflags, "_without", refuse)
    n = cpu.COMPILED_REFINEMENT_MIN + 3
    base = np.linspace(-0.25, 4.0, n).astype(dtype)
    layouts = {"NaN": (slice(None, None, 97), np.nan), "inf": (slice(5, None, 1001), np.inf),
               "-inf": (slice(None, None, 4093), -np.inf), "none": (slice(0, 0), 0.0),
               "all NaN": (slice(None), np.nan)}
    genuine = {"none": None, "first": 0, "last": n - 1, "middle": n // 2}
    kernels = [(root_below_3, numpy_root_below_3, -1.0), (vsqrt, np.sqrt, -1.0), (vexp, np.exp, 1000.0),
               (lambda x, **k: divide(np.ones_like(x), x, **k), lambda x: np.divide(np.ones_like(x), x), 0.0),
               (lambda x, **k: gf.clamp(x, dtype(0.5), dtype(1.5), **k), lambda x: np.clip(x, 0.5, 1.5), 2.0)]
    for (where, value), (at_name, at) in itertools.product(layouts.values(), genuine.items()):
        for kernel, reference, bad in kernels:
            x = base.copy()
            x[where] = value
            if at is not None:
                x[at] = bad
            assert _kinds_but_underflow(kernel, x, target=target) == _kinds_but_underflow(reference, x), \
                (value, at_name, reference)
    x = base.copy()
    x[::97] = np.nan
    assert gf_kinds(gf.clamp, x, dtype(np.nan), dtype(1.5), target=target) == \
        numpy_kinds(np.clip, x, dtype(np.nan), dtype(1.5))
    # Calls of the general flat path: Python int scalars (converted), F-ordered arrays (as their
    # C-ordered transposes); a genuine invalid (sqrt(-1)) last in memory order, or none.
    square = np.asfortranarray(np.resize(base, (n // 256, 256)))
    square[::7, ::5] = np.nan
    for genuine_at in (None, (-1, -1)):
        y, z = x.copy(), square.copy()
        if genuine_at is not None:
            y[-1], z[genuine_at] = -1.0, -1.0
        assert gf_kinds(gf.clamp, y, 0, 1, target=target) == numpy_kinds(np.clip, y, 0, 1)
        assert gf_kinds(vsqrt, z, target=target) == numpy_kinds(np.sqrt, z)
        assert gf_kinds(root_below_3, z, target=target) == numpy_kinds(numpy_root_below_3, z)


@pytest.mark.parametrize("target", ["cpu", "parallel"])
@pytest.mark.parametrize("n", [1000, 20_000, 200_000])
def test_masked_calls_refine_with_the_arguments_of_an_element_they_compute(target, n):
    """where= calls on data with NaN: the refinement gives a NaN element the arguments of an
    element the masked loop computes, never of one it skips (a negative sqrt argument the mask
    leaves out was reported as NumPy does not), by NumPy passes (n = 1000) and compiled (the
    others), C- and F-ordered; a genuine invalid the mask lets in is reported."""
    x = np.linspace(-1.0, 4.0, n)
    x[::97] = np.nan
    mask = (x >= 0.0) | np.isnan(x)  # the negatives left out
    y, let_in = x.copy(), mask.copy()
    y[n // 2] = let_in[n // 2] = -1.0
    for values, where, layout in ((x, mask, "C"), (y, let_in, "C"),
                                  (np.asfortranarray(np.resize(x, (n // 100, 100))),
                                   np.asfortranarray(np.resize(mask, (n // 100, 100))), "F")):
        got = gf_kinds(root_below_3, values, out=np.zeros_like(values), where=where, target=target)
        want = numpy_kinds(lambda v, w=where: np.sqrt(v, out=np.zeros_like(v), where=w), values)
        assert got == want, layout


@pytest.mark.parametrize("layout", ["reversed", "strided", "broadcast"])
def test_parallel_calls_through_numba_ufuncs_report_their_flags(layout):
    """Calls of target 'parallel' that take Numba's ufunc (a layout the flat loops do not take)
    report what the kernel raised: Numba's parallel ufunc runs its loop on threads whose status
    NumPy never reads (sqrt(-inf) returned NaN silently under 'raise'; found by the property
    test below), so it runs only calls whose every kind is ignored, with NumPy's values."""
    for at in (0, 31, 63):  # (whichever thread computes it)
        x = np.linspace(1.0, 64.0, 64)
        x[at], x[(at + 17) % 64] = -np.inf, np.nan
        value = {"reversed": x[::-1], "strided": np.repeat(x, 2)[::2],
                 "broadcast": x[:, None] + np.zeros(3)}[layout]
        with np.errstate(invalid="raise"), pytest.raises(FloatingPointError,
                                                         match="invalid value encountered in vsqrt"):
            vsqrt(value, target="parallel")
        with np.errstate(all="ignore"):
            np.testing.assert_array_equal(vsqrt(value, target="parallel"), np.sqrt(value))


def test_parallel_gufunc_calls_through_numba_report_their_flags():
    """The same for a generalized kernel's rows in reverse (Numba's parallel gufunc)."""
    @gf.gufunc(signatures=["void(float64[:], float64[:])"], layout="(n)->()")
    def root_sum(x, out):
        total = 0.0
        for v in x:
            total += math.sqrt(v)
        out[0] = total

    for at in (0, 100, 199):
        x = np.ones((200, 8))
        x[at, 3] = -1.0
        with np.errstate(invalid="raise"), pytest.raises(FloatingPointError,
                                                         match="invalid value encountered in root_sum"):
            root_sum(x[::-1], target="parallel")
        with np.errstate(all="ignore"):
            np.testing.assert_array_equal(root_sum(x[::-1], target="parallel"), np.sqrt(x[::-1]).sum(axis=1))


@pytest.mark.parametrize("target", ["cpu", "parallel"])
def test_the_numba_ufunc_path_reports_as_the_flat_loops(target):
    """Calls the flat loops do not take (strided, broadcast, float16, masked through a buffer)
    run Numba's ufunc through NumPy, which read its status and warned from inside gpufuncs,
    under the Python function's name ("overflow encountered in store" for two outputs), with
    the invalid that vector compares raise for NaN arguments (a spurious FloatingPointError
    under 'raise'). Now: the kernel's name, the caller's line, refined as the flat loops'."""
    x = np.linspace(0.0, 4.0, 3001)
    x[::7] = np.nan
    y = x.copy()
    y[0] = -1.0  # a genuine invalid: sqrt(-1), in every call below
    out = np.zeros(3001)[::2]
    calls = {"strided": lambda k, v: k(v[::2], target=target),
             "broadcast": lambda k, v: k(v[:, None] + np.zeros(3), target=target),
             "float16": lambda k, v: k(v.astype(np.float16)[::3], target=target),
             "masked out=": lambda k, v: k(v[::2], out=out, where=np.arange(1501) % 2 == 0, target=target)}
    for name, call in calls.items():
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            call(root_below_3, x)
        assert record == [], name
        with np.errstate(invalid="raise"):
            call(root_below_3, x)
        with pytest.warns(RuntimeWarning) as record:
            call(root_below_3, y)
        assert [str(w.message) for w in record] == ["invalid value encountered in root_below_3"], name
        assert record[0].filename == __file__, name
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        root_below_3_and_square(x[::2], target=target)
        gf.clamp(x[::2], 0.5, 1.5, target=target)
        gf.clamp(x, np.array([0.5]), 1.5, target=target)
    assert record == []
    with pytest.warns(RuntimeWarning) as record:
        root_below_3_and_square(y[::2], target=target)
    assert [str(w.message) for w in record] == ["invalid value encountered in root_below_3_and_square"]
    assert record[0].filename == __file__


#: Kernels whose reports match NumPy's equivalent, but for underflow (docs/semantics.md), on
#: every value: the property test below checks the refinement of vector code's extra flags.
REFINED = {"divide": (divide, np.divide, 2), "multiply": (multiply, np.multiply, 2),
           "sqrt": (vsqrt, np.sqrt, 1), "root_below_3": (root_below_3, numpy_root_below_3, 1),
           "clamp": (gf.clamp, np.clip, 3)}
_SPECIAL = (np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e308, -1e308, 1e-310, 2.0, -3.0, 0.5, 4.0)


def _kinds_but_underflow(f, *args, **kwargs) -> list[str]:
    seen: list[str] = []
    with np.errstate(all="call", under="ignore", call=lambda kind, status: seen.append(kind)):
        f(*args, **kwargs)
    return seen


@given(name=st.sampled_from(sorted(REFINED)), target=st.sampled_from(HOST_TARGETS),
       layout=st.sampled_from(["contiguous", "strided", "reversed", "broadcast", "float32"]),
       n=st.sampled_from([1, 7, 37, 200, 70_001]), data=st.data())
def test_reported_kinds_match_numpy_on_special_values(name, target, layout, n, data):
    """Arguments drawn from NaN, infinities, zeros, huge, subnormal and negative values, laid
    out to take the flat loops (contiguous, and in pieces past fpflags.ROWS_BYTES) or Numba's
    ufunc (strided, reversed, broadcast, float32 through float64 loops as NumPy casts them):
    the kinds reported are NumPy's for the same call, whatever vector code raised beside."""
    kernel, reference, nin = REFINED[name]
    pool = st.sampled_from(_SPECIAL) | st.floats(-10.0, 10.0)
    args = []
    for i in range(nin):
        values = np.resize(np.array(data.draw(st.lists(pool, min_size=1, max_size=9), label=f"x{i}")), n)
        if layout == "strided":
            values = np.repeat(values, 2)[::2]
        elif layout == "reversed":
            values = values[::-1]
        elif layout == "broadcast" and i:
            values = values[:1]
        elif layout == "float32":
            with np.errstate(all="ignore"):
                values = values.astype(np.float32)
        args.append(values)
    with np.errstate(all="ignore"):
        want = reference(*args)
    assert _kinds_but_underflow(kernel, *args, target=target) == _kinds_but_underflow(reference, *args)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(kernel(*args, target=target), want)


def test_gufunc_body_flags():
    @gf.gufunc(signatures=["void(float64[:], float64[:])"], layout="(n)->()")
    def inverse_sum(x, out):
        s = 0.0
        for v in x:
            s += 1.0 / v
        out[0] = s

    with np.errstate(divide="raise"), pytest.raises(FloatingPointError,
                                                    match="divide by zero encountered in inverse_sum"):
        inverse_sum(np.zeros((4, 3)), target="cpu")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        inverse_sum(np.ones((4, 3)), target="cpu")
    assert record == []


# -- cuda: flags derived from the values on the GPU (docs/semantics.md, "Floating-point errors") --
SIMULATED = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
#: Kernels whose bodies the simulator can run on any value: it runs them as Python, where
#: ``math.exp(1000)`` raises OverflowError (the GPU returns inf).
SIMULATOR_SAFE = {"divide", "subtract", "multiply", "clamp"}


def cuda_kinds(reference, args) -> list[str]:
    """What the cuda target reports where NumPy reports ``numpy_kinds``: underflow never (it
    leaves no trace in the values); an infinite result from finite arguments none of which is
    zero is overflow (NumPy's log1p(-1) says divide by zero)."""
    kinds = [k for k in numpy_kinds(reference, *args) if k != "underflow"]
    if reference is np.log1p and np.any(args[0] == -1.0):
        kinds = ["overflow" if k == "divide by zero" else k for k in kinds]
    return kinds


def needs_python_math(kernel) -> None:
    if SIMULATED and kernel.__name__ not in SIMULATOR_SAFE:
        pytest.skip("the simulator computes math.* in Python, which raises where the GPU returns inf/NaN")


def device(a):
    """``a`` as a device array: CuPy's on a GPU (Numba's without CuPy), Numba's on the simulator."""
    if not SIMULATED:
        try:
            import cupy
        except ImportError:
            pass
        else:
            return cupy.asarray(np.ascontiguousarray(a))
    from numba import cuda

    return cuda.to_device(np.ascontiguousarray(a))


def host(d) -> np.ndarray:
    return d.get() if hasattr(d, "get") and not hasattr(d, "copy_to_host") else d.copy_to_host()


@gf.ufunc(signatures=["float64(float64, int64)"])
def per_count(x, n):  # the mixed-types template: one element per thread, arguments cast one by one
    return x / n


@gf.ufunc(signatures=["complex128(complex128, complex128)"])
def cmultiply(x, y):
    return x * y


@gf.ufunc(signatures=["UniTuple(float64, 2)(float64, float64)"])
def float_divmod(x, y):  # two outputs: each result checked, the kinds of both reported
    return divmod(x, y)


@pytest.mark.cuda
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_cuda_kinds_match_numpy_on_host_arrays(case):
    kernel, reference, args = case
    needs_python_math(kernel)
    assert gf_kinds(kernel, *args, target="cuda") == cuda_kinds(reference, args)


@pytest.mark.cuda
@pytest.mark.parametrize(("kernel", "reference", "args"), [
    (per_count, np.divide, (full(1.0), np.zeros(N, np.int64))),
    (per_count, np.divide, (full(0.0), np.zeros(N, np.int64))),
    (per_count, np.divide, (full(1e300), np.full(N, 3, np.int64))),
    (cmultiply, np.multiply, (full(1e300 + 0j, np.complex128), full(1e300 + 0j, np.complex128))),
    (cmultiply, np.multiply, (full(np.inf + 0j, np.complex128), full(1j, np.complex128))),
    (cmultiply, np.multiply, (full(complex(np.nan, 1), np.complex128), full(1j, np.complex128))),
    (multiply, np.multiply, (full(300.0, np.float16), full(300.0, np.float16))),  # float16 result
    (multiply, np.multiply, (full(100.0, np.float16), full(100.0, np.float16))),
    (float_divmod, np.divmod, (full(1.0), full(0.0))),  # (inf, nan): divide by zero, invalid
    (float_divmod, np.divmod, (full(0.0), full(0.0))),
    (float_divmod, np.divmod, (full(np.inf), full(1.0))),
    (float_divmod, np.divmod, (full(7.5), full(-2.0))),
], ids=["int-zero-divisor", "zero-by-int-zero", "finite", "complex-overflow", "complex-inf-times-i",
        "complex-nan", "float16-overflow", "float16-finite", "divmod-by-zero", "divmod-zero-by-zero",
        "divmod-inf", "divmod-finite"])
def test_cuda_kinds_of_mixed_complex_and_float16_results(kernel, reference, args):
    expected = numpy_kinds(reference, *args)
    assert gf_kinds(kernel, *args, target="cuda") == expected
    assert gf_kinds(kernel, *(device(a) for a in args)) == expected


def overflowing() -> tuple:
    """A kernel and arguments whose every result overflows: ``exp`` on a GPU, a product on the
    simulator (see SIMULATOR_SAFE)."""
    if SIMULATED:
        return multiply, (full(1e300), full(1e300)), "multiply"
    return gf.exp, (full(1000.0),), "exp"


@pytest.mark.cuda
@pytest.mark.parametrize("where", ["host", "device"])
def test_cuda_raise_and_call_report_on_host_and_device_arrays(where):
    kernel, args, name = overflowing()
    args = args if where == "host" else tuple(device(a) for a in args)
    with np.errstate(over="raise"), pytest.raises(FloatingPointError,
                                                  match=rf"^overflow encountered in {name}$"):
        kernel(*args, target="cuda")
    calls = []
    with np.errstate(all="call", call=lambda kind, flag: calls.append((kind, flag))):
        result = kernel(*args, target="cuda")
    assert calls == [("overflow", 2)]
    assert np.all(np.isposinf(result if where == "host" else host(result)))
    with np.errstate(divide="raise"), pytest.raises(FloatingPointError,
                                                    match=r"^divide by zero encountered in divide$"):
        x = (full(1.0), full(0.0))
        divide(*(x if where == "host" else (device(a) for a in x)), target="cuda")


@pytest.mark.cuda
def test_cuda_warn_on_host_arrays_gives_numpy_message_at_the_callers_line():
    kernel, args, name = overflowing()
    with pytest.warns(RuntimeWarning) as record, np.errstate(over="warn"):
        kernel(*args, target="cuda")
    assert [str(w.message) for w in record] == [f"overflow encountered in {name}"]
    assert record[0].filename == __file__


@pytest.mark.cuda
def test_cuda_warn_on_device_arrays_stays_asynchronous_and_reports_nothing():
    """A deliberate difference (docs/semantics.md): 'warn' would need a synchronize per call."""
    kernel, args, _ = overflowing()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        with np.errstate(all="warn"):
            result = kernel(*(device(a) for a in args))
    assert np.all(np.isposinf(host(result)))
    assert record == []


@pytest.mark.cuda
@pytest.mark.parametrize("where", ["host", "device"])
def test_cuda_ignore_clean_and_special_inputs_report_nothing(where):
    kernel, args, _ = overflowing()
    to = (lambda a: a) if where == "host" else device
    values = np.linspace(-30, 30, 1001)
    specials = np.array([np.nan, np.inf, -np.inf, 0.5] * 25)
    calls = []
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        with np.errstate(all="ignore"):
            ignored = kernel(*(to(a) for a in args), target="cuda")
        with np.errstate(all="call", call=lambda kind, flag: calls.append(kind)):
            clean = multiply(to(values), to(values[::-1]), target="cuda")
            clamped = gf.clamp(to(specials), 0.0, 1.0, target="cuda")
            products = multiply(to(specials), to(np.full(100, 2.0)), target="cuda")
            sums = subtract(to(specials), to(np.full(100, -1.0)), target="cuda")
            if not SIMULATED:
                exps = gf.exp(to(specials), target="cuda")
                gaussians = gf.gaussian(to(values), 0.5, 1.5, target="cuda")
    assert calls == [] and record == []
    get = (lambda a: a) if where == "host" else host
    assert np.all(np.isposinf(get(ignored)))
    np.testing.assert_array_equal(get(clean), values * values[::-1])
    np.testing.assert_array_equal(get(clamped), np.clip(specials, 0.0, 1.0))
    np.testing.assert_array_equal(get(products), specials * 2.0)
    np.testing.assert_array_equal(get(sums), specials + 1.0)
    if not SIMULATED:
        np.testing.assert_allclose(get(exps), np.exp(specials), rtol=1e-15)
        np.testing.assert_allclose(get(gaussians), gf.gaussian(values, 0.5, 1.5, target="cpu"), rtol=1e-14)


@pytest.mark.cuda
@pytest.mark.parametrize("where", ["host", "device"])
def test_cuda_masked_out_and_strided_elements(where):
    x = np.where(np.arange(2 * N) % 2 == 0, 1e300, 1.0)  # overflows at even positions when squared
    to = (lambda a: a) if where == "host" else device
    mask = np.arange(2 * N) % 2 == 1
    out = to(np.zeros(2 * N))
    with np.errstate(over="raise"):
        multiply(to(x), to(x), out=out, where=to(mask), target="cuda")  # only odd positions computed
        multiply(to(x)[1::2], to(x)[1::2], target="cuda")
        with pytest.raises(FloatingPointError, match="overflow encountered in multiply"):
            multiply(to(x)[::2], to(x)[::2], target="cuda")
        with pytest.raises(FloatingPointError, match="overflow encountered in multiply"):
            multiply(to(x), to(x), out=to(np.zeros(2 * N)), where=to(~mask), target="cuda")
    np.testing.assert_array_equal((out if where == "host" else host(out))[mask], 1.0)


@pytest.mark.cuda
def test_cuda_print_and_log_modes(capsys):
    kernel, args, name = overflowing()

    class Log(io.StringIO):
        pass

    for to in ((lambda a: a), device):
        log = Log()
        with np.errstate(over="log", call=log):
            kernel(*(to(a) for a in args), target="cuda")
        assert log.getvalue() == f"Warning: overflow encountered in {name}\n"
        with np.errstate(over="print"):
            kernel(*(to(a) for a in args), target="cuda")
        assert capsys.readouterr().err == f"Warning: overflow encountered in {name}\n"


@pytest.mark.cuda
@pytest.mark.slow
def test_cuda_fpstatus_0_compiles_the_check_out():
    code = ("import numpy as np, gpufuncs as gf\n"
            "@gf.ufunc(signatures=gf.float_signatures(2))\n"
            "def mul(x, y):\n"
            "    return x * y\n"
            "x = np.full(5, 1e300)\n"
            "with np.errstate(all='raise'):\n"
            "    print(mul(x, x, target='cuda'))\n")
    env = {**os.environ, "GPUFUNCS_FPSTATUS": "0"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "[inf inf inf inf inf]"


@gf.ufunc(signatures=["float64(int64)", "float32(float32)", "float64(float64)"])
def finite_or_zero(x):
    return x if math.isfinite(x) else 0.0


@pytest.mark.parametrize("target", ["cpu", pytest.param("parallel", marks=pytest.mark.slow)])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64])
def test_math_isfinite_of_an_infinity_raises_no_flag(target, dtype):
    """Numba's math.isfinite computes x - x, which raises the invalid flag for an infinity: a
    kernel testing its input, as NumPy's np.isfinite does, must not warn where NumPy does not."""
    values = np.array([np.inf, -np.inf, np.nan, 2.0]) if dtype != np.int64 else np.array([3, -4])
    x = values.astype(dtype)
    with np.errstate(all="raise"):
        result = finite_or_zero(x, target=target)
    np.testing.assert_array_equal(result, np.where(np.isfinite(x), x, 0))
