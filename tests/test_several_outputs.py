"""Elementwise kernels of several outputs: ``return q, r`` with signatures that say so.

Each is checked against the NumPy ufunc it mirrors (``np.divmod``, ``np.frexp``, ``np.modf``)
with ``check_kernel`` (Hypothesis) and on the forms of call NumPy takes for several outputs:
a tuple of results, ``out=`` a tuple with ``None`` entries allocated, positional outputs,
``where=``, strided and broadcast inputs. On every target: ``cuda`` tests are marked, and the
CUDA simulator runs this file on ``cuda`` in CI (see test_cuda_sim.py).
"""

from __future__ import annotations

import math
import os
import warnings

import numpy as np
import pytest

import gpufuncs as gf
from gpufuncs.testing import check_kernel

SIMULATED = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
CUDA = pytest.param("cuda", marks=pytest.mark.cuda)
TARGETS = [CUDA] if SIMULATED else ["cpu", "parallel", "auto", CUDA]


@gf.ufunc(signatures=["UniTuple(int64, 2)(int64, int64)", "UniTuple(float64, 2)(float64, float64)"],
          reference=np.divmod, replace=True)
def outs_divmod(a, b):
    return divmod(a, b)


@gf.ufunc(signatures=["Tuple((float64, int32))(float64)"], reference=np.frexp, replace=True)
def outs_frexp(x):
    return math.frexp(x)


@gf.ufunc(signatures=["UniTuple(float32, 2)(float32)", "UniTuple(float64, 2)(float64)"],
          reference=np.modf, replace=True)
def outs_modf(x):
    if not abs(x) < 4503599627370496.0:  # 2**52: integral already, infinite or NaN
        return (x if math.isnan(x) else math.copysign(0.0, x)), x
    whole = math.copysign(float(int(abs(x))), x)
    return math.copysign(x - whole, x), whole


@gf.ufunc(signatures=["Tuple((float64, int64))(float64, int64)"],
          reference=lambda x, n: (x * n, n + 1), replace=True)
def outs_mixed(x, n):
    return x * n, n + 1


def host(a):
    """A result as a NumPy array (a cuda call on host arrays already returns them)."""
    if hasattr(a, "copy_to_host"):
        return a.copy_to_host()
    if type(a).__module__.startswith("cupy"):
        return a.get()
    if type(a).__module__.startswith("torch"):
        return a.cpu().numpy()
    return np.asarray(a)


def same(got, want):
    """Equal values, NaN where NumPy has NaN, the same signs of zero, the same dtypes."""
    got = [host(g) for g in got]
    assert [g.dtype for g in got] == [w.dtype for w in want]
    for g, w in zip(got, want):
        assert np.array_equal(g, w, equal_nan=True), (g, w)
        assert np.array_equal(np.signbit(g), np.signbit(w)), (g, w)


@pytest.mark.parametrize("target", [t for t in TARGETS if t not in ("parallel", "auto")])
@pytest.mark.parametrize("kernel", [outs_divmod, outs_frexp, outs_modf], ids=lambda k: k.__name__)
def test_kernel_agrees_with_numpy(kernel, target):
    # divmod: float64 here; its int64 loop is checked below, on the extremes
    dtypes = ("float64",) if kernel is outs_divmod else None
    check_kernel(kernel, targets=[target], dtypes=dtypes,
                 max_examples=6 if SIMULATED else 30)


@pytest.mark.parametrize("target", TARGETS)
def test_float_divmod_is_numpys_at_infinities_and_huge_quotients(target):
    """The remainder is exact (C's ``fmod``) on every target. On ``cuda`` numba-cuda's ``frem``
    compiled to ``a - trunc(a / b) * b``: NaN for ``divmod(-1.0, inf)`` and ``0.0 % inf``, an
    infinity for ``-1.8e308 % -2.2e-308``, ``1.2e-17`` for ``1.0 % 3.1e-59`` (NumPy ``2.0e-59``)."""
    a = np.array([-1.0, 7.5, -1.7976931348623157e308, 1.0, 0.0, 5.0, -0.0, 1e300])
    b = np.array([np.inf, 2.0, -2.2250738585072014e-308, 3.06547472e-59, np.inf, -np.inf, 3.0, 1e-300])
    with np.errstate(all="ignore"):  # overflow in the quotient, on both sides
        same(outs_divmod(a, b, target=target), np.divmod(a, b))


