"""Complex arithmetic and ``cmath.exp`` in kernels agree with NumPy's ufuncs (issue 30).

Numba compiles ``z * w``, ``z / w`` and ``cmath.exp`` as CPython computes them; kernels get
NumPy's (see :mod:`gpufuncs.targets.numpy_complex`). Pinned values first, then Hypothesis
properties: near the overflow edge (multiply), and over every magnitude with infinities and
NaN in either part (exp). ``cuda`` tests are marked. The CUDA simulator runs a kernel as
Python, one element at a time on NumPy scalars, so its ``*`` is NumPy's scalar arithmetic (four
rounded products) for array operands too; the tests accept NumPy's array or scalar answer
there, element by element.
"""

from __future__ import annotations

import cmath
import operator
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gpufuncs as gf
from gpufuncs.testing import check_kernel
from gpufuncs.testing_loops import assert_matches

SIMULATED = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
CUDA = pytest.param("cuda", marks=pytest.mark.cuda)
TARGETS = [CUDA] if SIMULATED else ["cpu", "parallel", "auto", CUDA]
COMPLEX = ["complex64(complex64, complex64)", "complex128(complex128, complex128)"]
F64_MAX, F32_MAX = float(np.finfo(np.float64).max), float(np.finfo(np.float32).max)


@gf.ufunc(signatures=COMPLEX, reference=np.multiply, replace=True)
def complex_multiply(a, b):
    return a * b


@gf.ufunc(signatures=COMPLEX, reference=np.divide, replace=True)
def complex_divide(a, b):
    return a / b


@gf.ufunc(signatures=["complex64(complex64)", "complex128(complex128)"], reference=np.exp,
          replace=True)
def complex_exp(z):
    return cmath.exp(z)


def numpy_scalar(op, a, b, dtype):
    """NumPy's scalar arithmetic (what the CUDA simulator's Python may compute): the operator on
    NumPy scalars (``np.multiply`` of scalars runs the array loop)."""
    with np.errstate(all="ignore"):
        return {np.multiply: operator.mul, np.divide: operator.truediv}[op](dtype(a), dtype(b))


def assert_numpys(got, x, y, op, dtype):
    """``got`` is NumPy's ``op(x, y)`` on arrays, bit for bit; under the simulator, NumPy's
    array or scalar answer, per element (see the module docstring)."""
    x, y = np.broadcast_arrays(np.atleast_1d(x), np.atleast_1d(y))
    with np.errstate(all="ignore"):
        want = op(x, y)
    got = np.atleast_1d(got)
    if not SIMULATED:
        assert as_bits(got) == as_bits(want), (x, y, got, want)
        return
    scalar = np.array([numpy_scalar(op, a, b, dtype) for a, b in zip(x, y)], dtype)
    for g, w, s in zip(as_bits(got), as_bits(want), as_bits(scalar)):
        assert g in (w, s), (x, y, got, want, scalar)


def as_bits(values):
    """Bytes per element: equal NaN, infinities and signed zeros compare equal only if equal."""
    values = np.asarray(values)
    return [v.tobytes() for v in values.reshape(-1)]


#: (a, b, dtype, NumPy's a * b): fused products, as NumPy's SIMD loop computes them.
MULTIPLY = [
    # 2**1024 overflows before subtracting 2**971; fma(a, c, -(b*d)) gives the largest float64
    (complex(2.0**512, 2.0**459), complex(2.0**512, 2.0**512), np.complex128, complex(F64_MAX, np.inf)),
    (complex(2.0**64, 2.0**40), complex(2.0**64, 2.0**64), np.complex64, complex(F32_MAX, np.inf)),
    # an ordinary last-bit difference (Python: -3.7299999999999995-0.8900000000000003j)
    (-0.6 + 0.7j, 1.9 + 3.7j, np.complex128, -3.73 - 0.8900000000000001j),
    (3.1 + 0.7j, -0.2 + 2.2j, np.complex64, complex(np.float32(-2.1599998), np.float32(6.68))),
]

