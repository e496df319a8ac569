"""Exact semantics of the built-in kernels (issue 2, item 3) on the host targets.

References are computed here, independently of the kernels' declared ``reference``:
``scipy.stats.norm.pdf``, ``np.exp``, ``np.clip``, ``hermevander`` / ``eval_hermitenorm`` and
mpmath. Points where the kernels once disagreed (tiny sigma, overflowing x - x0, Hermite overflow
and NaN) are tested explicitly.
"""

from __future__ import annotations

import itertools
import math
import re
from typing import Any

import mpmath
import numba
import numpy as np
import pytest
from numpy.polynomial.hermite_e import hermevander
from scipy.special import eval_hermitenorm
from scipy.stats import norm

import gpufuncs as gf
from gpufuncs.testing import check_kernel, compare

HOST = ["cpu", "parallel"]
DTYPES = [np.float32, np.float64]
INF, NAN = math.inf, math.nan


def bits_equal(a, b) -> bool:
    """Same dtype, shape and bits (any NaN matches any NaN): NumPy's result, bit for bit."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    uint = f"u{a.itemsize}"
    return bool(np.all((a.view(uint) == b.view(uint)) | (np.isnan(a) & np.isnan(b))))


def ulp_distance(a, b) -> np.ndarray:
    """How many representable values of their (common) dtype lie between ``a`` and ``b``."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype
    ints = f"i{a.itemsize}"

    def ordered(v):
        i = v.view(ints).astype(np.int64)
        return np.where(i < 0, np.iinfo(ints).min - i, i)

    return np.abs(ordered(a) - ordered(b))


def assert_close(result, expected, rtol, atol=0.0):
    """NaN and +-inf in the same places; finite values within ``atol + rtol * |expected|``."""
    result, expected = np.asarray(result, np.float64), np.asarray(expected, np.float64)
    np.testing.assert_array_equal(np.isnan(result), np.isnan(expected), "NaN placement")
    np.testing.assert_array_equal(np.where(np.isinf(expected), expected, 0),
                                  np.where(np.isinf(result), result, 0), "inf placement")
    finite = np.isfinite(expected)
    np.testing.assert_allclose(result[finite], expected[finite], rtol=rtol, atol=atol)


# -- gaussian ---------------------------------------------------------------------------------------
GAUSS_X = [-INF, -40.0, -3.0, -1.0, -0.0, 0.0, 1e-30, 0.5, 2.0, 13.0, 37.0, INF, NAN]
GAUSS_X0 = [-1.5, 0.0, 2.0, INF, NAN]
GAUSS_SIGMA = [-INF, -1.0, -0.0, 0.0, 1e-3, 0.25, 1.0, 3.0, 1e30, INF, NAN]


def _gauss_grid(dtype):
    x = np.array(GAUSS_X, dtype)[:, None, None]
    x0 = np.array(GAUSS_X0, dtype)[:, None]
    sigma = np.array(GAUSS_SIGMA, dtype)
    return x, x0, sigma


@pytest.mark.parametrize("target", HOST)
@pytest.mark.parametrize("dtype", DTYPES)
def test_gaussian_equals_scipy_norm_pdf(dtype, target):
    x, x0, sigma = _gauss_grid(dtype)
    with np.errstate(all="ignore"):
        result = gf.gaussian(x, x0, sigma, target=target)
        expected = norm.pdf(x.astype(np.float64), loc=x0.astype(np.float64), scale=sigma.astype(np.float64))
    assert result.dtype == dtype and result.shape == (len(GAUSS_X), len(GAUSS_X0), len(GAUSS_SIGMA))
    tol = gf.gaussian.spec.tolerance(dtype)
    assert_close(result, expected.astype(dtype), rtol=tol.rtol, atol=tol.atol)


