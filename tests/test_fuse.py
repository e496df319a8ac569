"""``gf.fuse``: a fused function computes what the same function run eagerly with NumPy computes.

Every comparison is against the function itself called on NumPy arrays (``fused.func``): the
same dtypes for every result (NumPy's promotion, NEP 50 for Python scalars), the same values
bit for bit where the operations are exactly rounded (arithmetic, comparisons, ``np.where``,
``np.maximum``), and within a few ULP where they are transcendental (``np.exp``).
"""

from __future__ import annotations

import inspect
import math
import os

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import gpufuncs as gf
from gpufuncs.testing import assert_like_eager, check_fused

SIMULATED = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
CUDA = pytest.param("cuda", marks=pytest.mark.cuda)
TARGETS = ["cpu", pytest.param("parallel", marks=pytest.mark.slow), CUDA]
#: The value tests' targets: a fused body is one scalar function, the same on ``cpu`` and
#: ``parallel`` (whose chunking the kernel suites test); the chain and ``out=`` tests run there.
VALUE_TARGETS = ["cpu", CUDA]


@gf.fuse
def chain(x, mu, s, w):
    return gf.clamp(gf.gaussian(x, mu, s) * w + np.exp(-x), 0, 1)


@gf.fuse
def integer_ops(a, b):
    return (a * b + 3) // b, a % b, -a, abs(a - b), a ** 3, np.maximum(a, b) ^ (b & 5)


# The floating functions in three fused functions, not one of 13 outputs: on ``cuda`` each
# layout drawn compiles the whole function, and one of 13 outputs took 350 s of the GPU suite.
@gf.fuse
def float_arithmetic(a, b):
    return a * 2.5 + b / a, a // b, a % b, a ** 2


@gf.fuse
def float_rounding(a, b):
    return np.floor(a * 3.5), np.ceil(b), np.trunc(a - b), np.sign(b)


@gf.fuse
def float_selection(a, b):
    return (np.where(a > b, a, -b), np.maximum(a, b), np.fmin(a, b) + 0.0, np.clip(a, -1, 1),
            (a >= b) | np.isnan(a))


# np.fmin(a, b) + 0.0: the sign of fmin(0.0, -0.0) is NumPy's choice of loop (a for a few
# elements, b for many and for 0-d arrays: docs/fusion.md); + 0.0 leaves every other value.


@gf.fuse
def complex_ops(z, c):
    return z * z + c, abs(z), z / c, z == c


def _eager(fused, args):
    with np.errstate(all="ignore"):
        result = fused.func(*args)
    return result if isinstance(result, tuple) else (result,)


def _values(dtype: np.dtype, shape: tuple[int, ...]):
    if dtype.kind == "f":
        elements = st.floats(width=8 * dtype.itemsize, allow_nan=True, allow_infinity=True)
    elif dtype.kind == "c":
        elements = st.complex_numbers(width=8 * dtype.itemsize, allow_nan=False, max_magnitude=1e10)
    else:
        elements = None
    return hnp.arrays(dtype, shape, elements=elements)


_SHAPES = hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=2, max_side=5)


def _shapes(target):
    """Broadcast shapes on the host; one shape on ``cuda``, where each new layout of these
    kernels of several outputs is a compile of some 10 s on the GPU machine (layouts are tested
    by the cuda suites of every kernel)."""
    return _SHAPES if target != "cuda" else st.just(hnp.BroadcastableShapes(((6,), (6,)), (6,)))


@pytest.mark.parametrize("target", VALUE_TARGETS)
@pytest.mark.parametrize(("fused", "dtype"), [
    *[(integer_ops, d) for d in ("int8", "uint8", "int32", "uint64", "int64")],  # wrapping, // and % by 0
    # NaN, infinities, signed zeros:
    *[(f, d) for f in (float_arithmetic, float_rounding, float_selection) for d in ("float32", "float64")],
], ids=lambda v: getattr(v, "__name__", v))
def test_integer_and_float_functions_as_numpy_bit_for_bit(target, fused, dtype):
    like = np.zeros(1, dtype)
    check_fused(fused, like, like, targets=[target], shapes=_shapes(target))


@gf.fuse
def multiply_add(a, b, c):
    return a * b + c, a % b