#: (a, b, dtype, NumPy's a / b): Smith's algorithm with a reciprocal; no exception for 0j.
DIVIDE = [
    (-1.7 + 1.2j, 1.6 - 1.7j, np.complex128, -0.8733944954128439 - 0.17798165137614677j),  # Python: ...844
    (1 - 2j, 0j, np.complex128, complex(np.inf, -np.inf)),
    (1 - 2j, 0j, np.complex64, complex(np.inf, -np.inf)),
    (0j, 0j, np.complex128, complex(np.nan, np.nan)),
]


def _numpy_fuses() -> bool:
    a, b, dtype, want = MULTIPLY[0]
    with np.errstate(all="ignore"):
        return complex(np.multiply(np.array([a], dtype), np.array([b], dtype))[0]) == want


needs_numpy_simd = pytest.mark.skipif(not _numpy_fuses(), reason="NumPy runs its unfused scalar "
                                      "complex loop on this CPU (no FMA): nothing to agree with")


@needs_numpy_simd
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize(("a", "b", "dtype", "want"), MULTIPLY)
def test_multiply_gives_numpys_fused_products(a, b, dtype, want, target):
    x, y = np.array([a, a], dtype), np.array([b, b], dtype)
    with np.errstate(all="ignore"):
        assert as_bits(np.multiply(x, y)) == as_bits(np.array([want, want], dtype))
        got = complex_multiply(x, y, target=target)
        scalar = complex_multiply(x[0], y[0], target=target)
    assert got.dtype == scalar.dtype == dtype
    assert_numpys(got, x, y, np.multiply, dtype)
    assert_numpys(scalar, x[0], y[0], np.multiply, dtype)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize(("a", "b", "dtype", "want"), DIVIDE)
def test_divide_gives_numpys_smith_algorithm_and_no_exception_for_zero(a, b, dtype, want, target):
    x, y = np.array([a], dtype), np.array([b], dtype)
    with np.errstate(all="ignore"):
        assert np.array_equal(np.divide(x, y), np.array([want], dtype), equal_nan=True)
        got = complex_divide(x, y, target=target)  # NumPy's scalars divide the same way
    assert got.dtype == dtype
    assert np.array_equal(got, np.array([want], dtype), equal_nan=True)
    parts, want_parts = got.view(got.real.dtype), np.array([want], dtype).view(got.real.dtype)
    signed = ~np.isnan(want_parts)  # the signs of infinities and zeros
    assert np.array_equal(np.signbit(parts[signed]), np.signbit(want_parts[signed]))


def near_overflow(dtype):
    """Complex numbers whose parts are within a factor 16 of the square root of the largest
    finite value, either sign: products whose sums round at the overflow threshold."""
    top = 512 if dtype == np.complex128 else 64
    part = st.builds(lambda k, m, s: s * np.ldexp(1.0 + m, k), st.integers(top - 4, top - 1),
                     st.floats(0, 1, exclude_max=True), st.sampled_from([1.0, -1.0]))
    small = st.builds(lambda k, m: np.ldexp(1.0 + m, k), st.integers(top - 80, top - 1),
                      st.floats(0, 1, exclude_max=True))
    return st.builds(complex, st.one_of(part, small), st.one_of(part, small)).map(dtype)


@needs_numpy_simd
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_multiply_agrees_bit_for_bit_near_the_overflow_edge(dtype, target):
    @settings(max_examples=10 if SIMULATED else 60, deadline=None)
    @given(st.lists(near_overflow(dtype), min_size=1, max_size=8),
           st.lists(near_overflow(dtype), min_size=1, max_size=8))
    def check(xs, ys):
        n = min(len(xs), len(ys))
        x, y = np.array(xs[:n], dtype), np.array(ys[:n], dtype)
        with np.errstate(all="ignore"):
            got = complex_multiply(x, y, target=target)
        assert_numpys(got, x, y, np.multiply, dtype)

    check()


# -- cmath.exp ------------------------------------------------------------------------------------
INF, NAN = np.inf, np.nan