@pytest.mark.parametrize("target", HOST)
@pytest.mark.parametrize("dtype", DTYPES)
def test_gaussian_edge_cases(dtype, target):
    x, x0, sigma = _gauss_grid(dtype)
    with np.errstate(all="ignore"):
        r = np.broadcast_to(gf.gaussian(x, x0, sigma, target=target), (x.size, x0.size, sigma.size))
    bad_sigma = ~(sigma > 0)  # sigma <= 0 or NaN
    assert np.isnan(r[:, :, bad_sigma]).all()
    assert np.isnan(r[np.isnan(x.ravel())]).all() and np.isnan(r[:, np.isnan(x0.ravel())]).all()
    infinite_x = np.isinf(x.ravel())
    finite_x0, good_sigma = np.isfinite(x0.ravel()), (sigma > 0) & np.isfinite(sigma)
    assert (r[np.ix_(infinite_x, finite_x0, good_sigma)] == 0).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_gaussian_peak_value(dtype):
    sigma = np.array([0.5, 1.0, 4.0], dtype)
    peak = gf.gaussian(np.array([2.0, 2.0, 2.0], dtype), dtype(2.0), sigma)
    expected = (1 / (np.sqrt(2 * np.pi) * sigma.astype(np.float64))).astype(dtype)
    assert ulp_distance(peak, expected).max() <= 2


def _native_ir(pyfunc, signature: str) -> str:
    """Optimized LLVM IR of the scalar function, compiled fresh (the disk cache holds no IR)."""
    compiled = numba.vectorize([signature])(pyfunc)
    (cres,) = compiled._dispatcher.overloads.values()
    lines = cres.library.get_llvm_str().splitlines()
    name = cres.fndesc.mangled_name
    start = next(i for i, line in enumerate(lines) if line.startswith("define") and f"@{name}(" in line)
    end = lines.index("}", start)
    return "\n".join(lines[start: end + 1])


_F32_SIG = "float32(float32, float32, float32)"
_F64_SIG = "float64(float64, float64, float64)"


def _uses_float64(ir: str) -> bool:
    return re.search(r"\bdouble\b|\bfpext\b", ir) is not None


def _uses_float32(ir: str) -> bool:
    return re.search(r"\bfloat\b|\bfptrunc\b", ir) is not None


def test_gaussian_float32_arithmetic_stays_float32():
    ir = _native_ir(gf.gaussian.spec.pyfunc, _F32_SIG)
    assert "@llvm.exp.f32" in ir or "@expf" in ir
    assert not _uses_float64(ir), ir


def test_gaussian_float64_has_no_float32_constants():
    assert not _uses_float32(_native_ir(gf.gaussian.spec.pyfunc, _F64_SIG))


def test_float64_detector_catches_a_python_float_literal():
    def literal_gaussian(x, x0, sigma):  # the usual mistake: 2.0 is a float64 constant
        z = (x - x0) / sigma
        return math.exp(-(z * z) / 2.0) / sigma

    assert _uses_float64(_native_ir(literal_gaussian, _F32_SIG))


_TINY_SIGMA = (np.array([13.9e-30, 15e-30], np.float32), np.float32(0.0), np.float32(1e-30))
_OVERFLOWING_DIFFERENCE = (np.array([3e38], np.float32), np.float32(-3e38), np.float32(INF))


def test_gaussian_float32_tiny_sigma_keeps_precision():
    compare(gf.gaussian, _TINY_SIGMA, gf.gaussian(*_TINY_SIGMA), target="cpu")


def test_gaussian_float32_overflowing_difference_with_infinite_sigma():
    with np.errstate(all="ignore"):
        result = gf.gaussian(*_OVERFLOWING_DIFFERENCE)
    compare(gf.gaussian, _OVERFLOWING_DIFFERENCE, result, target="cpu")


@pytest.mark.parametrize("target", HOST)
@pytest.mark.parametrize("dtype", DTYPES)
def test_gaussian_subnormal_sigma(dtype, target):
    """1/sqrt(2 pi)/sigma overflows for a subnormal sigma: the density is still inf at and
    near x0, 0 far from it (not inf * 0 = nan), and finite where it is (float64, z = 20, 27)."""
    sigma = np.array([1, 3], dtype) * np.finfo(dtype).smallest_subnormal
    x = np.array([0, 1, 20, 27, 1e6], dtype)[:, None] * sigma  # z = x / sigma, exactly
    with np.errstate(all="ignore"):
        result = gf.gaussian(x, dtype(0), sigma, target=target)
    assert not np.isnan(result).any()
    compare(gf.gaussian, (x, dtype(0), sigma), result, target=target)