@pytest.mark.parametrize("target", VALUE_TARGETS)
def test_a_product_and_the_sum_it_feeds_round_apart_and_the_remainder_is_exact(target):
    """NumPy rounds ``a * b`` before adding ``c``: float32 ``3355445 * 2.5 + 2**-22`` is
    ``8388612`` (the product ties to even), one fused multiply-add (the GPU compiler's
    default) gives ``8388613``; a float64 case too. The remainder is C's ``fmod``:
    ``1 % 3e-59`` and ``0 % inf`` are ``2.86e-59`` and ``0``, not ``1.2e-17`` and NaN."""
    a = np.array([3355445.0, 1.0, 0.0, 5.7417335e16], dtype=np.float32)
    b = np.array([2.5, 3.0654747e-39, np.inf, 2.5], dtype=np.float32)
    c = np.array([2.0**-22, 0.0, 1.0, 0.4], dtype=np.float32)
    a64, b64, c64 = (np.append(v.astype(np.float64), w) for v, w in
                     ((a, 9.554173266933418e16), (b, 2.5), (c, 1.0466630362052957e-17)))
    assert_like_eager(multiply_add, (a, b, c), target)
    assert_like_eager(multiply_add, (a64, b64, c64), target)
    # the cases are the ones described: a fused multiply-add gives other values
    assert _eager(multiply_add, (a, b, c))[0][0] == 8388612.0
    assert _eager(multiply_add, (a64, b64, c64))[0][-1] == 2.3885433167333542e17  # fma: ...46e17


@pytest.mark.parametrize("target", TARGETS)
@given(x=_values(np.dtype(np.float32), (7,)), mu=st.floats(-3, 3), s=st.floats(0.1, 3),
       w=st.floats(0, 2))
def test_the_chain_of_kernels_and_ufuncs_is_numpys_within_ulps(target, x, mu, s, w):
    """Within 4 ULP of the result: w >= 0, since for w < 0 the sum of the two terms cancels,
    and 1 ULP of np.exp's value (the vector math's, within its own tolerance) is many of the
    difference's (the thorough profile met 8); each term's accuracy is its kernel's test."""
    assert_like_eager(chain, (x, mu, s, w), target, ulps=4)


@pytest.mark.skipif(SIMULATED, reason="the simulator runs NumPy's scalar complex arithmetic, which "
                    "rounds apart from NumPy's array loops that the GPU and cpu match: z * z of "
                    "complex64(5.629326e9+5.203617e9j) has real part 4.6116816e18 as a scalar, "
                    "4.6116824e18 in an array")
@pytest.mark.parametrize("target", VALUE_TARGETS)
@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_complex_arithmetic_as_numpy(target, dtype):
    like = np.zeros(1, dtype)
    check_fused(complex_ops, like, like, targets=[target], ulps=2,
                shapes=st.just(hnp.BroadcastableShapes(((4,), (4,)), (4,))))


@gf.fuse
def python_scalars(x, mu, n):
    return x * (-mu), np.where(x > mu, x, mu / 2) + n, (x - mu) * 2.0 ** -3


@pytest.mark.parametrize("dtype", ["float32", "int8", "float64"])
def test_python_arithmetic_on_python_scalars_stays_weak(dtype):
    """``-mu`` of a Python float is a Python float in the eager call (weak: float32 arrays stay
    float32); the trace made it NumPy's float64, and the results float64 (check_fused found it)."""
    x = np.array([1, -2, 3], dtype=dtype)
    got = python_scalars(x, 0.5, 2)
    want = python_scalars.func(x, 0.5, 2)
    assert [g.dtype for g in got] == [w.dtype for w in want]
    assert want[0].dtype == (np.float32 if dtype == "float32" else np.float64)
    check_fused(python_scalars, x, 0.5, 2, targets=["cpu"])


def test_python_int_arithmetic_on_python_ints_only_is_refused():
    """Python computes ``-b`` of an int without wrapping, and NumPy checks the value against
    the int8 loop it meets on each call: a fused loop cannot, so it is refused, not wrong."""
    @gf.fuse
    def negated(a, b):
        return np.where(a > b, a, -b)

    with pytest.raises(gf.FusionError, match="negative of Python ints only"):
        negated(np.ones(3, np.int8), 3)
    assert negated(np.ones(3, np.int8), np.int8(3)).tolist() == [-3, -3, -3]


@gf.fuse
def extremes(a, b):
    return np.maximum(a, b), np.minimum(a, b)


@pytest.mark.parametrize("target", VALUE_TARGETS)
def test_maximum_and_minimum_of_equal_values_are_the_second_as_numpys(target):
    """The sign of a zero: NumPy's loops give the second of two equal values
    (np.maximum(0.0, -0.0) is -0.0); the fused helper gave the first (check_fused found it)."""
    a, b = np.array([0.0, -0.0, np.nan, 1.0]), np.array([-0.0, 0.0, 1.0, np.nan])
    assert_like_eager(extremes, (a, b), target)
    assert np.signbit(extremes.func(a, b)[0][:2]).tolist() == [True, False]


