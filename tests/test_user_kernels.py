"""The user-defined kernel path: declare, call, and property-test with ``gpufuncs.testing``."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from hypothesis import given

import gpufuncs as gf
from gpufuncs.testing import check_kernel, compare, inputs

HOST = ["cpu", "parallel"]


# The example of issue 2, verbatim.
@gf.ufunc(signatures=["float32(float32, float32)", "float64(float64, float64)"],
          reference=np.hypot, replace=True)
def my_hypot(a, b):
    return math.sqrt(a * a + b * b)


# The same kernel written to be np.hypot everywhere: scaled, so a*a cannot overflow or underflow.
@gf.ufunc(signatures=gf.float_signatures(2), reference=np.hypot, replace=True)
def user_hypot(a, b):
    """Hypotenuse without intermediate overflow or underflow; hypot(+-inf, nan) is inf."""
    a, b = abs(a), abs(b)
    if a == gf.as_type(math.inf, a) or b == gf.as_type(math.inf, b):
        return gf.as_type(math.inf, a)
    big, small = (a, b) if a >= b else (b, a)
    if big != big or small != small:
        return a + b  # NaN
    if big == gf.as_type(0, big):
        return big
    ratio = small / big
    return big * math.sqrt(gf.as_type(1, big) + ratio * ratio)


# A generalized user kernel with a core input dimension: the running sum of a vector.
@gf.gufunc(signatures=["void(float32[:], float32[:])", "void(float64[:], float64[:])"],
           layout="(n)->(n)", reference=lambda a: np.cumsum(a, axis=-1),
           tolerances={np.float32: gf.Tolerance(rtol=8 * float(np.finfo(np.float32).eps)),
                       np.float64: gf.Tolerance(rtol=8 * float(np.finfo(np.float64).eps))},
           domains={"a": (-1e6, 1e6)}, replace=True)
def user_cumsum(a, out):
    for i in range(a.shape[0]):
        out[i] = a[i] if i == 0 else out[i - 1] + a[i]


def test_issue_example_calls_like_a_builtin():
    r = my_hypot(3.0, np.arange(4.0))
    np.testing.assert_array_equal(r, np.hypot(3.0, np.arange(4.0)))
    assert r.dtype == np.float64
    assert my_hypot is gf.registry["my_hypot"]
    assert gf.get("my_hypot", target="cpu").ufunc.types == ["ff->f", "dd->d"]
    assert my_hypot(np.float32(3), np.float32(4)) == np.float32(5)


def test_issue_example_fails_outside_its_formula_with_the_worst_point():
    """check_kernel finds what the textbook formula gets wrong: a*a overflows (or underflows)
    where np.hypot does not, so the example as written is not np.hypot at the extremes."""
    with pytest.raises(AssertionError) as info:
        check_kernel(my_hypot, targets=["cpu"], dtypes=[np.float64], max_examples=200)
    report = str(info.value)
    assert re.search(r"my_hypot \(dtype float64, target 'cpu'\): \d+ of \d+ points disagree", report)
    assert re.search(r"at \(.*\): a=\S+, b=\S+ -> result \S+, reference \S+", report)


@pytest.mark.parametrize("target", HOST)
def test_scaled_user_kernel_passes_check_kernel(target):
    check_kernel(user_hypot, targets=[target])


def test_user_kernel_targets_agree():
    check_kernel(user_hypot, targets=["cpu", "parallel"], max_examples=30)


def test_user_gufunc_with_core_input_passes_check_kernel():
    check_kernel(user_cumsum)


@given(inputs(user_hypot, np.float32))
def test_inputs_and_compare_in_a_users_own_given(args):
    with np.errstate(all="ignore"):  # NaN/inf inputs raise NumPy's usual floating-point warnings
        result = user_hypot(*args, target="cpu")
    assert np.asarray(result).dtype == np.float32
    found = compare(user_hypot, args, result, dtype=np.float32, target="cpu")
    assert found.points == np.size(result)


def _blog_clamp(x, xmin, xmax):
    # The CUDA clamp often copied from blogs: the second branch tests xmin instead of xmax.
    if x < xmin:
        return xmin
    elif x > xmin:
        return xmax
    return x


@pytest.fixture
def buggy_clamp(restore_registry):
    return gf.ufunc(signatures=gf.float_signatures(3), reference=np.clip,
                    tolerances={np.float32: 0.0, np.float64: 0.0},
                    name="user_buggy_clamp", replace=True)(_blog_clamp)


@pytest.mark.parametrize("target", HOST)
def test_disagreeing_user_kernel_fails_naming_the_worst_point(buggy_clamp, target):
    with pytest.raises(AssertionError) as info:
        check_kernel(buggy_clamp, targets=[target], max_examples=100)
    report = str(info.value)
    assert f"user_buggy_clamp (dtype float32, target '{target}')" in report
    point = re.search(r"at \(.*\): x=(\S+), xmin=(\S+), xmax=(\S+) -> result (\S+), reference (\S+)", report)
    assert point, report
    # Inputs and result are printed in the kernel's dtype (float32), the reference in float64:
    # each is read back in its own dtype, exactly (a float32 printed 1e-45 is not 1e-45).
    values = [v.rstrip(":,") for v in point.groups()]
    x, xmin, xmax, result = (float(np.float32(v)) for v in values[:4])
    reference = float(values[4])
    # The named point is a real disagreement, and the reference value is np.clip's.
    assert _same(reference, float(np.clip(x, xmin, xmax))) and not _same(result, reference)


def test_reported_points_read_back_exactly_in_their_dtype(buggy_clamp):
    """A float32 subnormal is printed as NumPy prints it in float32 (``1e-45``), which is
    exactly that value read back as float32, not as float64."""
    tiny = np.float32(1e-45)
    args = (np.array([tiny]), np.float32(0.0), np.float32(1.0))
    with pytest.raises(AssertionError) as info:
        compare(buggy_clamp, args, buggy_clamp(*args, target="cpu"), target="cpu")
    point = re.search(r"x=(\S+), xmin=\S+, xmax=\S+ -> result (\S+), reference (\S+):", str(info.value))
    assert point, str(info.value)
    assert point.group(1) == "1e-45" and np.float32(point.group(1)) == tiny
    assert float(point.group(3)) == float(tiny)  # the float64 reference, exact as well


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def test_compare_reports_nan_placement(buggy_clamp):
    args = (np.array([0.5, 0.5]), np.array([-1.0, np.nan]), 1.0)
    with pytest.raises(AssertionError, match=r"2 of 2 points disagree.*\(1 NaN/inf placement") as info:
        with np.errstate(invalid="ignore"):
            compare(buggy_clamp, args, buggy_clamp(*args), target="cpu")
    lines = str(info.value).splitlines()
    assert lines[1] == "  at (1,): x=0.5, xmin=nan, xmax=1.0 -> result 0.5, reference nan [NaN/inf placement]"
    assert lines[2].startswith("  at (0,): x=0.5, xmin=-1.0, xmax=1.0 -> result 1.0, reference 0.5: "
                               "error 0.5")


def test_compare_rejects_a_wrong_shape():
    args = (np.ones(3), np.ones(3))
    with pytest.raises(AssertionError, match=r"result has shape \(1, 3\), expected \(3,\)"):
        compare(user_hypot, args, np.hypot(*args)[None])


def test_compare_returns_the_largest_errors():
    args = (np.array([3.0, 1e300]), np.array([4.0, 1e300]))
    found = compare(user_hypot, args, user_hypot(*args), target="cpu")
    assert found.points == 2 and found.max_ulp <= 1 and found.kernel == "user_hypot"


def test_registry_repr_lists_the_kernels():
    assert repr(gf.registry) == f"<gpufuncs registry of {len(gf.names())} kernels: {', '.join(gf.names())}>"


# a * b + c where fusing changes the result: the exact value -2**-60 rounds away in the product.
_A, _B = 1 + 2.0**-30, 1 - 2.0**-30


@gf.ufunc(signatures=["float64(float64, float64, float64)"], reference=lambda a, b, c: a * b + c,
          replace=True)
def user_muladd(a, b, c):
    return gf.muladd(a, b, c)


def _host_has_fma() -> bool:
    from llvmlite import binding

    return bool(binding.get_host_cpu_features().get("fma", False))


@pytest.mark.parametrize("target", HOST)
def test_muladd_is_fused_on_cpus_with_fma(target):
    fused = user_muladd(np.array([_A]), _B, -1.0, target=target)[0]
    assert fused == (-(2.0**-60) if _host_has_fma() else 0.0)


def test_muladd_from_python_is_the_expression():
    assert gf.muladd(_A, _B, -1.0) == _A * _B - 1.0 == 0.0
    assert type(gf.muladd(np.float32(2), np.float32(3), np.float32(1))) is np.float32


def test_as_type_muladd_and_vector_math_compile_no_function_of_their_own(monkeypatch):
    """On the CPU they are intrinsics: a first call compiles the caller's library and the vector
    math's alone (as overloads each was a library of its own, per dtype and per compile options,
    kept for good: most of issue 32's memory of one user kernel, cold cache); values and types
    as from Python."""
    import numba
    from numba.core import codegen

    from gpufuncs.targets.cpu import vecmath

    made = []
    create = codegen.CPUCodegen.create_library

    def recorded(self, name, **kwargs):
        made.append(name)
        return create(self, name, **kwargs)

    monkeypatch.setattr(codegen.CPUCodegen, "create_library", recorded)

    def body(x, n, flag):
        return (gf.muladd(x, gf.as_type(2, x), gf.as_type(0.5, x)) + vecmath.exp(x) + vecmath.pow(x, x),
                vecmath.log(n), gf.as_type(2.7, n), gf.as_type(0.0, flag), gf.as_type(math.nan, flag))

    compiled = numba.njit(body)
    for x in (np.float32(0.75), 0.75):
        got, want = compiled(x, np.int64(3), True), body(x, np.int64(3), True)
        assert got[0] == pytest.approx(want[0], rel=1e-6) and got[1] == pytest.approx(want[1])
        assert got[2:] == want[2:] == (2, False, True)
    results = {str(s.return_type) for s in compiled.nopython_signatures}
    assert results == {f"Tuple({t}, float64, int64, bool, bool)" for t in ("float32", "float64")}
    mine = [name for name in made if name != "nrt"]  # (Numba's runtime, compiled once per process)
    assert mine and all(name.startswith(("test_as_type_muladd", "gpufuncs_vecmath_")) for name in mine), made


def test_signatures_are_taken_as_numbas_decorators_take_them():
    """Numba's ``@vectorize(["float64(float64, float64)"])`` and ``@guvectorize(sigs, layout)``
    pass the signatures positionally, and one string for one signature: so do these."""
    @gf.ufunc(["int64(int64, int64)", "float64(float64, float64)"], replace=True)
    def positional_muladd(a, b):
        return a * b + a

    @gf.ufunc("float64(float64)", replace=True)
    def one_string(x):
        return x * x

    @gf.ufunc(signatures="float32(float32)", replace=True)
    def one_string_by_name(x):
        return x + 1

    @gf.gufunc(["void(float64[:], float64[:])"], "(n)->()", replace=True)
    def positional_total(x, out):
        out[0] = x.sum()

    ints = np.array([3, -4, 2**62], np.int64)
    np.testing.assert_array_equal(positional_muladd(ints, 2), ints * 2 + ints)  # wrapping as NumPy's
    assert positional_muladd.types == ["ll->l", "dd->d"]
    assert one_string.types == ["d->d"] and one_string(3.0) == 9.0
    # (a float32 loop brings float16's, as storage: see the types page)
    assert one_string_by_name.types == ["e->e", "f->f"] and one_string_by_name(np.float32(1.5)) == 2.5
    x = np.arange(12.0).reshape(3, 4)
    np.testing.assert_array_equal(positional_total(x), x.sum(axis=1))


def test_signatures_given_twice_or_not_as_strings_are_refused_clearly():
    with pytest.raises(TypeError, match=r"takes the signatures once: positionally .* or as signatures="):
        gf.ufunc(["float64(float64)"], signatures=["float64(float64)"])
    with pytest.raises(gf.KernelDefinitionError, match=r"kernel 'f': signatures must be strings"):
        @gf.ufunc(signatures=[1.5], replace=True)
        def f(x):
            return x
