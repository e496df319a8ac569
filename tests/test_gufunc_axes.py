"""A gufunc's ``axes=``, ``axis=`` and ``keepdims=``, against NumPy's own gufuncs.

The kernels here compute what NumPy's test gufuncs compute (``inner1d``, ``cumsum``,
``matrix_multiply``), so every call, its result's shape and strides, its ``out=``, and every
error are compared with NumPy's answer to the same call. The cuda target runs the same calls in
``tests/test_cuda_axes.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy._core import _umath_tests as umt
from numpy.exceptions import AxisError

import gpufuncs as gf

HOST_TARGETS = ["cpu", pytest.param("parallel", marks=pytest.mark.slow)]


@gf.gufunc(signatures=["void(float64[:], float64[:], float64[:])"], layout="(n),(n)->()",
           reference=None, name="axes_dot", replace=True)
def dot(a, b, out):
    total = 0.0
    for i in range(a.shape[0]):
        total += a[i] * b[i]
    out[0] = total


@gf.gufunc(signatures=["void(float64[:], float64[:])"], layout="(n)->(n)", reference=None,
           name="axes_cumsum", replace=True)
def cumsum(a, out):
    total = 0.0
    for i in range(a.shape[0]):
        total += a[i]
        out[i] = total


@gf.gufunc(signatures=["void(float64[:, :], float64[:, :], float64[:, :])"], layout="(m,n),(n,p)->(m,p)",
           reference=None, name="axes_matmul", replace=True)
def matmul(a, b, out):
    for i in range(a.shape[0]):
        for j in range(b.shape[1]):
            total = 0.0
            for k in range(a.shape[1]):
                total += a[i, k] * b[k, j]
            out[i, j] = total


@gf.gufunc(signatures=["void(float64[:], float64[:], float64[:])"], layout="(n)->(),()", reference=None,
           name="axes_sum_max", replace=True)
def sum_max(a, total, most):
    total[0] = 0.0
    most[0] = a[0]
    for i in range(a.shape[0]):
        total[0] += a[i]
        most[0] = max(most[0], a[i])


def _values(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-2.0, 2.0, shape)


A, B = _values(2, 3, 4), _values(2, 3, 4, seed=1)
M1, M2 = _values(3, 2, 4, seed=2), _values(5, 4, 2, seed=3)  # (m, loop, n), (p, n, loop)

#: (gpufuncs kernel, NumPy's gufunc, inputs, keywords)
CASES = {
    "dot axes": (dot, umt.inner1d, (A, B), {"axes": [0, 0]}),
    "dot axes tuples and output": (dot, umt.inner1d, (A, B), {"axes": [(1,), (-2,), ()]}),
    "dot axes differ": (dot, umt.inner1d, (A, B.transpose(2, 0, 1)), {"axes": [-1, 0]}),
    "dot axis": (dot, umt.inner1d, (A, B), {"axis": 1}),
    "dot keepdims": (dot, umt.inner1d, (A, B), {"keepdims": True}),
    "dot keepdims false": (dot, umt.inner1d, (A, B), {"keepdims": False}),
    "dot keepdims axis": (dot, umt.inner1d, (A, B), {"axis": 0, "keepdims": True}),
    "dot keepdims axes": (dot, umt.inner1d, (A, B), {"axes": [1, 1, 2], "keepdims": True}),
    "dot keepdims axes outputs left out": (dot, umt.inner1d, (A, B), {"axes": [0, 0], "keepdims": True}),
    "dot broadcast": (dot, umt.inner1d, (A, B[0]), {"axes": [1, 0]}),
    "dot 1-d keepdims": (dot, umt.inner1d, (A[0, 0], B[0, 0]), {"keepdims": True}),
    "cumsum axes": (cumsum, umt.cumsum, (A,), {"axes": [0, 2]}),
    "cumsum axes negative": (cumsum, umt.cumsum, (A,), {"axes": [-2, (-3,)]}),
    "cumsum axis": (cumsum, umt.cumsum, (A,), {"axis": 0}),
    "cumsum axis last": (cumsum, umt.cumsum, (A,), {"axis": -1}),
    "cumsum fortran": (cumsum, umt.cumsum, (np.asfortranarray(A),), {"axis": 1}),
    "cumsum order F": (cumsum, umt.cumsum, (A,), {"axes": [0, 2], "order": "F"}),
    "matmul order F": (matmul, umt.matrix_multiply, (M1, M2),
                       {"axes": [(0, 2), (1, 0), (0, 2)], "order": "F"}),
    "matmul axes": (matmul, umt.matrix_multiply, (M1, M2), {"axes": [(0, 2), (1, 0), (1, 0)]}),
    "matmul axes output first": (matmul, umt.matrix_multiply, (M1, M2), {"axes": [(0, 2), (1, 0), (0, 2)]}),
}


@pytest.mark.parametrize("target", HOST_TARGETS)
@pytest.mark.parametrize("case", CASES)
def test_as_numpy_gufuncs(case, target):
    kernel, reference, inputs, keywords = CASES[case]
    expected = reference(*inputs, **keywords)
    for _ in range(2):  # the second call runs the resolved call kept for its signature
        result = kernel(*inputs, target=target, **keywords)
        assert type(result) is type(expected)
        assert result.shape == expected.shape
        if not case.endswith("fortran"):  # (order='K' follows Fortran order only when all are)
            assert result.strides == expected.strides  # NumPy's new outputs are transposed views too
        np.testing.assert_allclose(result, expected, rtol=1e-14, atol=1e-14)


@pytest.mark.parametrize("positional", [False, True])
@pytest.mark.parametrize("case", CASES)
def test_out_as_numpy_gufuncs(case, positional):
    kernel, reference, inputs, keywords = CASES[case]
    expected = np.full_like(reference(*inputs, **keywords), np.nan)
    reference(*inputs, out=expected, **keywords)
    # out= laid out otherwise than the call would allocate it: a transposed view of a new array
    out = np.full(expected.shape[::-1], np.nan).T
    result = kernel(*inputs, out, **keywords) if positional else kernel(*inputs, out=out, **keywords)
    assert result is out
    np.testing.assert_allclose(out, expected, rtol=1e-14, atol=1e-14)


_AXIS = st.integers(-4, 3)
_ENTRY = st.one_of(_AXIS, st.tuples(_AXIS), st.tuples(), st.tuples(_AXIS, _AXIS))
_GENERATED = {"dot": (dot, umt.inner1d, 2, 3), "cumsum": (cumsum, umt.cumsum, 1, 2)}


@given(name=st.sampled_from(sorted(_GENERATED)), shape=st.lists(st.integers(1, 3), min_size=1, max_size=3),
       data=st.data())
def test_generated_calls_as_numpy(name, shape, data):
    """Random shapes and keywords, valid or not: NumPy's result, or an error of NumPy's type."""
    kernel, reference, nin, nop = _GENERATED[name]
    inputs = [_values(*shape, seed=k) for k in range(nin)]
    if nin > 1:  # the second input broadcast from fewer dimensions, or the same
        inputs[1] = inputs[1][(0,) * data.draw(st.integers(0, len(shape) - 1))]
    keywords = {}
    which = data.draw(st.sampled_from(["axes", "axis", None]))
    if which == "axes":
        keywords["axes"] = data.draw(st.lists(_ENTRY, min_size=nin, max_size=nop))
    elif which == "axis":
        keywords["axis"] = data.draw(_AXIS)
    if data.draw(st.booleans()):
        keywords["keepdims"] = data.draw(st.booleans())
    try:
        expected = reference(*inputs, **keywords)
    except (TypeError, ValueError) as exc:  # (AxisError is both)
        with pytest.raises(type(exc)) as raised:
            kernel(*inputs, **keywords)
        assert type(raised.value) is type(exc), (raised.value, exc)
        return
    result = kernel(*inputs, **keywords)
    assert (result.shape, result.strides) == (expected.shape, expected.strides)
    np.testing.assert_allclose(result, expected, rtol=1e-14, atol=1e-14)


def test_two_outputs_with_keepdims_and_one_out():
    total = np.full((2, 1, 4), np.nan)
    got_total, got_most = sum_max(A, out=(total, None), axis=1, keepdims=True)
    assert got_total is total
    np.testing.assert_allclose(total, A.sum(axis=1, keepdims=True), rtol=1e-14)
    np.testing.assert_array_equal(got_most, A.max(axis=1, keepdims=True))
    got_total, got_most = sum_max(A, axes=[0, (), ()])
    np.testing.assert_allclose(got_total, A.sum(axis=0), rtol=1e-14)
    np.testing.assert_array_equal(got_most, A.max(axis=0))


def test_output_only_core_dimensions_go_where_axes_says():
    x = _values(2, 3)
    plain = gf.hermite_norm(x, 5)
    np.testing.assert_array_equal(gf.hermite_norm(x, 5, axes=[(), (0,)]), np.moveaxis(plain, -1, 0))
    np.testing.assert_array_equal(gf.hermite_norm(x, 5, axes=[(), 1]), np.moveaxis(plain, -1, 1))
    np.testing.assert_array_equal(gf.hermite_norm(x, 5, axis=0), np.moveaxis(plain, -1, 0))
    np.testing.assert_array_equal(gf.hermite_norm(1.5, 3, axis=0), gf.hermite_norm(1.5, 3))
    out = np.zeros((5, 2, 3))
    assert gf.hermite_norm(x, 5, out=out, axes=[(), (0,)]) is out
    np.testing.assert_array_equal(out, np.moveaxis(plain, -1, 0))
    with pytest.raises(TypeError, match="hermite_norm does not support keepdims"):
        gf.hermite_norm(x, 5, keepdims=False)


def test_where_broadcasts_over_the_loop_dimensions_left():
    where = np.array([True, False, True, False])
    out = np.full((3, 4), -7.0)
    dot(A, B, axes=[0, 0], out=out, where=where)
    expected = umt.inner1d(A, B, axes=[0, 0])
    np.testing.assert_allclose(out[:, where], expected[:, where], rtol=1e-14)
    np.testing.assert_array_equal(out[:, ~where], -7.0)
    wide = np.ones((5, 1, 1), bool)  # where= adds a loop dimension, as in any gpufuncs call
    assert dot(A, B, axes=[0, 0], where=wide, out=np.empty((5, 3, 4))).shape == (5, 3, 4)


def test_elementwise_kernels_refuse_them_as_numpy_ufuncs_do():
    x = np.ones((2, 3))
    for keywords in ({"axes": [0, 0]}, {"axis": 0}, {"axis": None}, {"keepdims": False}):
        name = next(iter(keywords))
        with pytest.raises(TypeError, match=rf"unexpected keyword argument '{name}'"):
            np.exp(x, **keywords)
        with pytest.raises(TypeError, match=rf"^exp\(\) got unsupported keyword argument\(s\): {name}$"):
            gf.exp(x, **keywords)


#: (kernel, NumPy's gufunc, inputs, keywords, error, gpufuncs' message)
ERRORS = {
    "axis and axes": (dot, umt.inner1d, (A, B), {"axes": [0, 0], "axis": 0}, TypeError,
                      "axes_dot: cannot specify both 'axis' and 'axes'"),
    "axes not a list": (dot, umt.inner1d, (A, B), {"axes": (0, 0)}, TypeError,
                        "axes_dot: axes should be a list."),
    "axes None": (dot, umt.inner1d, (A, B), {"axes": None}, TypeError, "axes should be a list"),
    "axis None": (dot, umt.inner1d, (A, B), {"axis": None}, TypeError,
                  "'NoneType' object cannot be interpreted as an integer"),
    "too few entries": (dot, umt.inner1d, (A, B), {"axes": [0]}, ValueError,
                        "axes should be a list with an entry for all 3 inputs and outputs; entries "
                        "for outputs can only be omitted if none of them has core axes."),
    "too many entries": (dot, umt.inner1d, (A, B), {"axes": [0, 0, (), ()]}, ValueError,
                         "entry for all 3 inputs"),
    "output entries left out with core": (cumsum, umt.cumsum, (A,), {"axes": [0]}, ValueError,
                                          "entries for outputs can only be omitted"),
    "tuple too long": (dot, umt.inner1d, (A, B), {"axes": [(0, 1), 0]}, AxisError,
                       "axes_dot: operand 0 has 1 core dimensions, but 2 dimensions are specified "
                       "by axes tuple."),
    "integer for no core": (dot, umt.inner1d, (A, B), {"axes": [0, 0, 0]}, AxisError,
                            "axes_dot: operand 2 has 0 core dimensions, but the axes item is a "
                            "single integer."),
    "integer for two cores": (matmul, umt.matrix_multiply, (M1, M2), {"axes": [1, (0, 1), (0, 1)]},
                              AxisError, "operand 0 has 2 core dimensions, but the axes item is a "
                                         "single integer"),
    "not a tuple": (matmul, umt.matrix_multiply, (M1, M2), {"axes": [None, (0, 1), (0, 1)]},
                    TypeError, "axes_matmul: axes item 0 should be a tuple."),
    "list item": (dot, umt.inner1d, (A, B), {"axes": [[0], 0]}, TypeError,
                  "'list' object cannot be interpreted as an integer"),
    "float item": (dot, umt.inner1d, (A, B), {"axes": [0.0, 0]}, TypeError,
                   "'float' object cannot be interpreted as an integer"),
    "bool item": (dot, umt.inner1d, (A, B), {"axes": [True, 0]}, TypeError, "an integer is required"),
    "out of bounds": (dot, umt.inner1d, (A, B), {"axes": [3, 0]}, AxisError,
                      "axes_dot: axis 3 is out of bounds for array of dimension 3"),
    "out of bounds negative": (dot, umt.inner1d, (A, B), {"axes": [-4, 0]}, AxisError,
                               "axis -4 is out of bounds"),
    "output out of bounds": (cumsum, umt.cumsum, (A,), {"axes": [0, 3]}, AxisError,
                             "axis 3 is out of bounds for array of dimension 3"),
    "repeated": (matmul, umt.matrix_multiply, (M1, M2), {"axes": [(1, 1), (0, 1), (0, 1)]},
                 ValueError, "axes_matmul: axes item 0 has value 1 repeated"),
    "repeated negative": (matmul, umt.matrix_multiply, (M1, M2), {"axes": [(1, -2), (0, 1), (0, 1)]},
                          ValueError, "axes item 0 has value 1 repeated"),
    "core sizes differ": (dot, umt.inner1d, (A, B), {"axes": [0, 1]}, ValueError,
                          "core dimension 'n' of input 'b' has size 3, expected 2"),
    "too few dimensions": (dot, umt.inner1d, (np.float64(1.0), B), {"axes": [5, 0]}, ValueError,
                           r"axes_dot: Input operand 0 does not have enough dimensions \(has 0, gufunc "
                           r"core with signature \(n\),\(n\)->\(\) requires 1\)"),
    "axis several core dimensions": (matmul, umt.matrix_multiply, (M1, M2), {"axis": 0}, TypeError,
                                     r"axes_matmul: axis can only be used with a single shared core "
                                     r"dimension, not with the 3 distinct ones implied by signature "
                                     r"\(m,n\),\(n,p\)->\(m,p\)."),
    "axis float": (cumsum, umt.cumsum, (A,), {"axis": 1.0}, TypeError,
                   "'float' object cannot be interpreted as an integer"),
    "axis bool": (cumsum, umt.cumsum, (A,), {"axis": True}, TypeError, "an integer is required"),
    "axis tuple": (cumsum, umt.cumsum, (A,), {"axis": (0,)}, TypeError,
                   "'tuple' object cannot be interpreted as an integer"),
    "axis out of bounds": (cumsum, umt.cumsum, (A,), {"axis": -4}, AxisError, "axis -4 is out of bounds"),
    "axis past a C int": (cumsum, umt.cumsum, (A,), {"axis": 2**40}, ValueError,
                          "axes_cumsum: integer won't fit into a C int"),
    "keepdims not a bool": (dot, umt.inner1d, (A, B), {"keepdims": 1}, TypeError,
                            "axes_dot: 'keepdims' must be a boolean"),
    "keepdims NumPy bool": (dot, umt.inner1d, (A, B), {"keepdims": np.True_}, TypeError,
                            "'keepdims' must be a boolean"),
    "keepdims None": (dot, umt.inner1d, (A, B), {"keepdims": None}, TypeError,
                      "'keepdims' must be a boolean"),
    "keepdims with output core": (cumsum, umt.cumsum, (A,), {"keepdims": False}, TypeError,
                                  r"axes_cumsum does not support keepdims: its signature \(n\)->\(n\) "
                                  r"requires output 0 to have 1 core dimensions, but keepdims can only "
                                  r"be used when all inputs have the same number of core dimensions "
                                  r"and all outputs have no core dimensions."),
    "keepdims inputs differ": (matmul, umt.matrix_multiply, (M1, M2), {"keepdims": True}, TypeError,
                               "requires output 0 to have 2 core dimensions"),
    "keepdims output tuple empty": (dot, umt.inner1d, (A, B), {"axes": [0, 0, ()], "keepdims": True},
                                    AxisError, "operand 2 has 1 core dimensions, but 0 dimensions"),
    "keepdims out without the kept axis": (dot, umt.inner1d, (A, B),
                                           {"keepdims": True, "out": np.empty((2, 3, 4))}, ValueError,
                                           r"out= output 0 has shape \(2, 3, 4\), but with keepdims=True "
                                           r"its axes \(2,\) hold the kept core dimensions, of size 1"),
    "keepdims out too few dimensions": (dot, umt.inner1d, (A[0, 0], B[0, 0]),
                                        {"keepdims": True, "out": np.empty(())}, ValueError,
                                        "Output operand 0 does not have enough dimensions"),
    "out of the wrong shape": (cumsum, umt.cumsum, (A,), {"axis": 0, "out": np.empty((3, 4, 2))},
                               ValueError, "axes_cumsum: core dimension 'n' of out= has size 3, expected 2"),
}


@pytest.mark.parametrize("case", ERRORS)
def test_errors_as_numpy(case):
    kernel, reference, inputs, keywords, error, message = ERRORS[case]
    with pytest.raises(error):
        reference(*inputs, **keywords)
    with pytest.raises(error, match=message) as raised:
        kernel(*inputs, **keywords)
    assert type(raised.value) is error


def test_a_cached_call_does_not_accept_what_numpy_refuses():
    """Calls with these keywords are kept by call signature, keyed by value and type: a tuple
    for the list, ``1`` for ``True``, ``True`` for ``1`` still raise after the accepted call."""
    dot(A, B, axes=[0, 0])
    with pytest.raises(TypeError, match="axes should be a list"):
        dot(A, B, axes=(0, 0))
    dot(A, B, keepdims=True)
    with pytest.raises(TypeError, match="'keepdims' must be a boolean"):
        dot(A, B, keepdims=1)
    cumsum(A, axis=1)
    with pytest.raises(TypeError, match="an integer is required"):
        cumsum(A, axis=True)
    np.testing.assert_allclose(cumsum(A, axis=np.int8(1)), umt.cumsum(A, axis=1), rtol=1e-14)


def _interleaved(buffer: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """A view of every third float64 of ``buffer`` from the second, of ``shape``, transposed
    (out's elements interleave bytes it does not own, and its layout is not C order)."""
    size = int(np.prod(shape))
    return buffer.view(np.float64)[1:1 + 3 * size:3].reshape(shape[::-1]).T


def _canaries(size: int) -> np.ndarray:
    return np.random.default_rng(5).integers(0, 256, 8 * (3 * size + 2), dtype=np.uint8)


@pytest.mark.parametrize("case", ["keepdims out without the kept axis", "out of the wrong shape"])
def test_a_refused_call_writes_nothing(case):
    kernel, _, inputs, keywords, error, message = ERRORS[case]
    shape = keywords["out"].shape
    buffer = _canaries(int(np.prod(shape)))
    before = buffer.copy()
    with pytest.raises(error, match=message):
        kernel(*inputs, **{**keywords, "out": _interleaved(buffer, shape)})
    np.testing.assert_array_equal(buffer, before)


@pytest.mark.parametrize("target", HOST_TARGETS)
@pytest.mark.parametrize("case", ["dot axes", "dot keepdims axis", "cumsum axes", "matmul axes output first"])
def test_a_call_writes_the_elements_of_out_only(case, target):
    kernel, _, inputs, keywords = CASES[case]
    values = kernel(*inputs, target=target, **keywords)
    buffer = _canaries(values.size)
    expected = buffer.copy()
    _interleaved(expected, values.shape)[...] = values
    out = _interleaved(buffer, values.shape)
    assert kernel(*inputs, out=out, target=target, **keywords) is out
    np.testing.assert_array_equal(buffer, expected)


def test_dask_arrays_pass_the_keywords_to_dask():
    """Dask's ``apply_gufunc`` takes ``axes``, ``axis`` and ``keepdims`` itself: the kernel runs
    per block with its core dimensions last, and the result stays lazy."""
    da = pytest.importorskip("dask.array")
    lazy_a, lazy_b = da.from_array(A, chunks=(2, 1, 2)), da.from_array(B, chunks=(2, 1, 2))
    result = dot(lazy_a, lazy_b, axes=[0, 0])
    assert isinstance(result, da.Array)
    np.testing.assert_allclose(result.compute(), umt.inner1d(A, B, axes=[0, 0]), rtol=1e-14)
    kept = dot(lazy_a, lazy_b, axis=0, keepdims=True)
    np.testing.assert_allclose(kept.compute(), umt.inner1d(A, B, axis=0, keepdims=True), rtol=1e-14)
    moved = gf.hermite_norm(lazy_a, 3, axes=[(), (0,)])
    np.testing.assert_array_equal(moved.compute(), np.moveaxis(gf.hermite_norm(A, 3), -1, 0))
    with pytest.raises(TypeError, match="axes_dot: cannot specify both 'axis' and 'axes'"):
        dot(lazy_a, lazy_b, axes=[0, 0], axis=0)
