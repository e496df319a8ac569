"""Reductions at the end of a fused function: what the same function computes eagerly with NumPy.

Integers, booleans, ``min``/``max``, ``any``/``all`` agree bit for bit; floating sums and means
are compensated, so they agree within what NumPy's own pairwise summation may be off by, and are
checked against ``math.fsum`` to be at least as accurate as NumPy's.
"""

from __future__ import annotations

import inspect
import math
import re

import numba
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import gpufuncs as gf
from gpufuncs.targets.cpu import vecmath

TARGETS = ["cpu", pytest.param("parallel", marks=pytest.mark.slow),
           pytest.param("cuda", marks=pytest.mark.cuda)]


CASES = [("sum", np.float64), ("sum", np.float32), ("sum", np.int32), ("sum", np.complex128),
         ("prod", np.int32), ("min", np.float64), ("max", np.uint8), ("mean", np.float64),
         ("mean", np.int32), ("any", np.float64), ("all", np.int32), ("any", np.bool_),
         ("max", np.bool_)]
#: The reductions' keywords drawn: each is a fused function of its own (compiled anew), so a few.
KEYWORDS = [(None, False), (-1, True), ((0, -1), False)]


@st.composite
def _arguments(draw, dtype):
    shapes = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=1, max_dims=3, max_side=5))
    result = shapes.result_shape
    elements = (st.integers(0, 1).map(bool) if dtype == np.bool_ else
                st.integers(-3, 3) if np.dtype(dtype).kind in "iu" else
                st.floats(-2, 2, width=32) | st.sampled_from([0.0, -0.0, 1.0]))
    if np.dtype(dtype).kind == "u":
        elements = st.integers(0, 5)
    a = draw(hnp.arrays(dtype, shapes.input_shapes[0], elements=elements))
    b = draw(hnp.arrays(dtype, shapes.input_shapes[1], elements=elements))
    axis, keepdims = draw(st.sampled_from(KEYWORDS if len(result) >= 2 else KEYWORDS[:1]))
    return a, b, axis, keepdims


def _close(name, result, expected, a, b):
    """Exact where NumPy's answer is exact; floating sums within NumPy's own error bound."""
    assert np.asarray(result).dtype == np.asarray(expected).dtype
    assert np.shape(result) == np.shape(expected)
    exact = np.asarray(expected).dtype.kind in "biu" or name in ("min", "max", "any", "all")
    if exact:
        np.testing.assert_array_equal(result, expected)
        return
    values = np.abs(np.asarray(a * b + a, dtype=np.complex128 if np.iscomplexobj(expected) else np.float64))
    eps = np.finfo(np.asarray(expected).dtype).eps
    bound = 4 * eps * (values.sum() + 1) * (1 + math.log2(values.size + 1))
    np.testing.assert_allclose(result, expected, rtol=4 * eps * max(values.size, 1), atol=bound)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name, dtype", CASES, ids=[f"{n}-{np.dtype(d).name}" for n, d in CASES])
@given(data=st.data())
def test_reductions_agree_with_numpys_eager_call(target, name, dtype, data):
    a, b, axis, keepdims = data.draw(_arguments(dtype))
    if name in ("min", "max"):  # an empty reduction raises, as checked below
        sizes = np.broadcast_shapes(a.shape, b.shape)
        axes = range(len(sizes)) if axis is None else np.atleast_1d(axis)
        if any(sizes[i] == 0 for i in axes) or (axis is None and 0 in sizes):
            return
    with np.errstate(all="ignore"):
        expected = getattr(np, name)(a * b + a, axis=axis, keepdims=keepdims)
        fused = _fused(name, axis, keepdims)
        result = fused(a, b, target=target)
    _close(name, result, expected, a, b)


_FUSED: dict = {}


def _fused(name, axis, keepdims, dtype=None):
    """One fused function per reduction and keywords (its kernels are compiled once per dtypes)."""
    key = (name, axis, keepdims, dtype)
    if key not in _FUSED:
        reduce = getattr(np, name)
        kwargs = {"axis": axis, "keepdims": keepdims, **({"dtype": dtype} if dtype else {})}
        _FUSED[key] = gf.fuse(lambda a, b: reduce(a * b + a, **kwargs))
    return _FUSED[key]


@gf.fuse
def loglik(x, mu, s):
    return np.log(gf.gaussian(x, mu, s)).sum()


@gf.fuse
def stats(a, b):
    return (a - b).sum(axis=1), np.max(abs(a - b), axis=0, keepdims=True), (a > b).mean(), a.any()


def test_several_reductions_and_a_kernel_in_the_map():
    x = np.linspace(-3, 3, 1001)
    expected = np.log(gf.gaussian(x, 0.5, 1.5, target="cpu")).sum()
    assert loglik(x, 0.5, 1.5) == pytest.approx(expected, rel=1e-14)
    a, b = np.arange(12.0).reshape(3, 4), np.array([0.5, 7.0, -1.0, 3.0])
    for result, want in zip(stats(a, b), stats.func(a, b)):
        np.testing.assert_array_equal(result, want)
        assert np.asarray(result).dtype == np.asarray(want).dtype
    assert stats.result_dtypes(a, b) == (np.float64, np.float64, np.float64, np.bool_)