@pytest.mark.parametrize("target", TARGETS)
def test_integer_divmod_as_numpy_with_zero_divisors_and_extremes(target):
    lo, hi = np.iinfo(np.int64).min, np.iinfo(np.int64).max
    a = np.array([7, -7, 7, -7, 5, 0, -5, hi, lo, hi, lo, lo])
    b = np.array([2, 2, -2, -2, 0, 0, 3, -1, 1, lo, hi, 2])
    with np.errstate(all="ignore"):
        same(outs_divmod(a, b, target=target), np.divmod(a, b))
        # NumPy's quotient wraps to lo; Numba's compiled divmod gave (0, 0) (see
        # targets.base.numpys_integer_division), in a vector loop and alone
        q, r = (host(v) for v in outs_divmod(np.array([lo] * 20), np.array([-1] * 20), target=target))
        assert outs_divmod(lo, -1, target="cpu" if target == "auto" else target) == (lo, 0)
    assert q.tolist() == [lo] * 20 and r.tolist() == [0] * 20


@pytest.mark.parametrize("target", TARGETS)
def test_a_python_float_cast_unsafely_into_the_integer_loop(target):
    """NumPy's C cast of the float (1e30 and NaN into int64: -2**63, with its invalid warning),
    as for a kernel of one output; an input that needs a cast took another path, where the
    float went through np.asarray(1e30, dtype=np.int64): OverflowError (found by the thorough
    conformance profile)."""
    flags = np.array([True, False, True])
    for value in (1e30, math.nan, -1.5, 2.5):
        with np.errstate(all="ignore"):
            want = np.divmod(flags, value, dtype=np.int64, casting="unsafe")
            same(outs_divmod(flags, value, dtype=np.int64, casting="unsafe", target=target), want)


@pytest.mark.parametrize("target", TARGETS)
def test_out_tuples_none_entries_and_positional_outputs(target):
    x = np.array([-2.5, -0.0, 0.75, 3.0, np.inf, -np.inf, np.nan])
    want = np.modf(x)
    q = np.full(x.shape, 7.0)
    result = outs_modf(x, out=(None, q), target=target)
    assert result[1] is q
    same(result, want)
    q[:] = 7.0
    r = np.full(x.shape, 7.0)
    both = outs_modf(x, r, q, target=target)
    assert both[0] is r and both[1] is q
    same(both, want)
    only_first = outs_modf(x, r, target=target)  # the second is allocated, as NumPy does
    assert only_first[0] is r
    same(only_first, want)
    with pytest.raises(TypeError, match="out= must be a tuple of 2"):
        outs_modf(x, out=r, target=target)
    with pytest.raises(ValueError, match="out must have 2"):
        outs_modf(x, out=(r,), target=target)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_large_flat_arrays_every_element_of_every_output(dtype, target):
    """Enough elements for the GPU's elementwise template to stage several per thread (an
    H200: 135,168 float32 elements and more), with a partial last block; every element of
    both outputs is NumPy's."""
    x = np.random.default_rng(7).uniform(-1e6, 1e6, 400_003 if not SIMULATED else 1001).astype(dtype)
    x[::97] = np.inf
    x[5::101] = np.nan
    with np.errstate(invalid="ignore"):  # (the host's vector compare of NaN in outs_modf's test)
        same(outs_modf(x, target=target), np.modf(x))


@pytest.mark.parametrize("target", TARGETS)
def test_array_inputs_of_two_loop_types(target):
    """A float64 and an int64 array: on a GPU the template that loads and casts each argument
    (one element a thread, no staging), storing both results."""
    x = np.linspace(-2.0, 2.0, 1001)
    n = np.arange(1001) - 500
    same(outs_mixed(x, n, target=target), (x * n, n + 1))
    same(outs_mixed(x[::-3], n[::3], target=target), (x[::-3] * n[::3], n[::3] + 1))


def _on_device(kind, a):
    """``a`` on the GPU as an array of library ``kind``."""
    if kind == "numba":
        from numba import cuda

        return cuda.to_device(a)
    library = pytest.importorskip(kind, reason=f"{kind} is not installed")
    return library.asarray(a) if kind == "cupy" else library.as_tensor(a, device="cuda")


@pytest.mark.cuda
@pytest.mark.parametrize("kind", ["numba"] if SIMULATED else ["numba", "cupy", "torch"])
def test_device_arrays_give_new_arrays_of_their_kind_for_every_output(kind):
    """The commonest device call (no ``out=``): each output new memory, of the inputs' library,
    with NumPy's values; one input and two (one stream for every operand or several), float and
    integer, and a second call into memory of its own."""
    x = np.linspace(-7.5, 7.5, 1001)
    q = (np.arange(1001) % 13 - 6).astype(np.int64)
    cases = [(outs_modf, (x,)), (outs_divmod, (x, x[::-1] + 0.25)),
             (outs_divmod, (np.arange(1001, dtype=np.int64) - 500, np.where(q == 0, 3, q)))]
    for kernel, args in cases:
        on_device = [_on_device(kind, a) for a in args]
        first = kernel(*on_device, target="cuda")
        second = kernel(*[_on_device(kind, a[::-1].copy()) for a in args], target="cuda")
        assert type(first) is tuple and all(type(r) is type(on_device[0]) for r in first)
        same(first, kernel.spec.reference(*args))
        same(second, kernel.spec.reference(*[a[::-1] for a in args]))