@pytest.mark.parametrize("target", HOST)
def test_gaussian_where_scipys_exp_underflows_before_a_tiny_sigma(target):
    """SciPy's exp(-z*z/2) underflows to 0 at z*z = 1556, where sigma = 4.5e-150 lifts the
    density to 1.2e-189 (found by Hypothesis on a fresh clone): the kernel gives it, and the
    reference computes it in extended precision there (SciPy's 0 was the less accurate one)."""
    args = (np.array([0.0, 1.0]), np.float64(1.7689114160705685e-148), np.float64(4.4844720020057566e-150))
    assert norm.pdf(*args)[0] == 0.0
    result = gf.gaussian(*args, target=target)
    assert 1.2125e-189 < result[0] < 1.2126e-189 and result[1] == 0.0
    compare(gf.gaussian, args, result, target=target)


def test_gaussian_float64_overflowing_difference_where_scipy_gives_nan():
    """The one known disagreement with the reference (excluded in test_properties.py): in
    float64, x - x0 overflows inside SciPy too, which then returns nan; the density is 0."""
    big = np.finfo(np.float64).max
    with np.errstate(all="ignore"):
        assert np.isnan(norm.pdf(-big, loc=big, scale=np.inf))
        assert norm.pdf(-big / 2, loc=big / 2, scale=np.inf) == 0.0  # no overflow: 0
    assert gf.gaussian(-big, big, np.inf) == 0.0
    assert gf.gaussian(np.float32(-3e38), np.float32(3e38), np.float32(np.inf)) == 0.0


# -- exp --------------------------------------------------------------------------------------------
def _exp_grid(dtype) -> np.ndarray:
    info = np.finfo(dtype)
    low, high = math.log(float(info.smallest_subnormal)) - 2, math.log(float(info.max)) + 2
    rng = np.random.default_rng(12345)
    return np.concatenate([np.linspace(low, high, 200_001), rng.uniform(low, high, 100_000),
                           rng.normal(0, 1, 20_000)]).astype(dtype)


@pytest.mark.parametrize("target", HOST)
@pytest.mark.parametrize("dtype", DTYPES)
def test_exp_within_one_ulp_of_numpy(dtype, target):
    x = _exp_grid(dtype)
    with np.errstate(all="ignore"):
        result = gf.exp(x, target=target)
        # float64: np.exp itself. float32: np.exp on float64 copies, rounded (NumPy's float32
        # exp is itself up to ~2.3 ULP from that, so comparing with it would measure NumPy).
        expected = np.exp(x.astype(np.float64)).astype(dtype)
    assert result.dtype == dtype
    assert ulp_distance(result, expected).max() <= 1


@pytest.mark.parametrize("target", HOST)
@pytest.mark.parametrize("dtype", DTYPES)
def test_exp_special_values(dtype, target):
    info = np.finfo(dtype)
    overflow = math.log(float(info.max)) * 1.001
    underflow = math.log(float(info.smallest_subnormal)) * 1.01
    x = np.array([overflow, 1e30, float(info.max), INF, underflow, -1e30, -float(info.max), -INF,
                  NAN, 0.0, -0.0], dtype)
    with np.errstate(all="ignore"):
        r = gf.exp(x, target=target)
    assert bits_equal(r, np.array([INF] * 4 + [0.0] * 4 + [NAN, 1.0, 1.0], dtype))


# -- clamp ------------------------------------------------------------------------------------------
CLAMP_X = [-INF, -2.5, -1.0, -0.5, -0.0, 0.0, 1e-40, 0.5, 1.0, 2.5, INF, NAN]
CLAMP_BOUNDS = [(-1.0, 1.0), (0.0, 1.0), (-0.0, 1.0), (-1.0, 0.0), (-1.0, -0.0), (-0.0, 0.0),
                (0.0, -0.0), (-INF, INF), (0.5, 0.5), (2.0, -2.0), (NAN, 1.0), (-1.0, NAN), (NAN, NAN)]