# -- NumPy's dtypes: NEP 50 for Python scalars, promotion for the rest ----------------------------
@gf.fuse
def scaled(x, s):
    return x * s + x


_ARRAY_DTYPES = ["bool", "int8", "uint8", "int32", "uint64", "float32", "float64", "complex64"]
_SCALARS = [2, 2.5, 1.5j, True, np.float64(2.5), np.int8(3), np.float32(0.5)]


@pytest.mark.parametrize("dtype", _ARRAY_DTYPES)
def test_python_and_numpy_scalars_promote_as_in_numpy(dtype):
    """Every pair's result dtype, traced (NumPy's errors where NumPy raises); the values of the
    pairs of three array dtypes, computed."""
    x = np.array([0, 1, 3, 7], dtype=dtype)
    for scalar in _SCALARS:
        try:
            expected = _eager(scaled, (x, scalar))
        except (TypeError, OverflowError) as exc:
            with pytest.raises(type(exc)):
                scaled(x, scalar)
            continue
        assert scaled.result_dtypes(x, scalar) == (expected[0].dtype,), scalar
        if dtype in ("uint8", "float32", "complex64"):
            assert_like_eager(scaled, (x, scalar), "cpu")


def test_a_constant_in_the_body_is_weak_as_in_numpy():
    @gf.fuse
    def halve(x):
        return x * 0.1 + 1

    x = np.linspace(0, 1, 9, dtype=np.float32)
    assert_like_eager(halve, (x,), "cpu")  # float32 throughout: 0.1 rounded to float32 first
    assert halve(x).dtype == np.float32


def test_one_kernel_per_combination_of_dtypes():
    @gf.fuse
    def f(x, y):
        return x + y

    f(np.ones(3, np.float32), 1.0)
    f(np.ones(5, np.float32), 2.0)  # another shape and value: the same kernel
    f(np.ones(3, np.float32), np.ones(3))
    assert list(f.kernels) == [(np.dtype(np.float32), float),
                               (np.dtype(np.float32), np.dtype(np.float64))]
    # (each with its float16 twin, which the fused function never calls: it refuses float16)
    assert [k.types[-1] for k in f.kernels.values()] == ["fd->f", "fd->d"]


# -- calls: broadcasting, out=, scalars, devices ---------------------------------------------------
@pytest.mark.parametrize("target", TARGETS)
def test_out_is_written_and_nothing_beside_it(target):
    base = np.full(20, -7.0)
    out = base[2:18:2]  # float64, strided: the float32 result cast into it
    x = np.linspace(-2, 2, 8, dtype=np.float32)
    before = base.copy()
    returned = chain(x, 0.0, 1.0, 2.0, out=out, target=target)
    assert returned is out
    assert np.array_equal(out, out.astype(np.float32))  # the float32 result, cast
    np.testing.assert_array_max_ulp(out.astype(np.float32), chain.func(x, 0.0, 1.0, 2.0), maxulp=4)
    untouched = np.ones(20, bool)
    untouched[2:18:2] = False
    np.testing.assert_array_equal(base[untouched], before[untouched])


def test_broadcasting_and_several_results():
    @gf.fuse
    def both(a, b):
        return a + b, a * b

    a, b = np.arange(3.0)[:, None], np.arange(4.0)
    s, p = both(a, b)
    np.testing.assert_array_equal(s, a + b)
    np.testing.assert_array_equal(p, a * b)


@pytest.mark.cuda
def test_device_arrays_stay_on_the_device():
    from numba import cuda

    x = np.linspace(-2, 2, 16, dtype=np.float32)
    result = chain(cuda.to_device(x), 0.0, 1.0, 2.0)
    assert hasattr(result, "copy_to_host")  # a Numba device array, as the input
    np.testing.assert_allclose(result.copy_to_host(), chain.func(x, 0.0, 1.0, 2.0), rtol=2e-6)


# -- what fusion refuses, and NumPy's own errors ----------------------------------------------------
_GLOBAL_ARRAY = np.ones(3)


def _line_of(func, text):
    lines, first = inspect.getsourcelines(func)
    return first + next(i for i, line in enumerate(lines) if text in line)


def reduces_then_computes(x):
    return (x * 2).sum() + 1


def branches(x):
    if x > 0:
        return x
    return -x


def scalar_math(x):
    return math.exp(x)


def global_array(x):
    return x + _GLOBAL_ARRAY


def calls_a_gufunc(x):
    return gf.hermite_norm(x, 3)


def sorts(x):
    return np.sort(x)