@pytest.mark.parametrize("target", TARGETS)
def test_strided_broadcast_and_scalar_inputs(target):
    a = np.arange(-20, 20, dtype=np.float64).reshape(8, 5)[::2, ::-2]
    b = np.array([3.0, -2.5, 0.5])[:, None][[0, 1, 2, 0]]
    same(outs_divmod(a, b, target=target), np.divmod(a, b))
    same(outs_divmod(a, 4.0, target=target), np.divmod(a, 4.0))
    same(outs_divmod(7, 2, target=target), np.divmod(np.int64(7), np.int64(2)))


@pytest.mark.parametrize("target", TARGETS)
def test_where_writes_only_where_true_into_every_output(target):
    x = np.linspace(-3.3, 3.3, 12)
    mask = x > 0
    q, r = np.full(12, -9.0), np.full(12, -9.0)
    outs_modf(x, out=(q, r), where=mask, target=target)
    frac, whole = np.modf(x)
    assert np.array_equal(q, np.where(mask, frac, -9.0))
    assert np.array_equal(r, np.where(mask, whole, -9.0))


@pytest.mark.parametrize("target", TARGETS)
def test_outputs_of_different_dtypes(target):
    x = np.array([0.0, -0.0, 1.0, 0.375, -12.5, 1e-310, 1e308, np.inf, np.nan])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mantissa, exponent = outs_frexp(x, target=target)
    want = np.frexp(x)
    assert host(exponent).dtype == np.int32
    same((mantissa, host(exponent)[np.isfinite(x)]), (want[0], want[1][np.isfinite(x)]))


def test_kernel_reports_its_outputs_and_refuses_reductions_as_numpy():
    assert outs_divmod.nout == 2 and outs_divmod.nargs == 4
    assert outs_divmod.types == ["ll->ll", "dd->dd"] and outs_frexp.types == ["d->di"]
    assert outs_divmod.signature is None  # an elementwise kernel, as np.divmod
    with pytest.raises(ValueError, match="single value"):
        outs_divmod.reduce(np.arange(4))
    with pytest.raises(ValueError, match="single value"):
        outs_divmod.accumulate(np.arange(4))
    q, r = outs_divmod.outer(np.array([7, 8]), np.array([2, 3, 5]))
    wq, wr = np.divmod.outer(np.array([7, 8]), np.array([2, 3, 5]))
    assert np.array_equal(q, wq) and np.array_equal(r, wr)


def test_a_kernel_calls_a_kernel_of_several_outputs(restore_registry):
    @gf.ufunc(signatures=["float64(float64, float64)"], name="outs_sum_of_divmod")
    def sum_of_divmod(a, b):
        q, r = outs_divmod(a, b)
        return q + r

    a, b = np.array([7.5, -7.5, 9.0]), np.array([2.0, 2.0, -4.0])
    q, r = np.divmod(a, b)
    assert np.array_equal(sum_of_divmod(a, b, target="cpu"), q + r)


def test_tuple_signature_spelled_wrong_gets_a_hint():
    with pytest.raises(gf.KernelDefinitionError, match=r"Tuple\(\(float64, int64\)\)"):
        gf.ufunc(signatures=["Tuple(float64, int64)(float64)"], name="outs_bad")(lambda x: (x, 1))


@pytest.mark.parametrize("dtype", ["int64", "float64"])
def test_check_kernel_checks_every_output(dtype, restore_registry):
    """A wrong second output fails the check, on the exact (integer) and the ULP (float) path."""
    @gf.ufunc(signatures=["UniTuple(int64, 2)(int64, int64)", "UniTuple(float64, 2)(float64, float64)"],
              reference=lambda a, b: (a + b, a * b), name="outs_wrong_second")
    def wrong_second(a, b):
        return a + b, a * b * (2 if a > 100 else 1)

    with pytest.raises(AssertionError, match="output 1"):
        check_kernel(wrong_second, targets=["cpu"], dtypes=[dtype], max_examples=50)


def test_dask_and_xarray_arrays_get_a_tuple_of_their_own_arrays():
    da = pytest.importorskip("dask.array")
    x = da.arange(-10, 10, chunks=6)
    q, r = outs_divmod(x, 3)
    assert isinstance(q, da.Array) and isinstance(r, da.Array)
    want = np.divmod(np.arange(-10, 10), 3)
    assert np.array_equal(q.compute(), want[0]) and np.array_equal(r.compute(), want[1])
    xr = pytest.importorskip("xarray")
    values = xr.DataArray(np.linspace(-2.5, 2.5, 6), dims="t")
    fraction, whole = outs_modf(values)
    assert isinstance(fraction, xr.DataArray) and fraction.dims == ("t",)
    assert np.array_equal(fraction.values, np.modf(values.values)[0])
    assert np.array_equal(whole.values, np.modf(values.values)[1])
