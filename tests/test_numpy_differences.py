"""Smaller call rules where gpufuncs once differed from NumPy (issue 29, item 5).

Each test calls NumPy as the reference: a positional ``None`` output, ``out=`` tuples with some
entries ``None``, operands that opt out of ufuncs (``__array_ufunc__ = None``, NEP 13), the
memory order of a gufunc's outputs under ``order=``, and kernels without inputs.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numba
import numpy as np
import pytest

import gpufuncs as gf

HOST_TARGETS = ["cpu", "parallel", "auto"]


@gf.ufunc(signatures=gf.float_signatures(2), reference=np.hypot, identity=0.0, replace=True,
          name="differences_hypot")
def hypot(a, b):
    return (a * a + b * b) ** 0.5


def _sum_max(x, s, m):
    total, top = 0.0, x[0]
    for v in x:
        total += v
        top = max(top, v)
    s[0] = total
    m[0] = top


#: Two outputs per row: the row's sum and its largest element.
sum_max = gf.gufunc(signatures=["void(float64[:], float64[:], float64[:])"], layout="(n)->(),()",
                    reference=None, replace=True, name="differences_sum_max")(_sum_max)


def _reverse(x, out):
    n = x.shape[0]
    for i in range(n):
        out[i] = x[n - 1 - i]


reverse = gf.gufunc(signatures=["void(float64[:], float64[:])"], layout="(n)->(n)", reference=None,
                    replace=True, name="differences_reverse")(_reverse)


# -- a positional None output ---------------------------------------------------------------------
@pytest.mark.parametrize("target", HOST_TARGETS)
def test_positional_none_allocates_as_numpy(target):
    x = np.linspace(-2.0, 2.0, 7)
    expected = np.exp(x, None)  # NumPy: a positional None is "allocate"
    for _ in range(2):  # the second call runs the kept resolved call
        assert np.array_equal(gf.exp(x, None, target=target), expected)
    # hermite_norm's trailing n is a size, the None after it its output
    assert np.array_equal(gf.hermite_norm(x, 3, None, target=target), gf.hermite_norm(x, 3, target=target))
    assert np.array_equal(gf.gaussian(x, 0.5, 2.0, None, target=target),
                          gf.gaussian(x, 0.5, 2.0, target=target))


def test_positional_none_with_out_keyword_is_refused_as_by_numpy():
    x = np.ones(3)
    with pytest.raises(TypeError) as numpy_error:
        np.exp(x, None, out=None)
    with pytest.raises(TypeError) as ours:
        gf.exp(x, None, out=None)
    assert str(ours.value) == f"exp: {numpy_error.value}"


def test_positional_none_with_where_warns_as_numpy():
    x, mask = np.ones(3), np.array([True, False, True])
    with pytest.warns(UserWarning, match="'where' used without 'out'"):
        np.exp(x, None, where=mask)
    with pytest.warns(UserWarning, match="'where' used without 'out'"):
        gf.exp(x, None, where=mask)


# -- out= with some outputs left to allocate --------------------------------------------------------
def _patterns(o1, o2):
    """(positional outputs, keywords) of every way to give some of two outputs."""
    return [((), {"out": (o1, None)}), ((), {"out": (None, o2)}), ((o1,), {}), ((None, o2), {}),
            ((o1, None), {}), ((), {"out": (None, None)}), ((None,), {})]


@pytest.mark.parametrize("target", HOST_TARGETS)
@pytest.mark.parametrize("pattern", range(7))
def test_some_outputs_none_are_allocated_as_numpy_does(target, pattern):
    x = np.arange(12.0).reshape(3, 4) - 5.0
    a, b = x[:, 0] + 0.5, np.full(3, 2.0)
    expected = (x.sum(axis=1), x.max(axis=1))
    for _ in range(2):
        o1, o2 = np.full(3, np.nan), np.full(3, np.nan)
        n1, n2 = np.full(3, np.nan), np.full(3, np.nan)
        positional, keywords = _patterns(n1, n2)[pattern]
        theirs = np.divmod(a, b, *positional, **keywords)
        positional, keywords = _patterns(o1, o2)[pattern]
        ours = sum_max(x, *positional, **keywords, target=target)
        assert type(ours) is type(theirs) is tuple
        # the same outputs are the given arrays, the others new
        assert [r is o for r, o in zip(ours, (o1, o2))] == [r is o for r, o in zip(theirs, (n1, n2))]
        assert all(type(r) is np.ndarray for r in ours)
        for r, e in zip(ours, expected):
            assert np.array_equal(r, e)


def test_some_outputs_none_with_zero_d_results_and_casts_follow_numpy():
    o = np.empty(())
    theirs = np.divmod(7.0, 2.0, out=(np.empty(()), None))
    ours = sum_max(np.arange(3.0), out=(o, None))
    assert [type(r) for r in ours] == [type(r) for r in theirs]  # new 0-d results are scalars
    assert ours[0] is o and ours == (3.0, 2.0)
    low = np.full(3, np.nan, np.float32)  # float64 results cast into a float32 out=
    x = np.arange(12.0).reshape(3, 4) / 3
    ours = sum_max(x, out=(None, low))
    theirs = np.divmod(x[:, 0], 1.0, out=(None, np.empty(3, np.float32)))
    assert ours[1] is low and ours[0].dtype == theirs[0].dtype
    assert np.array_equal(low, x.max(axis=1).astype(np.float32))


def test_out_not_a_tuple_for_several_outputs_is_a_type_error_as_in_numpy():
    x, o = np.ones((2, 3)), np.empty(2)
    with pytest.raises(TypeError):
        np.divmod(x[:, 0], 2.0, out=o)
    with pytest.raises(TypeError, match="differences_sum_max: out= must be a tuple of 2 entries"):
        sum_max(x, out=o)
    with pytest.raises(ValueError):  # a tuple of the wrong length stays a ValueError, as in NumPy
        np.divmod(x[:, 0], 2.0, out=(o,))
    with pytest.raises(ValueError, match="differences_sum_max: out must have 2 array"):
        sum_max(x, out=(o,))


# -- __array_ufunc__ = None (NEP 13) ---------------------------------------------------------------
class NoUfuncs:
    """Converts to an array, but opts out of ufuncs: NumPy raises TypeError for it."""

    __array_ufunc__ = None

    def __array__(self, dtype=None, copy=None):
        return np.arange(3.0)


class NoUfuncsArray(np.ndarray):
    __array_ufunc__ = None


def _numpy_message(call) -> str:
    with pytest.raises(TypeError) as caught:
        call()
    return str(caught.value)


@pytest.mark.parametrize("target", HOST_TARGETS)
@pytest.mark.parametrize("make", [NoUfuncs, lambda: np.arange(3.0).view(NoUfuncsArray)],
                         ids=["object", "ndarray-subclass"])
def test_operands_without_ufuncs_are_refused_as_by_numpy(target, make):
    x = np.arange(3.0)
    cases = [
        (lambda: np.exp(make()), lambda: gf.exp(make(), target=target), "exp"),
        (lambda: np.add(x, make()), lambda: gf.gaussian(x, make(), 1.0, target=target), "gaussian"),
        (lambda: np.exp(x, out=make()), lambda: gf.exp(x, out=make(), target=target), "exp"),
        (lambda: np.exp(x, make()), lambda: gf.exp(x, make(), target=target), "exp"),
    ]
    for numpy_call, our_call, name in cases:
        message = _numpy_message(numpy_call)
        assert "does not support ufuncs (__array_ufunc__=None)" in message
        for _ in range(2):  # a keyed subclass is refused again, not run from a kept call
            with pytest.raises(TypeError) as ours:
                our_call()
            assert str(ours.value) == f"{name}: {message}"


def test_ufunc_methods_refuse_operands_without_ufuncs_as_numpy():
    x = np.arange(3.0)
    cases = {
        "outer": (lambda: np.add.outer(NoUfuncs(), x), lambda: hypot.outer(NoUfuncs(), x)),
        "reduce": (lambda: np.add.reduce(NoUfuncs()), lambda: hypot.reduce(NoUfuncs())),
        "accumulate": (lambda: np.add.accumulate(NoUfuncs()), lambda: hypot.accumulate(NoUfuncs())),
        "at": (lambda: np.add.at(x.copy(), [0], NoUfuncs()), lambda: hypot.at(x.copy(), [0], NoUfuncs())),
    }
    for method, (numpy_call, our_call) in cases.items():
        message = _numpy_message(numpy_call)
        with pytest.raises(TypeError) as ours:
            our_call()
        assert str(ours.value) == f"differences_hypot.{method}: {message}"
    out = np.zeros(()).view(NoUfuncsArray)  # an out= that opts out
    message = _numpy_message(lambda: np.add.reduce(x, out=out))
    with pytest.raises(TypeError) as ours:
        hypot.reduce(x, out=out)
    assert str(ours.value) == f"differences_hypot.reduce: {message}"


# -- order= for a gufunc's outputs ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def numpy_reverse():
    """The same kernel as a NumPy gufunc (Numba's guvectorize): NumPy allocates its outputs."""
    return numba.guvectorize(["void(float64[:], float64[:])"], "(n)->(n)")(_reverse)


@pytest.mark.parametrize("target", HOST_TARGETS)
@pytest.mark.parametrize("order", ["C", "F", "K", "A"])
def test_gufunc_outputs_take_numpy_s_order(target, order, numpy_reverse):
    x = np.arange(24.0).reshape(2, 3, 4)
    theirs = numpy_reverse(x, order=order)
    for _ in range(2):
        ours = reverse(x, order=order, target=target)
        assert ours.strides == theirs.strides
        assert np.array_equal(ours, theirs)
    # an output-only core dimension: NumPy's matmul allocates a result of the same shape
    ours = gf.hermite_norm(x[..., 0], 5, order=order, target=target)
    theirs = np.matmul(np.ones((2, 3, 1)), np.ones((1, 5)), order=order)
    assert ours.shape == theirs.shape and ours.strides == theirs.strides
    assert np.array_equal(ours, gf.hermite_norm(x[..., 0], 5, target="cpu"))


@pytest.mark.parametrize("target", HOST_TARGETS)
def test_gufunc_with_several_outputs_in_fortran_order(target):
    x = np.arange(60.0).reshape(3, 4, 5)
    sums, tops = sum_max(x, order="F", target=target)
    theirs = np.divmod(x[..., 0], 7.0, order="F")  # elementwise outputs of the same shape
    assert sums.strides == tops.strides == theirs[0].strides
    assert np.array_equal(sums, x.sum(axis=-1)) and np.array_equal(tops, x.max(axis=-1))


# -- kernels without inputs ---------------------------------------------------------------------------
def test_a_kernel_without_inputs_is_refused_at_definition(restore_registry):
    """NumPy's only ufuncs without inputs are object ufuncs from np.frompyfunc: with no input
    dtype to select a typed loop from (and Numba's @vectorize of such a function crashing the
    process), gpufuncs refuses them when they are defined (see docs/semantics.md)."""
    assert np.frompyfunc(lambda: 1.5, 0, 1)() == 1.5  # what NumPy does, for the record
    with pytest.raises(gf.KernelDefinitionError, match="kernel 'constant' takes no inputs"):
        @gf.ufunc(signatures=["float64()"], reference=None)
        def constant():
            return 1.5
    with pytest.raises(gf.KernelDefinitionError, match="kernel 'ones' takes no inputs"):
        @gf.gufunc(signatures=["void(float64[:])"], layout="->(n)", reference=None)
        def ones(out):
            out[:] = 1.0
    assert "constant" not in gf.names() and "ones" not in gf.names()


# -- the same on the cuda target's host path (the simulator) ---------------------------------------------
_CUDA_SIM = """
import numpy as np, gpufuncs as gf
from numba import cuda
import test_numpy_differences as t
x = np.arange(12.0).reshape(3, 4)
assert np.array_equal(gf.exp(x, None, target="cuda"), np.exp(x, None))
o1 = np.full(3, np.nan)
r = t.sum_max(x, out=(o1, None), target="cuda")
assert r[0] is o1 and np.array_equal(o1, x.sum(axis=1)) and np.array_equal(r[1], x.max(axis=1))
h = gf.hermite_norm(x, 4, order="F", target="cuda")
assert h.strides == np.matmul(np.ones((3, 4, 1)), np.ones((1, 4)), order="F").strides
try:
    t.sum_max(cuda.to_device(x), out=(cuda.device_array(3), None))
except TypeError as exc:
    assert "not supported with device arrays" in str(exc), exc
else:
    raise AssertionError("a device call with some outputs None was accepted")
print("ok")
"""


def test_on_the_cuda_simulator_host_path():
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1",
           "PYTHONPATH": os.pathsep.join([os.path.dirname(__file__), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", _CUDA_SIM], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]


def _sum_copy(x, s, y):
    s[0] = 0.0
    for i in range(x.shape[0]):
        s[0] += x[i]
        y[i] = x[i]


sum_copy = gf.gufunc(signatures=["void(float64[:], float64[:], float64[:])"], layout="(n)->(),(n)",
                     reference=None, replace=True, name="differences_sum_copy")(_sum_copy)


@pytest.mark.parametrize("target", HOST_TARGETS)
def test_each_zero_d_output_is_a_scalar_as_in_numpy(target):
    numpy_sum_copy = numba.guvectorize(["void(float64[:], float64[:], float64[:])"], "(n)->(),(n)")(_sum_copy)
    x = np.arange(4.0)
    theirs, ours = numpy_sum_copy(x), sum_copy(x, target=target)
    assert [type(r) for r in ours] == [type(r) for r in theirs]  # a scalar beside an array
    assert all(np.array_equal(a, b) for a, b in zip(ours, theirs))