#: (z, NumPy's exp(z)), where Numba's cmath.exp gives another answer (given after #).
EXP = [
    (complex(710, 1), complex(1.2070325234545281e308, INF)),  # inf+infj: exp(710) overflows
    (complex(710, 0), complex(INF, 0.0)),  # inf+nanj: inf * sin(0)
    (complex(710, -0.0), complex(INF, -0.0)),
    (complex(1e300, 0), complex(INF, 0.0)),
    (complex(710, -750), complex(-1.490036491686543e308, -1.6644890713610516e308)),
    (complex(-INF, -INF), complex(0.0, -0.0)),  # 0+0j
    # C99's special values, where both agree
    (complex(INF, 0), complex(INF, 0.0)),
    (complex(-INF, 1), complex(0.0, 0.0)),
    (complex(INF, INF), complex(INF, NAN)),
    (complex(NAN, 0), complex(NAN, 0.0)),
    (complex(NAN, 1), complex(NAN, NAN)),
    (complex(1, INF), complex(NAN, NAN)),
    (complex(0, 0), complex(1.0, 0.0)),
    (complex(1, 2), complex(-1.1312043837568135, 2.4717266720048188)),
]


def _same_special_values(got, want):
    """Infinities, NaN and zeros (with their signs) where ``want`` has them, part by part."""
    for g, w in ((got.real, want.real), (got.imag, want.imag)):
        special = ~np.isfinite(w) | (w == 0)
        assert np.array_equal(g[special], w[special], equal_nan=True), (g, w)
        assert np.array_equal(np.signbit(g[special & ~np.isnan(w)]), np.signbit(w[special & ~np.isnan(w)]))


def test_exp_values_are_numpys():
    with np.errstate(all="ignore"):
        got = np.exp(np.array([z for z, _ in EXP]))
    want = np.array([w for _, w in EXP])
    assert np.array_equal(got, want, equal_nan=True)
    _same_special_values(got, want)  # the signs of zeros and infinities (a NaN's may differ)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_exp_special_values_and_overflow_scaling(dtype, target):
    z = np.array([z for z, _ in EXP], dtype)
    with np.errstate(all="ignore"):
        want = np.exp(z)
        got = complex_exp(z, target=target)
    assert got.dtype == dtype
    if target in ("cpu", "parallel", "auto"):  # glibc's algorithm on glibc's exp, sin and cos
        assert as_bits(got) == as_bits(want)
    else:  # CUDA's libdevice functions: within the tolerance, special values exact
        _same_special_values(got, want)
        loop = complex_exp.spec.loop_for(np.dtype(dtype))
        assert_matches(complex_exp, loop, target, got, want, None)


@pytest.mark.parametrize("target", [t for t in TARGETS if t not in ("parallel", "auto")])
def test_exp_agrees_with_numpy_everywhere(target):
    """Every magnitude, infinities and NaN in either part (gpufuncs.testing_loops.values)."""
    check_kernel(complex_exp, targets=[target], max_examples=8 if SIMULATED else 40)


def large_real_parts(dtype):
    """``x + yj`` with ``exp(x)`` overflowing or near it (a finite result may remain) and ``y``
    of any size, special values included."""
    edge = 88.0 if dtype == np.complex64 else 709.0
    x = st.floats(edge - 20, 3.5 * edge, width=32 if dtype == np.complex64 else 64)
    y = st.one_of(st.floats(-10, 10), st.floats(allow_nan=True, allow_infinity=True,
                                                width=32 if dtype == np.complex64 else 64),
                  st.sampled_from([0.0, -0.0, 1e-320, np.pi / 2]))
    return st.builds(complex, x, y).map(dtype)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_exp_near_overflow(dtype, target):
    loop = complex_exp.spec.loop_for(np.dtype(dtype))

    @settings(max_examples=10 if SIMULATED else 60, deadline=None)
    @given(st.lists(large_real_parts(dtype), min_size=1, max_size=16))
    def check(zs):
        z = np.array(zs, dtype)
        with np.errstate(all="ignore"):
            want, got = np.exp(z), complex_exp(z, target=target)
        if target in ("cpu", "parallel", "auto"):
            assert as_bits(got) == as_bits(want), (z, got, want)
        else:
            assert_matches(complex_exp, loop, target, got, want, None)

    check()


def test_cmath_exp_from_python_is_numpys():
    from gpufuncs.targets.numpy_complex import cmath_namespace, exp

    assert cmath_namespace().exp is exp and cmath_namespace().sqrt is cmath.sqrt
    assert exp(complex(710, 1)) == complex(1.2070325234545281e308, INF)
    assert exp(np.complex64(1 + 2j)).dtype == np.complex64
    with pytest.raises(OverflowError):  # what Python's own cmath does there
        cmath.exp(complex(710, 1))