@pytest.mark.parametrize("func, marker, words", [
    (reduces_then_computes, ".sum() + 1", "not fused further"),
    (branches, "if x > 0", "branch"),
    (scalar_math, "math.exp", "Python number"),
    (global_array, "_GLOBAL_ARRAY", "not an argument"),
    (calls_a_gufunc, "hermite_norm", "generalized kernel"),
    (sorts, "np.sort", "np.sort is not fused"),
])
def test_what_cannot_be_fused_is_refused_naming_the_function_and_line(func, marker, words):
    with pytest.raises(gf.FusionError, match=words) as info:
        gf.fuse(func)(np.ones(3))
    assert f"'{func.__qualname__}'" in str(info.value)
    assert f"line {_line_of(func, marker)}" in str(info.value)


def test_float16_is_refused():
    with pytest.raises(gf.FusionError, match="float16"):
        scaled(np.ones(3, np.float16), 2.0)


def test_numpys_own_errors_keep_their_type():
    @gf.fuse
    def subtract(a, b):
        return a - b

    with pytest.raises(TypeError, match="boolean subtract"):
        subtract(np.ones(2, bool), np.ones(2, bool))

    @gf.fuse
    def large(a):
        return a + 300

    with pytest.raises(OverflowError, match="300"):
        large(np.ones(2, np.uint8))


def test_a_python_int_argument_out_of_its_loops_range_is_refused_on_every_call():
    x = np.arange(4, dtype=np.uint8)
    np.testing.assert_array_equal(scaled(x, 3), x * 3 + x)
    with pytest.raises(OverflowError, match="300 out of bounds for uint8"):
        scaled(x, 300)
    with pytest.raises(OverflowError):
        x * 300  # NumPy's refusal, the same


def test_arguments_bind_as_the_functions():
    np.testing.assert_array_equal(scaled(x=np.ones(2), s=2.0), np.full(2, 3.0))
    with pytest.raises(TypeError):
        scaled(np.ones(2))
    with pytest.raises(gf.FusionError, match="keyword-only"):
        gf.fuse(lambda x, *, s: x * s)


def test_the_fused_body_is_one_function():
    source = chain.source(np.ones(3, np.float32), 0.0, 1.0, 2.0)
    assert source.count("def ") == 1 and "math.exp" in source


def test_dask_arrays_stay_lazy_and_agree():
    da = pytest.importorskip("dask.array")
    x = np.linspace(-3, 3, 1000, dtype=np.float32)
    lazy = chain(da.from_array(x, chunks=250), 0.5, 1.5, 2.0)
    assert isinstance(lazy, da.Array) and lazy.dtype == np.float32
    np.testing.assert_array_equal(lazy.compute(), chain(x, 0.5, 1.5, 2.0))


def test_byte_swapped_arrays_compute_in_the_native_loop_as_in_numpy():
    x, y = np.arange(5, dtype=">f8"), np.arange(5, dtype=np.float32)
    assert scaled.result_dtypes(x, y) == (np.dtype(np.float64),)
    np.testing.assert_array_equal(scaled(x, y), x * y + x)
    out = np.zeros(5, ">f8")
    scaled(x, y, out=out)
    np.testing.assert_array_equal(out, x * y + x)


@pytest.mark.parametrize("values", [np.array([np.inf, -np.inf, 1.0, np.nan]), np.array([1, -2]),
                                    np.array([complex(np.inf, 1), 1j, complex(1, np.nan)]),
                                    np.array([np.inf, 2.0], np.float32), np.array([True, False])])
def test_isfinite_of_infinities_warns_nothing_as_numpys(values):
    """Numba's math.isfinite computes x - x, which raises the invalid flag for an infinity:
    np.isfinite in a fused function gives NumPy's values and, like NumPy, no warning."""
    f = gf.fuse(lambda a: np.isfinite(a))
    with np.errstate(all="raise"):
        np.testing.assert_array_equal(f(values), f.func(values))


@gf.fuse
def _reductions(a, b):
    return (a - b).sum(axis=1), np.max(abs(a - b), axis=0, keepdims=True), (a > b).mean()


@pytest.mark.cuda
def test_reductions_on_cuda_agree_and_device_arrays_other_than_cupys_are_refused():
    """Host arrays reduced on ``cuda`` (each GPU thread adds one value at a time; the other
    reduction tests are in test_fuse_reduce.py); a Numba device array is refused, never copied
    to the host behind the caller's back."""
    from numba import cuda

    a, b = np.arange(12.0).reshape(3, 4), np.linspace(0, 5, 4)
    for result, want in zip(_reductions(a, b, target="cuda"), _reductions.func(a, b)):
        np.testing.assert_allclose(result, want, rtol=1e-15)
    with pytest.raises(TypeError, match=r"reductions of \w+ device arrays are not fused yet"):
        _reductions(cuda.to_device(a), b)