def assert_clamp_is_clip_bitwise(kernel, dtype, target):
    """``kernel(x, xmin, xmax)`` bit for bit ``np.clip`` for scalar bounds of every kind."""
    x = np.array(CLAMP_X, dtype)
    for low, high in CLAMP_BOUNDS:
        lo, hi = dtype(low), dtype(high)
        with np.errstate(all="ignore"):
            got, want = kernel(x, lo, hi, target=target), np.clip(x, lo, hi)
        assert bits_equal(got, want), f"clamp(x, {low}, {high}): {got} != np.clip {want}"


@pytest.mark.parametrize("target", HOST)
@pytest.mark.parametrize("dtype", DTYPES)
def test_clamp_is_np_clip_bit_for_bit(dtype, target):
    assert_clamp_is_clip_bitwise(gf.clamp, dtype, target)


@pytest.mark.parametrize("target", [*HOST, pytest.param("cuda", marks=pytest.mark.cuda)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_clamp_gives_the_first_nan_of_its_arguments_as_np_clip(dtype, target):
    """NaN in several arguments: the first one's, bit for bit (x's, then xmin's, then xmax's),
    as np.clip gives it with array bounds (NaNs of three payloads, every combination)."""
    unsigned = np.dtype(f"u{np.dtype(dtype).itemsize}")
    quiet = np.array(np.nan, dtype).view(unsigned)[()]

    def nan(payload: int) -> Any:
        return np.array(quiet + payload, unsigned).view(dtype)[()]

    x, lo, hi = (np.array(v, dtype) for v in zip(*itertools.product(
        [nan(1), dtype(0.5)], [nan(2), dtype(-1)], [nan(3), dtype(1)])))
    got, want = gf.clamp(x, lo, hi, target=target), np.clip(x, lo, hi)
    assert got.view(unsigned).tolist() == want.view(unsigned).tolist()
    assert want.view(unsigned).tolist()[:7] == [quiet + p for p in (1, 1, 1, 1, 2, 2, 3)]


@pytest.mark.parametrize("target", HOST)
@pytest.mark.parametrize("dtype", DTYPES)
def test_clamp_array_bounds(dtype, target):
    """Array bounds: np.clip's values; zeros at ties as with scalar bounds.

    NumPy 2.4's own ``clip`` returns the bound at a tie when the bounds are arrays
    (``clip([0.], [-0.], [1.]) -> -0.``) but keeps ``x`` when they are scalars
    (``clip([0.], -0., 1.) -> 0.``); the kernel keeps ``x`` in both layouts.
    """
    x = np.repeat(np.array(CLAMP_X, dtype), len(CLAMP_BOUNDS))
    lo, hi = (np.tile(np.array(b, dtype), len(CLAMP_X)) for b in zip(*CLAMP_BOUNDS))
    with np.errstate(all="ignore"):
        got, want = gf.clamp(x, lo, hi, target=target), np.clip(x, lo, hi)
        by_scalar = np.array([np.clip(x[i:i + 1], lo[i], hi[i])[0] for i in range(x.size)], dtype)
    np.testing.assert_array_equal(got, want)  # values (NaN matches NaN, 0.0 == -0.0)
    assert bits_equal(got, by_scalar)


@pytest.mark.parametrize("target", HOST)
def test_clamp_nan_anywhere_and_inverted_bounds(target):
    x = np.array([-3.0, 0.0, 0.25, 3.0])
    assert np.isnan(gf.clamp(x, NAN, 1.0, target=target)).all()
    assert np.isnan(gf.clamp(x, -1.0, NAN, target=target)).all()
    assert np.isnan(gf.clamp(np.array([NAN]), -1.0, 1.0, target=target)).all()
    assert (gf.clamp(x, 2.0, -2.0, target=target) == -2.0).all()  # xmin > xmax gives xmax


def _blog_clamp(x, xmin, xmax):
    # The CUDA clamp often copied from blogs: the second branch tests xmin instead of xmax.
    if x < xmin:
        return xmin
    elif x > xmin:
        return xmax
    return x


@pytest.fixture
def blog_clamp(restore_registry):
    return gf.ufunc(signatures=gf.float_signatures(3), reference=np.clip,
                    name="kernels_blog_clamp", replace=True)(_blog_clamp)


def test_blog_clamp_bug_is_caught_by_the_same_check(blog_clamp):
    assert blog_clamp(np.array([0.5]), -1.0, 1.0)[0] == 1.0  # the bug: in-range x gives xmax
    with pytest.raises(AssertionError, match=r"clamp\(x, -1.0, 1.0\)"):
        assert_clamp_is_clip_bitwise(blog_clamp, np.float64, "cpu")
    with pytest.raises(AssertionError, match="kernels_blog_clamp"):
        check_kernel(blog_clamp, targets=["cpu"], dtypes=[np.float64], max_examples=50)


# -- hermite_norm -----------------------------------------------------------------------------------
def _sqrt_factorials(n: int) -> np.ndarray:
    """sqrt(k!) for k < n (n <= 171) from exact integers: within 1 ULP, unlike exp(gammaln/2)."""
    return np.sqrt(np.array([float(math.factorial(k)) for k in range(n)]))


def _normalized_hermevander(x, n):
    x = np.asarray(x, np.float64)
    return hermevander(x, n - 1).reshape(*x.shape, n) / _sqrt_factorials(n)


def assert_normwise(result, expected, rtol):
    """The declared norm-wise rule: error <= rtol * max |expected| along the last axis."""
    result, expected = np.asarray(result, np.float64), np.asarray(expected, np.float64)
    scale = np.max(np.abs(expected), axis=-1, keepdims=True)
    excess = np.abs(result - expected) - rtol * scale
    assert excess.max(initial=-1.0) <= 0, f"worst at {np.unravel_index(excess.argmax(), excess.shape)}"


@pytest.mark.parametrize("target", HOST)
@pytest.mark.parametrize("dtype", DTYPES)
def test_hermite_matches_hermevander(dtype, target):
    x = np.linspace(-30, 30, 241).astype(dtype)
    n = 40 if dtype == np.float32 else 150  # float32: hermevander overflows float32 beyond
    r = gf.hermite_norm(x, n, target=target)
    assert r.dtype == dtype and r.shape == (241, n)
    assert_normwise(r, _normalized_hermevander(x, n), gf.hermite_norm.spec.tolerance(dtype).rtol)


def test_declared_hermite_reference_is_within_tolerance_of_mpmath():
    x = np.linspace(-6, 6, 25)
    n = 160
    true = [[float(mpmath.hermite(k, mpmath.mpf(v) / mpmath.sqrt(2))
                   / mpmath.sqrt(2**k * mpmath.factorial(k))) for k in range(n)] for v in x]
    declared = gf.hermite_norm.spec.reference(x, n)
    assert_normwise(declared, true, gf.hermite_norm.spec.tolerance(np.float64).rtol)


@pytest.mark.parametrize("dtype", DTYPES)
def test_hermite_matches_eval_hermitenorm_where_finite(dtype):
    x = np.linspace(-6, 6, 97).astype(dtype)
    n = 160
    expected = eval_hermitenorm(np.arange(n), x.astype(np.float64)[:, None]) / _sqrt_factorials(n)
    assert np.isfinite(expected).all()
    assert_normwise(gf.hermite_norm(x, n), expected, gf.hermite_norm.spec.tolerance(dtype).rtol)


@pytest.mark.parametrize("target", HOST)
@pytest.mark.parametrize("dtype", DTYPES)
def test_hermite_layout_first_columns_and_shapes(dtype, target):
    x = np.linspace(-2, 2, 12, dtype=dtype).reshape(3, 4)
    r = gf.hermite_norm(x, 5, target=target)
    assert r.shape == (3, 4, 5) and r.dtype == dtype
    assert (r[..., 0] == 1).all() and bits_equal(r[..., 1], x)
    assert gf.hermite_norm(x, 1, target=target).shape == (3, 4, 1)
    empty = gf.hermite_norm(x, 0, target=target)
    assert empty.shape == (3, 4, 0) and empty.dtype == dtype
    assert gf.hermite_norm(dtype(0.5), 3, target=target).shape == (3,)


@pytest.mark.parametrize("n", [-1, 2.5, 2.0, "3", True, None, np.float64(3)])
def test_hermite_bad_n_is_value_error(n):
    with pytest.raises(ValueError, match="n must be a non-negative integer"):
        gf.hermite_norm(np.zeros(3), n)


def test_an_array_in_place_of_n_is_named_briefly():
    """An output passed where the size goes: the message names its shape and dtype and the
    arguments' order, not the array's values."""
    with pytest.raises(ValueError) as raised:
        gf.hermite_norm(np.zeros(10), np.empty((10, 32)))
    message = str(raised.value)
    assert message == ("hermite_norm: n must be a non-negative integer, got an array (ndarray) of "
                       "shape (10, 32) and dtype float64 (the arguments are hermite_norm(x, n, out))")


def test_hermite_numpy_integer_n():
    assert gf.hermite_norm(np.zeros(2), np.int64(3)).shape == (2, 3)


mpmath.mp.dps = 60
LARGE_N = 500
MP_X = [-30.0, -12.5, -1.5, 0.0, 0.75, 7.0, 30.0]


def _mp_row(x: float, n: int) -> list:
    """He_k(x)/sqrt(k!) for k < n in 60-digit arithmetic (the recurrence, rounding-free)."""
    x = mpmath.mpf(x)
    row = [mpmath.mpf(1), x]
    for k in range(2, n):
        row.append((x * row[-1] - mpmath.sqrt(k - 1) * row[-2]) / mpmath.sqrt(k))
    return row[:n]


_MP_ROWS = {x: _mp_row(x, LARGE_N) for x in MP_X}


@pytest.mark.parametrize("x", MP_X)
def test_mpmath_rows_match_mpmath_hermite(x):
    """The 60-digit rows against mpmath's own (hypergeometric) Hermite polynomials."""
    row = _MP_ROWS[x]
    for k in (0, 1, 2, 17, 250, LARGE_N - 1):
        direct = mpmath.hermite(k, x / mpmath.sqrt(2)) / mpmath.sqrt(2**k * mpmath.factorial(k))
        assert abs(direct - row[k]) <= mpmath.mpf(10) ** -40 * max(abs(v) for v in row)


def _true_rows(xs) -> np.ndarray:
    return np.array([[float(v) for v in _MP_ROWS[x]] for x in xs])


@pytest.mark.parametrize("dtype", DTYPES)
def test_hermite_large_n_against_mpmath(dtype):
    xs = MP_X if dtype == np.float64 else [x for x in MP_X if abs(x) < 30]
    r = gf.hermite_norm(np.array(xs, dtype), LARGE_N)
    true = _true_rows(xs)
    assert np.isfinite(true).all() and np.isfinite(r).all()
    assert_normwise(r, true, gf.hermite_norm.spec.tolerance(dtype).rtol)


def test_hermite_float32_finite_where_true_value_is():
    true = _true_rows([-30.0, 30.0])
    fits = np.abs(true) < np.finfo(np.float32).max
    with np.errstate(all="ignore"):
        r = gf.hermite_norm(np.array([-30.0, 30.0], np.float32), LARGE_N)
    assert np.isfinite(r[fits]).all()


def test_hermite_float32_overflow_gives_inf():
    true = _true_rows([-30.0, 30.0])
    with np.errstate(all="ignore"):
        r = gf.hermite_norm(np.array([-30.0, 30.0], np.float32), LARGE_N)
    overflow = np.abs(true) > np.finfo(np.float32).max
    assert overflow.sum() > 800
    np.testing.assert_array_equal(r[overflow], np.copysign(np.inf, true[overflow]))


@pytest.mark.parametrize("dtype", DTYPES)
def test_hermite_nan_input_gives_nan(dtype):
    r = gf.hermite_norm(np.array([NAN], dtype), 3)
    assert np.isnan(eval_hermitenorm(0, NAN)) and np.isnan(_normalized_hermevander([NAN], 3)).all()
    assert np.isnan(r).all()