def test_sum_and_mean_take_numpys_dtypes_and_dtype_keyword():
    small = np.array([100, 100, 100], np.int8)
    f = gf.fuse(lambda a: a.sum())
    assert f(small) == 300 and f(small).dtype == np.int64  # NumPy accumulates int8 in int64
    g = gf.fuse(lambda a: np.mean(a, dtype=np.float32))
    assert g(small).dtype == np.float32 and g(small) == np.float32(100)
    h = gf.fuse(lambda a: np.sum(a * 1.5, dtype=np.int32))
    assert h(small) == np.sum(small * 1.5, dtype=np.int32) and h(small).dtype == np.int32


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_floating_sums_are_at_least_as_accurate_as_numpys_and_repeat_bit_for_bit(dtype):
    """Cancelling terms of very different sizes (where a naive sum loses everything), and
    random values: the fused sum is never further from the exact sum than NumPy's."""
    rng = np.random.default_rng(7)
    f = gf.fuse(lambda a: a.sum())
    big = 1e7 if dtype == np.float32 else 1e15
    for trial in range(6):
        n = [1000, 4096 + 3, 100_000][trial % 3]
        if trial < 3:
            values = rng.permutation(np.concatenate([np.full(n // 4, big), np.full(n // 4, -big),
                                                     rng.uniform(0, 1, n - 2 * (n // 4))]))
        else:
            values = rng.standard_normal(n) * rng.choice([1e-3, 1.0, 1e3], n)
        x = values.astype(dtype)
        exact = math.fsum(x.astype(np.float64))
        ours, numpys = f(x), np.sum(x)
        assert abs(float(ours) - exact) <= abs(float(numpys) - exact) + np.finfo(dtype).eps * abs(exact)
        assert f(x).tobytes() == ours.tobytes() == f(x, target="parallel").tobytes()


def test_infinities_and_nan_propagate_as_in_numpy():
    f = gf.fuse(lambda a: a.sum())
    with np.errstate(all="raise"):  # no warning NumPy's sum does not give
        assert f(np.array([1.0, np.inf, 2.0])) == np.inf
        assert f(np.array([1.0, -np.inf] * 200)) == -np.inf
        # an infinity in one block of many, the other blocks added in lanes (float64, complex128)
        assert f(np.r_[np.ones(300), np.inf, np.ones(50)]) == np.inf
        assert f(np.r_[np.ones(300), np.inf, np.ones(50)] * (1 + 1j)) == complex(np.inf, np.inf)
        assert np.isnan(f(np.r_[np.ones(300), np.nan, np.ones(50)]))  # NaN in a row of lanes: quiet
        assert np.isnan(f(np.r_[np.ones(300), np.nan, np.ones(50)] * (1 + 1j)))
        assert gf.fuse(lambda a: a.mean())(np.array([1.0, np.inf, 2.0])) == np.inf
    with pytest.warns(RuntimeWarning, match="invalid value"):  # as NumPy's own sum warns
        assert np.isnan(f(np.array([np.inf, -np.inf, 1.0])))
    assert np.isnan(gf.fuse(lambda a: a.max())(np.array([1.0, np.nan, 3.0])))
    assert gf.fuse(lambda a: np.any(a))(np.array([0.0, np.nan]))  # NaN is true, as in NumPy


_ROW_SUMS = {"sum": gf.fuse(lambda a: (a * 1).sum(axis=-1)),
             "mean": gf.fuse(lambda a: np.mean(a * 1, axis=-1)),
             "whole": gf.fuse(lambda a: (a * 1).sum())}


@pytest.mark.parametrize("target", ["cpu", "parallel"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@given(data=st.data())
def test_rows_sum_to_numpys_bits(target, dtype, data):
    """A float32 or float64 row is summed as NumPy sums it, in its pairwise order (blocks of
    at most 128 values in eight running sums, a longer row split in halves): its sum and mean
    along the last axis, and the sum of a 1-D array of that length, are NumPy's bit for bit,
    infinities and zeros of both signs included, NaN where NumPy's is (a NaN's sign and
    payload are the hardware's choice of operand, not a value). Lengths around the blocks'
    and the vectors' edges, and rows split several times."""
    rows = data.draw(st.integers(1, 3))
    n = data.draw(st.one_of(st.integers(0, 140), st.sampled_from([255, 256, 257, 1000, 4099])))
    big, width = float(np.finfo(dtype).max) / 4, 8 * np.dtype(dtype).itemsize
    x = data.draw(hnp.arrays(dtype, (rows, n), elements=st.floats(-big, big, width=width)))
    for special in data.draw(st.lists(st.sampled_from([np.nan, np.inf, -np.inf, 0.0, -0.0]), max_size=3)):
        if n:
            x[data.draw(st.integers(0, rows - 1)), data.draw(st.integers(0, n - 1))] = special
    with np.errstate(all="ignore"):
        _assert_same_bits(_ROW_SUMS["sum"](x, target=target), x.sum(axis=-1))
        _assert_same_bits(_ROW_SUMS["whole"](x[0], target=target), x[0].sum())
        if n:
            _assert_same_bits(_ROW_SUMS["mean"](x, target=target), x.mean(axis=-1))


def _assert_same_bits(got, want):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    nan = np.isnan(want)
    assert (np.isnan(got) == nan).all(), (got, want)
    assert got[~nan].tobytes() == want[~nan].tobytes(), (got, want)


_EXTREMES = {"min": gf.fuse(lambda a: np.min(a * 1, axis=-1)),
             "max": gf.fuse(lambda a: np.max(a * 1, axis=-1))}


@pytest.mark.parametrize("target", ["cpu", "parallel"])
@pytest.mark.parametrize("name", ["min", "max"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@given(data=st.data())
def test_min_and_max_are_numpys_with_nan_and_infinities_anywhere(target, name, dtype, data):
    """A host min or max keeps its extremes in 64 lanes: rows of lengths around the lanes' 64
    and their tail, with NaN, infinities and zeros of both signs at any place, each row's
    answer NumPy's. (Of zeros of both signs NumPy's sign is its loop's choice, the later
    zero's in rows of up to 8 values, the earlier's in longer ones: docs/fusion.md.)"""
    rows, n = data.draw(st.integers(1, 3)), data.draw(st.sampled_from([1, 7, 63, 64, 65, 130, 1000]))
    x = data.draw(hnp.arrays(dtype, (rows, n), elements=st.floats(-4, 4, width=8 * np.dtype(dtype).itemsize)))
    for special in data.draw(st.lists(st.sampled_from([np.nan, np.inf, -np.inf, 0.0, -0.0]), max_size=4)):
        x[data.draw(st.integers(0, rows - 1)), data.draw(st.integers(0, n - 1))] = special
    got, want = _EXTREMES[name](x, target=target), getattr(np, name)(x, axis=-1)
    np.testing.assert_array_equal(got, want)


def test_empty_reductions_as_numpys():
    f = gf.fuse(lambda a: a.max(axis=0))
    with pytest.raises(ValueError, match="zero-size array to reduction operation maximum"):
        f(np.zeros((0, 3)))
    assert f(np.zeros((3, 0))).shape == (0,)
    assert gf.fuse(lambda a: a.sum())(np.zeros(0)) == 0.0
    with pytest.warns(RuntimeWarning, match="Mean of empty slice"):
        assert np.isnan(gf.fuse(lambda a: a.mean())(np.zeros(0)))


def test_axis_errors_as_numpys():
    f = gf.fuse(lambda a: a.sum(axis=2))
    with pytest.raises(np.exceptions.AxisError, match="axis 2 is out of bounds for array of dimension 2"):
        f(np.ones((2, 3)))
    with pytest.raises(ValueError, match="duplicate value in 'axis'"):
        gf.fuse(lambda a: a.sum(axis=(0, -2)))(np.ones((2, 3)))


def test_out_receives_the_result_checked_first():
    f = gf.fuse(lambda a, b: (a * b).sum(axis=0))
    out = np.full(3, -1.0)
    assert f(np.ones((2, 3)), 2.0, out=out) is out
    np.testing.assert_array_equal(out, [4.0, 4.0, 4.0])
    with pytest.raises(ValueError, match="shape"):
        f(np.ones((2, 3)), 2.0, out=np.zeros(2))
    ints = np.zeros(3, np.int64)
    with pytest.raises(TypeError, match="same_kind"):
        f(np.ones((2, 3)), 2.0, out=ints)
    np.testing.assert_array_equal(ints, 0)


def test_several_results_take_out_as_a_tuple_as_numpy_does():
    """Two returned reductions take ``out=`` as a tuple (None entries allocated); one array
    alone is NumPy's TypeError, naming the function, and nothing is written (it was ignored)."""
    def total_and_peak(a):
        return a.sum(), a.max()

    f = gf.fuse(total_and_peak)
    x = np.arange(6.0)
    first, second = np.full((), -1.0), np.full((), -1.0)
    results = f(x, out=(first, None))
    assert results[0] is first and float(first) == 15.0 and results[1] == 5.0
    with pytest.raises(TypeError, match=r"total_and_peak: out= must be a tuple of 2 entries"):
        f(x, out=second)
    assert float(second) == -1.0
    with pytest.raises(ValueError, match="out= has 1 arrays for 2 results"):
        f(x, out=(second,))


def _then_computes(x):
    return x.sum() / 2


def _mixed(x):
    return x * 2, x.sum()


def _with_where(x):
    return np.sum(x, where=x > 0)


def _two_passes(x):
    return x.std()


@pytest.mark.parametrize("func, marker, words", [
    (_then_computes, "x.sum() / 2", "not fused further"),
    (_with_where, "np.sum(x, where", r"where=\.\.\.\) is not fused"),
    (_two_passes, "x.std()", "two passes"),
])
def test_what_a_reduction_cannot_do_is_refused_naming_the_line(func, marker, words):
    with pytest.raises(gf.FusionError, match=words) as info:
        gf.fuse(func)(np.ones(3))
    lines, first = inspect.getsourcelines(func)
    line = first + next(i for i, text in enumerate(lines) if marker in text)
    assert f"line {line}" in str(info.value)


def test_reductions_of_array_subclasses_are_refused_not_computed_as_plain_arrays():
    """NumPy reduces a masked array without its masked values and keeps a matrix 2-d: a fused
    reduction of one would be a different answer, so it is refused, naming the function."""
    f = gf.fuse(lambda a: (a * 2).sum(axis=0))
    masked = np.ma.masked_array([1.0, 2.0, 3.0], mask=[False, True, False])
    assert f.func(masked) == 8.0  # NumPy's answer: the mask is kept out
    for value in (masked, np.matrix([[1.0, 2.0], [3.0, 4.0]])):
        with pytest.raises(TypeError, match=r"fused function '<lambda>': reductions of \w+ \(a subclass"):
            f(value)
    assert f(np.asarray(masked)) == 12.0 and f(masked.data) == 12.0  # plain arrays: all values


@st.composite
def _views(draw, dtype):
    """A view of a shared buffer of ``dtype`` by any strides (multiples of the itemsize:
    negative, zero, or past the sides: rows that skip values, transposes, reversals)."""
    ndim = draw(st.integers(1, 3))
    shape = draw(st.lists(st.integers(0, 6), min_size=ndim, max_size=ndim))
    steps = draw(st.lists(st.integers(-7, 7), min_size=ndim, max_size=ndim))  # in elements
    low = sum(min(0, s) * max(n - 1, 0) for n, s in zip(shape, steps))
    high = sum(max(0, s) * max(n - 1, 0) for n, s in zip(shape, steps))
    base = np.arange(high - low + 1).astype(dtype) * 3 - 20  # every element its own value
    item = base.itemsize
    return np.lib.stride_tricks.as_strided(base[-low:], shape, [s * item for s in steps], writeable=False)


def _sum_over(axis):
    return gf.fuse(lambda a: (a * 3 - 1).sum(axis=axis))


_VIEW_SUMS = {axis: _sum_over(axis) for axis in (None, 0, -1, (0, -1))}


@pytest.mark.parametrize("dtype", [np.int64, np.float32])
@given(data=st.data())
def test_reductions_of_views_by_any_strides_match_numpy(dtype, data):
    """Host reductions run a kernel compiled for C-ordered cores where every core view is one
    (checked per call): a view that is not must take the kernel for any strides, which gives
    NumPy's answer (integers exactly; float32 values here are integers too, summed exactly)."""
    view = data.draw(_views(dtype))
    axis = data.draw(st.sampled_from([None, 0, -1, (0, -1)] if view.ndim >= 2 else [None, 0, -1]))
    expected = (view * 3 - 1).sum(axis=axis)
    np.testing.assert_array_equal(_VIEW_SUMS[axis](view), expected)


@pytest.mark.parametrize("make", [lambda x: x[::2], lambda x: x[::-1], lambda x: x[1:].reshape(-1, 3)[:, :2],
                                  lambda x: x[1:].reshape(3, -1).T, lambda x: x[1:].reshape(-1, 3)[:, ::-1]],
                         ids=["every-other", "reversed", "rows-cut", "transposed", "rows-reversed"])
def test_long_reductions_of_strided_views_match_numpy(make):
    """Past SPLIT values a reduction to one value runs in pieces: views whose pieces are not
    C-ordered (strided, reversed, rows with gaps) give NumPy's exact integer sums."""
    from gpufuncs.fuse.reduction import SPLIT

    x = np.arange(3 * SPLIT + 1, dtype=np.int64) % 1000 - 500
    view = make(x)
    assert view.size >= SPLIT
    for target in ("cpu", "parallel"):
        assert _VIEW_SUMS[None](view, target=target) == (view * 3 - 1).sum()


@pytest.mark.parametrize("shape", [(300, 7), (4000, 33), (5, 3, 4)])
def test_reductions_over_a_leading_axis_run_by_rows_in_numpys_order(shape):
    """``x.sum(axis=0)`` of a C array adds row after row into the columns (contiguous loads),
    NumPy's own order: float64 sums equal NumPy's bit for bit, a broadcast operand included;
    float32 sums run in float64, at least as close to the exact sums as NumPy's; the other
    reductions exactly; F-ordered and strided views take the cores' loop, with NumPy's answer."""
    rng = np.random.default_rng(len(shape))
    a = rng.standard_normal(shape) * 10.0 ** rng.integers(-8, 8, shape)
    b = rng.standard_normal(shape[-1])
    total = gf.fuse(lambda x, y: (x * y - 1).sum(axis=0))
    for target in ("cpu", "parallel"):
        assert total(a, b, target=target).tobytes() == (a * b - 1).sum(axis=0).tobytes()
    for view in (np.asfortranarray(a), a[::2], a[:, ::-1] if a.ndim == 2 else a[:, :, ::-1]):
        np.testing.assert_allclose(total(view, b), (view * b - 1).sum(axis=0), rtol=1e-12, atol=1e-12)
    x32 = a.astype(np.float32)
    columns = x32.astype(np.float64).reshape(shape[0], -1).T
    exact = np.array([math.fsum(c) for c in columns]).reshape(shape[1:])
    ours, numpys = gf.fuse(lambda x: x.sum(axis=0))(x32), x32.sum(axis=0)
    assert ours.dtype == np.float32
    assert np.all(np.abs(ours - exact) <= np.abs(numpys - exact) + np.finfo(np.float32).eps * np.abs(exact))
    ints = rng.integers(-100, 100, shape)
    for name in ("sum", "prod", "min", "max", "any", "all", "mean"):
        reduce = getattr(np, name)
        fused = gf.fuse(lambda x, reduce=reduce: reduce(x % 7 - 3, axis=0))
        np.testing.assert_array_equal(fused(ints), reduce(ints % 7 - 3, axis=0))


def test_reductions_beside_elementwise_results_are_refused():
    with pytest.raises(gf.FusionError, match="reductions beside elementwise arrays"):
        gf.fuse(_mixed)(np.ones(3))



def test_a_long_reduction_in_pieces_is_exact_and_the_same_on_every_target():
    """Past SPLIT values a reduction to one value runs in pieces (spread over the cores by
    ``parallel``): every target gives the same bits, and the pieces' sums combine exactly."""
    from gpufuncs.fuse.reduction import PIECES, SPLIT

    rng = np.random.default_rng(3)
    x = rng.standard_normal(SPLIT + PIECES * 7 + 5).astype(np.float32)  # pieces and a remainder
    f = gf.fuse(lambda a: (a * a - 1).sum())
    sums = {t: f(x, target=t) for t in ("cpu", "parallel", "auto")}
    assert len({s.tobytes() for s in sums.values()}) == 1
    exact = math.fsum((x.astype(np.float64) ** 2 - 1).astype(np.float32).astype(np.float64))
    assert abs(float(sums["cpu"]) - exact) <= abs(float(np.sum(x * x - 1)) - exact) + abs(exact) * 2e-7
    g = gf.fuse(lambda a: (np.max(a), np.any(a > 4), np.mean(a, dtype=np.float64)))
    for result, want in zip(g(x, target="parallel"), g.func(x)):
        np.testing.assert_allclose(result, want, rtol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_row_summed_on_the_cores_has_numpys_bits(monkeypatch, dtype):
    """From SHARED_FROM values to SPLIT a row reduced to one value is summed on the cores under
    ``parallel`` and ``auto``: parts of NumPy's pairwise tree a loop element each, their sums
    added as NumPy adds them. The bits are NumPy's, as on one core, whatever the number of
    threads (values of every magnitude, so that the order shows), for contiguous rows and
    strided ones."""
    import numba

    from gpufuncs.fuse import reduction

    cuts = []
    subtrees = reduction.numpy_subtrees

    def recorded(lo, n, depth, parts):
        cuts.append(depth)
        return subtrees(lo, n, depth, parts)

    monkeypatch.setattr(reduction, "numpy_subtrees", recorded)
    rng = np.random.default_rng(12)
    total = gf.fuse(lambda a: a.sum())
    for threads in (2, 8, 64):
        monkeypatch.setattr(numba, "get_num_threads", lambda threads=threads: threads)
        total._planned.clear()  # (a call's plan keeps its parts)
        for found in total._compiled.values():
            found.reductions[0]._plans.clear()
        for n in (reduction.SHARED_FROM, reduction.SHARED_FROM + 13, 100_003, reduction.SPLIT - 1):
            x = (rng.standard_normal(2 * n) * 10.0 ** rng.uniform(-6, 6, 2 * n)).astype(dtype)
            for view in (x[:n], x[1:n + 1], x[::2]):
                expected = np.sum(view)
                for target in ("cpu", "parallel", "auto"):
                    assert total(view, target=target).tobytes() == expected.tobytes(), (threads, n, target)
    # (2 threads: the row cut one level down; 8 or more: 3, parts of SUBTREE values or more)
    assert sorted(set(cuts)) == [0, 1, 2, 3]


_ROW_SUM = gf.fuse(lambda a, w: (a * w).sum())


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@given(data=st.data())
def test_any_row_on_the_cores_has_the_bits_of_one_core_and_numpys(dtype, data):
    """Rows of any length from SHARED_FROM to SPLIT, at any offset and step into a buffer,
    summed on the cores in parts of NumPy's tree: the bits of the one-core call and of NumPy's
    sum (values of every magnitude and sign, so that any other order shows), cut for 8
    threads whatever the machine has (two parts' sums add the same in any order)."""
    from unittest import mock

    import numba

    from gpufuncs.fuse.reduction import SHARED_FROM, SPLIT

    n = data.draw(st.integers(SHARED_FROM, SPLIT - 1), label="n")
    offset, step = data.draw(st.integers(0, 7), label="offset"), data.draw(st.integers(1, 3), label="step")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    size = offset + n * step
    store = (rng.standard_normal(size) * 10.0 ** rng.uniform(-8, 8, size)).astype(dtype)
    row = store[offset::step][:n]
    w = dtype(data.draw(st.sampled_from([1.0, -0.5, 3.0]), label="w"))
    expected = np.sum(row * w)
    one_core = _ROW_SUM(row, w, target="cpu")
    assert one_core.tobytes() == expected.tobytes()
    with mock.patch.object(numba, "get_num_threads", return_value=8):
        assert _ROW_SUM(row, w, target="parallel").tobytes() == expected.tobytes()


def test_numpys_subtrees_cover_the_row_in_order_as_numpy_splits_it():
    """The parts are the row's values in order, each of NumPy's halves (``n // 2`` less its
    remainder modulo 8) down to the depth asked, or a block of 128 or fewer, never cut."""
    from gpufuncs.fuse.reduction import BLOCK, numpy_subtrees

    def length(tree, parts):
        return parts[tree][1] if isinstance(tree, int) else sum(length(t, parts) for t in tree)

    def check(tree, lo, n, depth, parts):
        if depth == 0 or n <= BLOCK:
            assert parts[tree] == (lo, n)
            return
        half = n // 2 - n // 2 % 8
        assert length(tree[0], parts) == half and length(tree[1], parts) == n - half
        check(tree[0], lo, half, depth - 1, parts)
        check(tree[1], lo + half, n - half, depth - 1, parts)

    for n, depth in [(1000, 2), (100_003, 3), (300, 4), (129, 5), (128, 3)]:
        parts: list = []
        tree = numpy_subtrees(0, n, depth, parts)
        assert [lo for lo, _ in parts] == list(np.cumsum([0] + [c for _, c in parts[:-1]]))
        assert sum(c for _, c in parts) == n
        check(tree, 0, n, depth, parts)


_tripled_sum = gf.fuse(lambda a: (a * 3).sum())
_row_stats = gf.fuse(lambda a: (a.sum(axis=1), a.max(axis=1), np.min(a, axis=1)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1000, 200), (64 * 3 + 5, 1000), (2, 100, 1000), (70, 3000)])
def test_a_long_reduction_of_rows_in_pieces_is_the_same_for_every_layout(shape, dtype):
    """A reduction to one value of a core of 64 rows or more is cut into pieces of whole rows:
    C, Fortran-ordered and reversed arrays of the same values give the same bits (the pieces
    depend on the shape alone), on every host target, as accurate as NumPy's sum or more."""
    rng = np.random.default_rng(11)
    x = (rng.standard_normal(shape) * rng.choice([1e-3, 1.0, 1e3], shape)).astype(dtype)
    f = _tripled_sum
    flipped = np.flip(x, -1).copy()
    layouts = {"C": x, "F": np.asfortranarray(x), "reversed": np.flip(flipped, -1)}
    sums = {(name, t): f(v, target=t) for name, v in layouts.items() for t in ("cpu", "parallel", "auto")}
    assert len({s.tobytes() for s in sums.values()}) == 1, sums
    exact = math.fsum((x.astype(np.float64) * 3).astype(dtype).astype(np.float64).ravel())
    ours = float(sums["C", "cpu"])
    assert abs(ours - exact) <= abs(float(np.sum(x * 3)) - exact) + np.finfo(dtype).eps * abs(exact)


@pytest.mark.parametrize("n", [1, 7, 8, 9, 16, 17, 33, 63, 64, 65, 100, 129])
def test_rows_of_every_length_fold_their_lanes_exactly(n):
    """A float64 row's values go into up to 64 lanes, folded halves into halves before their
    total: every row length, an infinity or NaN in any lane, sums within NumPy's error of
    the exact one and extremes NumPy's own."""
    rng = np.random.default_rng(n)
    x = rng.standard_normal((40, n)) * rng.choice([1e-8, 1.0, 1e8], (40, n))
    x[1, rng.integers(n)] = np.inf
    x[2, rng.integers(n)] = -np.inf
    x[3, rng.integers(n)] = np.nan
    if n > 1:
        x[4, :2] = (np.inf, -np.inf)
    with np.errstate(invalid="ignore"):  # inf - inf in row 4, as NumPy's own sum warns
        total, top, bottom = _row_stats(x)
        np.testing.assert_array_equal(top, x.max(axis=1))
        np.testing.assert_array_equal(bottom, x.min(axis=1))
        want = x.sum(axis=1)
    finite = np.isfinite(want)
    np.testing.assert_array_equal(total[~finite], want[~finite])
    exact = np.array([math.fsum(row) for row in x[finite]])
    assert np.all(np.abs(total[finite] - exact) <= np.abs(want[finite] - exact) + 1e-16 * np.abs(exact))


def test_the_pieces_run_on_the_cores_under_auto_and_one_row_runs_on_one(monkeypatch):
    """``auto`` spreads the pieces of a long reduction over the cores, as ``parallel`` does
    (it would otherwise measure the call by its 64 loop elements and take ``cpu``); a reduction
    to one value short of SHARED_FROM values is one loop element, which ``parallel`` runs on
    the serial loop (its threads would have nothing to share); one from there to the pieces
    is parts of NumPy's tree on the cores (auto as parallel); a reduction of rows keeps the
    threaded loop."""
    from gpufuncs.dispatch.kernel import Kernel
    from gpufuncs.fuse.reduction import SHARED_FROM, SPLIT
    from gpufuncs.targets.cpu import CpuKernel

    targets: list[str] = []
    loops: list[str] = []
    call, resolve, compile_loop = Kernel.__call__, Kernel.resolve, CpuKernel.compile_loop

    def recorded(self, *args, **kwargs):  # a kernel's call, or its resolving for a plan's
        targets.append(kwargs.get("target", "auto"))
        return call(self, *args, **kwargs)

    def resolved(self, *args, **kwargs):
        targets.append(kwargs.get("target", "auto"))
        return resolve(self, *args, **kwargs)

    def compiled(self, dispatcher, argtypes):
        loops.append(dispatcher.py_func.__name__)
        return compile_loop(self, dispatcher, argtypes)

    monkeypatch.setattr(Kernel, "__call__", recorded)
    monkeypatch.setattr(Kernel, "resolve", resolved)
    monkeypatch.setattr(CpuKernel, "compile_loop", compiled)
    f = gf.fuse(lambda a: (a * a).sum())
    rows = gf.fuse(lambda a: (a * a).sum(axis=1))
    long, short = np.linspace(-1, 1, SPLIT + 5), np.linspace(-1, 1, SHARED_FROM - 5)
    f(short, target="parallel")  # (the first call: its loop is compiled now)
    assert targets == ["parallel"] and loops == ["body"]
    shared = np.linspace(-1, 1, SHARED_FROM + 5)  # (on the cores: parts of NumPy's tree)
    for keywords in ({}, {"target": "auto"}, {"target": "parallel"}):  # (no target= is auto)
        targets.clear()
        loops.clear()
        assert f(shared, **keywords) == np.sum(shared * shared)
        assert targets == ["parallel"] and all(name.startswith("parallel") for name in loops), loops
    expected = {"auto": ["parallel", "parallel"], "cpu": ["cpu", "cpu"], "parallel": ["parallel", "parallel"]}
    for target, seen in expected.items():  # (the pieces, then the rest of 5 values)
        targets.clear()
        np.testing.assert_allclose(f(long, target=target), f.func(long), rtol=1e-12)
        assert targets == seen
    for target in ("auto", "cpu"):  # (parallel: the first call above)
        targets.clear()
        f(short, target=target)
        assert targets == [target]
    for target in ("auto", "cpu", "parallel"):  # planned: the kernel's call was resolved once
        targets.clear()
        np.testing.assert_allclose(f(short, target=target), f.func(short), rtol=1e-12)
        assert targets == []
    loops.clear()
    rows(long[:SPLIT].reshape(4, -1), target="parallel")
    assert loops and all(name.startswith("parallel") for name in loops), loops


def test_a_sum_compiles_only_the_kernel_its_cores_need():
    """A host sum of rows (a 1-D array, or each row of a 2-D one) runs a kernel whose core is
    one row, summed in NumPy's order (its bits); a sum over two axes the kernel of ``(m, n)``
    cores. Each is compiled on its first use only: a fused sum's first call compiles one."""
    fused = gf.fuse(lambda a: (a * 3).sum(axis=-1))
    both = gf.fuse(lambda a: (a * 3).sum())
    x = np.linspace(-2, 2, 12 * 999).astype(np.float32).reshape(12, 999)
    np.testing.assert_array_equal(fused(x, target="cpu"), (x * 3).sum(axis=-1))
    np.testing.assert_array_equal(both(x[0], target="cpu"), (x[0] * 3).sum())
    (rows,) = fused.checked((x,)).reductions
    assert [key[-1] for key in rows._kernels] == [True]  # (arrays, device, C order, columns, one row)
    np.testing.assert_allclose(both(x, target="cpu"), math.fsum((x * 3).ravel().tolist()), rtol=1e-7)
    (whole,) = both.checked((x,)).reductions
    assert [key[-1] for key in whole._kernels] == [True, False]


def test_check_fused_checks_reductions_within_numpys_summation_error():
    """check_fused draws arguments (infinities and NaN included) and bounds a compensated sum's
    distance from NumPy's pairwise one by NumPy's own error; an integer or a maximum exactly."""
    from gpufuncs.testing import check_fused

    check_fused(stats, np.ones((2, 3)), np.ones(3), targets=["cpu"], max_examples=15)
    check_fused(gf.fuse(lambda a, b: (np.exp(a) * b).mean(axis=0)), np.ones(3, np.float32), 1.5,
                targets=["cpu"], ulps=4, max_examples=15)


def test_check_fused_finds_a_sum_beyond_numpys_error():
    from gpufuncs.testing_fused import assert_like_eager

    f = gf.fuse(lambda a: a.sum())
    x = np.linspace(0, 1, 1001)
    assert_like_eager(f, (x,), "cpu")


    class OffByMoreThanRounding:
        """``f``, whose sums are off by far more than any summation's rounding."""

        def __init__(self):
            self.func, self.reduced, self.__name__ = f.func, f.reduced, "off"

        def __call__(self, *args, **kwargs):
            return f(*args, **kwargs) * (1 + 1e-12)

    with pytest.raises(AssertionError, match="beyond NumPy's summation error"):
        assert_like_eager(OffByMoreThanRounding(), (x,), "cpu")


def _gpu_arrays():
    """The kinds of arrays a GPU reduction takes: host arrays (copied by the call, their pieces
    contiguous chunks) and, on a GPU, CuPy's (their pieces interleaved)."""
    import os
    kinds = [np.asarray]
    if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
        cupy = pytest.importorskip("cupy")
        kinds.append(cupy.asarray)
    return kinds


@pytest.mark.cuda
def test_gpu_reductions_cut_into_pieces_are_exact_and_repeat_bit_for_bit(monkeypatch):
    """A GPU reduction to few results cuts its longer core axis into pieces, a thread each, the
    rest of it an element a thread: every value is reduced exactly once (integers, extremes and
    ``any`` exact; sums at least as accurate as NumPy's), and a second call gives the same bits.
    The simulator runs it with small pieces (each GPU thread is a Python thread there)."""
    from gpufuncs.dispatch import pieces

    if __import__("os").environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        monkeypatch.setattr(pieces, "GPU_THREADS", 48)
        monkeypatch.setattr(pieces, "GPU_PIECE", 4)
        n = 203  # 48 pieces of 4 and a rest of 11
    else:
        n = pieces.GPU_THREADS * pieces.GPU_PIECE + 12345
    rng = np.random.default_rng(5)
    x = rng.standard_normal(n).astype(np.float32)
    k = rng.integers(-50, 50, (3, n // 3)).astype(np.int32)
    total = gf.fuse(lambda a: (a * a - 1).sum())
    rows = gf.fuse(lambda a: (np.max(a * 2, axis=1), np.min(a, axis=0), np.sum(a, axis=1), (a > 45).any()))
    tall = gf.fuse(lambda a: (np.prod(a != 0, axis=(0, 1)), np.mean(a)))  # cut along the core's rows
    exact = math.fsum((x.astype(np.float64) ** 2 - 1).astype(np.float32).astype(np.float64))
    kt = np.ascontiguousarray(k.T)
    for to in _gpu_arrays():
        first, again = (_host(total(to(x), target="cuda")) for _ in range(2))
        assert first.tobytes() == again.tobytes()
        assert abs(float(first) - exact) <= abs(float(np.sum(x * x - 1)) - exact) + abs(exact) * 2e-7
        for result, want in zip(rows(to(k), target="cuda"), rows.func(k)):
            np.testing.assert_array_equal(_host(result), want)
        for result, want in zip(tall(to(kt), target="cuda"), tall.func(kt)):
            np.testing.assert_allclose(_host(result), want, rtol=1e-15)
            assert _host(result).dtype == np.asarray(want).dtype


#: Reductions to one value that run in one launch on CuPy arrays: (function of a and w, the
#: dtype of a, whether NumPy's value is met exactly). ``w`` is a scalar: the operands are an
#: array and a Python float.
ONE_LAUNCH = [
    (lambda a, w: (a * w).sum(), np.float32, False), (lambda a, w: (a - w).sum(), np.float64, False),
    (lambda a, w: (a > w).sum(), np.float32, True), (lambda a, w: (a * 3).sum(), np.int8, True),
    (lambda a, w: np.prod((a > w) + 1), np.float64, True), (lambda a, w: np.min(a * w), np.float32, True),
    (lambda a, w: np.max(a - w), np.float64, True), (lambda a, w: (a > w).any(), np.float64, True),
    (lambda a, w: np.all(a < w), np.float32, True), (lambda a, w: (a * w).mean(), np.int16, False),
    (lambda a, w: np.bitwise_xor.reduce(a + 1, axis=None), np.int32, True),
    (lambda a, w: np.hypot.reduce(a * w, axis=None), np.float64, False),
]


@pytest.mark.cuda
@pytest.mark.parametrize("func, dtype, exact", ONE_LAUNCH, ids=range(len(ONE_LAUNCH)))
def test_one_launch_reductions_of_cupy_arrays_agree_with_numpy(func, dtype, exact):
    """Reductions to one value of a C-contiguous CuPy array run in one launch (blocks, then the
    last block): at every size around a block's threads and the grid's limits, every value is
    combined exactly once (integers, extremes, any/all exact; sums at least as accurate as
    NumPy's; hypot within a few units in the last place), NaN propagates, a second call gives
    the same bits, and the kernel is compiled once whatever the size."""
    cp = pytest.importorskip("cupy")
    from gpufuncs.targets.cuda import single_pass
    from gpufuncs.targets.cuda.runtime import BLOCK

    fused = gf.fuse(func)
    most = 8 * 132 * BLOCK * single_pass.MIN_PER_THREAD  # (values beyond it: more than a thread's 8)
    rng = np.random.default_rng(7)
    integers = np.dtype(dtype).kind in "iu"
    for n in (1, 7, BLOCK - 1, BLOCK, BLOCK + 1, 5000, most - 1, most + 3, 3 * most + 11):
        a = (rng.integers(-100, 100, n) if integers else rng.standard_normal(n)).astype(dtype)
        want = np.asarray(func(a, 0.5))
        got = fused(cp.asarray(a), 0.5)
        assert isinstance(got, cp.ndarray) and got.dtype == want.dtype and got.shape == want.shape, n
        host = got.get()
        assert host.tobytes() == fused(cp.asarray(a), 0.5).get().tobytes()  # the same bits
        if exact:
            np.testing.assert_array_equal(host, want, err_msg=f"n={n}")
        else:
            magnitude = np.abs(np.asarray(a, np.float64)).sum() + 1
            bound = 4 * np.finfo(want.dtype).eps * magnitude * (1 + math.log2(n + 1))
            np.testing.assert_allclose(host, want, rtol=8 * np.finfo(want.dtype).eps, atol=bound,
                                       err_msg=f"n={n}")
    if not integers:
        a = rng.standard_normal(4099).astype(dtype)
        a[1234] = np.nan
        want = np.asarray(func(a, 0.5), np.float64)
        assert np.isnan(want) == np.isnan(fused(cp.asarray(a), 0.5).get().astype(np.float64))
    (found,) = fused._compiled.values()
    launches = [launch for part in found.reductions for launch in part._one_launch.values()]
    assert launches and all(len(launch._kernels) == 1 for launch in launches), "a kernel per size"


def test_a_planned_host_call_reruns_only_for_arguments_like_its_own():
    """A call keeps what it decided as a plan for arguments like its own (class, dtype, shape,
    strides, scalar types, axis, keepdims, target): a later call with new values reuses it,
    and any other kind of call (transposed, strided, another axis, keepdims, out=, a 0-d array
    for a scalar) decides afresh; every answer is NumPy's."""
    fused = gf.fuse(lambda a, w: (a * w).sum(axis=0))
    rng = np.random.default_rng(10)
    x = rng.standard_normal((50, 8))
    (part,) = fused.checked((x, 2.0)).reductions
    for w in (2.0, -0.5):
        np.testing.assert_allclose(fused(x, w), (x * w).sum(axis=0), rtol=1e-14)
        np.testing.assert_allclose(fused(x + w, w), ((x + w) * w).sum(axis=0), rtol=1e-14)
    assert len(part._plans) == 1
    for a in (np.asfortranarray(x), x[::2], x.T.copy().T):
        np.testing.assert_allclose(fused(a, 2.0), (a * 2.0).sum(axis=0), rtol=1e-14)
    np.testing.assert_allclose(fused(x, 2.0, target="parallel"), (x * 2.0).sum(axis=0), rtol=1e-14)
    out = np.zeros(8)
    assert fused(x, 2.0, out=out) is out
    np.testing.assert_allclose(out, (x * 2.0).sum(axis=0), rtol=1e-14)
    assert len(part._plans) == 4  # C order, Fortran order (x.T.copy().T too), x[::2], parallel
    np.testing.assert_allclose(fused(x, np.array(2.0)), (x * 2.0).sum(axis=0), rtol=1e-14)
    np.testing.assert_array_equal(fused(np.zeros((0, 3)), 2.0), np.zeros(3))  # nothing to sum


def test_a_fused_functions_plan_reruns_only_for_arguments_like_its_own():
    """A fused function returning one reduction keeps its reduction's plan by the target and
    each argument's key (class, dtype, shape, strides; a scalar's type): later calls with new
    values run it without tracing or keying again, and every other kind of call (another
    dtype, shape, layout, scalar type, target, a Python int that NumPy checks, ``out=``)
    takes the full path. Every answer is NumPy's."""
    f = gf.fuse(lambda a, w: (a * w).sum(axis=-1))
    rng = np.random.default_rng(13)
    x = rng.standard_normal((6, 9))
    calls = [(x, 2.0, {}), (x + 1, -0.5, {}), (x.astype(np.float32), 2.0, {}), (x[:, ::2], 2.0, {}),
             (x.T, 2.0, {}), (x[0], 2.0, {}), (x, np.float32(2.0), {}), (x, 3, {}),
             (x, 2.0, {"target": "cpu"}), (x, 2.0, {"target": "parallel"}), (x.astype(np.float32), 2.0, {})]
    for a, w, keywords in calls * 2:
        expected = (a * w).sum(axis=-1)
        rtol = 1e-6 if a.dtype == np.float32 else 1e-13
        np.testing.assert_allclose(f(a, w, **keywords), expected, rtol=rtol)
        assert f(a, w, **keywords).dtype == expected.dtype
    kinds = {(k.get("target"), a.dtype, a.shape, a.strides, type(w)) for a, w, k in calls}
    assert len(f._planned) == len(kinds)  # one plan for each kind of call
    out = np.zeros(6)
    assert f(x, 2.0, out=out) is out
    np.testing.assert_allclose(out, (x * 2.0).sum(axis=-1), rtol=1e-13)
    assert len(f._planned) == len(kinds)
    # A Python int into an integer loop is checked as NumPy checks it, on every call: no plan.
    g = gf.fuse(lambda a, w: (a * w).sum())
    small = np.arange(3, dtype=np.int8)
    for _ in range(2):
        assert g(small, 3) == (small * 3).sum()
        with pytest.raises(OverflowError):
            g(small, 1000)
    assert not g._planned


@pytest.mark.parametrize("target", ["cpu", "parallel", "auto"])
def test_a_planned_reduction_by_rows_reads_each_calls_own_views(target):
    """A plan of a reduction by rows runs the kernel's call resolved at its first call on
    each later call's core views: views of other memory laid out alike (unaligned, offset,
    reversed rows) reduce their own values, as NumPy does, and write nothing else."""
    fused = gf.fuse(lambda a, w: (a * w).sum(axis=-1))
    rng = np.random.default_rng(11)
    store = np.zeros(8 * 7 * 5 + 9, np.uint8)
    def view(offset: int) -> np.ndarray:  # (7, 5) float64, C order, at a byte offset
        return np.ndarray((7, 5), np.float64, buffer=store, offset=offset)
    first = view(0)
    first[...] = rng.standard_normal((7, 5))
    np.testing.assert_allclose(fused(first, 1.5, target=target), (first * 1.5).sum(axis=-1), rtol=1e-13)
    (part,) = fused.checked((first, 1.5)).reductions
    planned = len(part._plans)
    for offset in (1, 3, 8):  # unaligned, unaligned, aligned elsewhere
        a = view(offset)
        a[...] = rng.standard_normal((7, 5))
        before = store.copy()
        np.testing.assert_allclose(fused(a, -0.5, target=target), (a * -0.5).sum(axis=-1), rtol=1e-13)
        np.testing.assert_array_equal(store, before)
    assert len(part._plans) == planned  # the same plan each time
    rows = first[::-1]  # another layout: a plan of its own
    np.testing.assert_allclose(fused(rows, 2.0, target=target), (rows * 2.0).sum(axis=-1), rtol=1e-13)
    assert len(part._plans) == planned + 1


@pytest.mark.cuda
def test_a_call_planned_in_one_launch_reruns_only_for_arguments_like_its_own():
    """A reduction that ran in one launch is kept as a plan for arguments like its own (class,
    dtype, shape, contiguity, scalar types, axis, keepdims, target): later calls with new values
    and scalars reuse it, and any other kind of call (a strided view of the same shape, another
    dtype, keepdims, out=, a host array) decides afresh and gets NumPy's answer."""
    cp = pytest.importorskip("cupy")
    fused = gf.fuse(lambda a, w: (a * w).sum())
    rng = np.random.default_rng(9)
    x = rng.standard_normal((300, 40))
    d = cp.asarray(x)
    (part,) = fused.checked((d, 2.0)).reductions
    for w in (2.0, -0.5, 3):  # a new scalar value each time (an int: a compiled part of its own)
        np.testing.assert_allclose(float(fused(d, w)), (x * w).sum(), rtol=1e-13)
    assert len(part._plans) == 1
    strided = cp.asarray(np.asfortranarray(x))  # the same shape, not C-contiguous: the pieces
    np.testing.assert_allclose(float(fused(strided, 2.0)), (x * 2).sum(), rtol=1e-13)
    np.testing.assert_allclose(float(fused(d[:, ::2], 2.0)), (x[:, ::2] * 2).sum(), rtol=1e-13)
    np.testing.assert_allclose(fused(d, 2.0, target="cuda").get(), (x * 2).sum(), rtol=1e-13)
    out = cp.zeros(())
    assert fused(d, 2.0, out=out) is out and abs(float(out) - (x * 2).sum()) < 1e-9
    assert isinstance(fused(x, 2.0), float | np.floating)  # a host array: the host's answer
    np.testing.assert_allclose(float(fused(d * 3, 2.0)), (x * 6).sum(), rtol=1e-13)


def _host(result):
    return result.get() if hasattr(result, "get") else np.asarray(result)


@pytest.mark.parametrize("func, dtype, shape", [
    (lambda x: np.log(x).sum(), np.float32, (5000,)),  # a row, in NumPy's order
    (lambda x: (x * 3).sum(), np.float64, (3, 5000)),  # lanes of an (m, n) core
    (lambda x: (x * 3).sum(), np.float32, (3, 5000)),  # blocks of an (m, n) core
    (lambda x: (x * 3).max(), np.float64, (5000,)),  # lanes
    (lambda x: np.hypot.reduce(x * 3), np.float32, (5000,)),  # a combining kernel's pairwise blocks
], ids=["row", "lanes-sum", "blocks", "lanes-max", "pairwise"])
def test_host_reduction_loops_prefetch_what_they_read(func, dtype, shape):
    """A host reduction's fill loops prefetch their arrays ``reduction.AHEAD`` values ahead:
    without it, a fused log-likelihood of 10^7 float32 values took 1.9x its time per value at
    10^6 (2-core machine), its loads waiting on memory. A hint only: the values are NumPy's."""
    f = gf.fuse(func)
    x = np.linspace(1, 2, math.prod(shape), dtype=dtype).reshape(shape)
    np.testing.assert_allclose(f(x, target="cpu"), func(x.astype(np.float64)), rtol=1e-6)
    (part,) = f._compiled_for((x,)).reductions
    (kernel,) = part._kernels.values()
    compiled = kernel.compiled("cpu")
    compiled.inline(kernel.spec.loops[0])  # (compiled here: the loops may come from the disk cache)
    scalar = compiled.scalar()
    assert "llvm.prefetch" in scalar.inspect_llvm(scalar.signatures[0])


def test_host_reduction_loops_ask_for_512_bit_vectors():
    """A fused reduction's loops are its kernel's own (rows, lanes, blocks), vectorized where
    that kernel compiles: they ask for 512-bit vectors as the flat loops do
    (``loops.wide_vectors``). LLVM's tuning for AVX-512 Xeons keeps loops to 256 bits otherwise:
    under it (``NUMBA_CPU_NAME=skylake-avx512``) the fused log-likelihood of 10^5 float32 values
    took 404 us against 117 us with the attribute (2-core machine)."""
    f = gf.fuse(lambda x: np.log(x).sum())
    x = np.linspace(1, 2, 1000, dtype=np.float32)
    assert f(x, target="cpu") == pytest.approx(math.fsum(np.log(x.astype(np.float64))), rel=1e-6)
    part = f._compiled_for((x,)).reductions[0]
    kernel = next(iter(part._kernels.values()))
    compiled = kernel.compiled("cpu")
    compiled.inline(kernel.spec.loops[0])  # (compiled here: the loops may come from the disk cache)
    scalar = compiled.scalar()
    ir = scalar.inspect_llvm(scalar.signatures[0])
    assert '"prefer-vector-width"="512"' in ir
    if vecmath.has_avx512(numba.njit(lambda: None).targetctx.codegen()):
        assert max(int(n) for n in re.findall(r"<(\d+) x float>", ir)) == 16
