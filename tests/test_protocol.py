"""The np.ufunc protocol: attributes, keywords, methods and __array_ufunc__ interplay."""

import math
import pickle

import numpy as np
import pytest

import gpufuncs as gf
from gpufuncs.kernels import builtin_names

HOST_TARGETS = ["cpu", "parallel"]


@gf.ufunc(signatures=gf.float_signatures(2), reference=np.hypot, identity=0.0, replace=True)
def proto_hypot(a, b):
    """Hypotenuse, a binary kernel with an identity (for the method tests)."""
    return math.hypot(a, b)


@gf.ufunc(signatures=gf.float_signatures(2), reference=np.maximum, replace=True)
def proto_max(a, b):
    """Binary kernel without an identity."""
    if a != a or b != b:
        return a + b  # NaN in either, like np.maximum
    return a if a >= b else b


# -- 1. attributes ------------------------------------------------------------------------------
def declared_attributes(kernel):
    """(nin, nout, types, signature) as NumPy would give them for the kernel's declaration:
    inputs of the layout (or the function's arguments), one output per layout output, and a
    float16 loop of its own before the declared ones, computed in float32 (as NumPy's are)."""
    spec = kernel.spec
    layout = spec.layout
    nin = len(layout.inputs) if layout else len(spec.arg_names)
    nout = len(layout.outputs) if layout else 1
    types = [c * nin + "->" + c * nout for c in ["e", *(loop.dtype.char for loop in spec.loops)]]
    return nin, nout, types, layout.text if layout else None


@pytest.mark.parametrize("name", builtin_names())
def test_ufunc_attributes(name):
    kernel = gf.registry[name]
    nin, nout, types, signature = declared_attributes(kernel)
    assert (kernel.nin, kernel.nout, kernel.nargs) == (nin, nout, nin + nout)
    assert kernel.types == types and kernel.ntypes == len(types)
    assert kernel.signature == signature
    assert kernel.identity is None
    assert kernel.__name__ in repr(kernel) and types[0] in repr(kernel)
    assert kernel.__doc__ and kernel.__doc__ == kernel.spec.doc


def test_identity_and_repr_lists_compiled_targets():
    assert proto_hypot.identity == 0.0
    proto_hypot(1.0, 2.0, target="cpu")
    assert "cpu" in repr(proto_hypot)


def test_types_match_numpy_format():
    assert set(gf.exp.types) <= set(np.exp.types)


# -- 2. keywords ----------------------------------------------------------------------------------
@pytest.mark.parametrize("target", HOST_TARGETS)
def test_out_as_one_tuple(target):
    x = np.linspace(-1, 1, 7)
    out = np.empty_like(x)
    assert gf.exp(x, out=(out,), target=target) is out
    np.testing.assert_array_equal(out, np.exp(x))


@pytest.mark.parametrize("target", HOST_TARGETS)
def test_where_keeps_out_values(target):
    x = np.linspace(-2, 2, 9)
    mask = x > 0
    out = np.full_like(x, -7.0)
    gf.exp(x, out=out, where=mask, target=target)
    np.testing.assert_array_equal(out[mask], np.exp(x[mask]))
    np.testing.assert_array_equal(out[~mask], -7.0)


def test_where_matches_numpy_for_broadcast_mask():
    x = np.linspace(-2, 2, 12).reshape(3, 4)
    mask = np.array([True, False, True, False])
    ours, theirs = np.zeros_like(x), np.zeros_like(x)
    gf.clamp(x, -1.0, 1.0, out=ours, where=mask)
    np.clip(x, -1.0, 1.0, out=theirs, where=mask)
    np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize("target", HOST_TARGETS)
def test_where_on_gufunc_masks_whole_core_rows(target):
    x = np.array([0.5, 1.5, 2.5])
    out = np.full((3, 4), 9.0)
    gf.hermite_norm(x, 4, out=out, where=np.array([True, False, True]), target=target)
    full = gf.hermite_norm(x, 4)
    np.testing.assert_array_equal(out[[0, 2]], full[[0, 2]])
    np.testing.assert_array_equal(out[1], 9.0)


def test_dtype_selects_the_loop():
    x = np.linspace(0, 1, 5)
    r = gf.exp(x, dtype=np.float32)
    assert r.dtype == np.float32
    np.testing.assert_array_equal(r, gf.exp(x.astype(np.float32)))  # the float32 loop ran
    with pytest.raises(TypeError, match=r"exp: no loop for inputs \(float64\) with dtype=int64"):
        gf.exp(x, dtype=np.int64)


def test_casting_rules_follow_numpy():
    x = np.linspace(0, 1, 5)
    with pytest.raises(TypeError, match="casting='safe'"):
        gf.exp(x, dtype=np.float32, casting="safe")
    with pytest.raises(TypeError, match="int64"):
        gf.exp(x, out=np.empty(5, np.int64))
    out = np.empty(5, np.int64)
    gf.exp(x, out=out, casting="unsafe")
    np.testing.assert_array_equal(out, np.exp(x).astype(np.int64))
    with pytest.raises(ValueError, match="casting must be one of"):
        gf.exp(x, casting="sideways")


def test_order_of_allocated_output():
    x = np.ones((4, 3))
    assert gf.exp(x, order="F").flags.f_contiguous
    assert gf.exp(x, order="C").flags.c_contiguous
    assert gf.exp(np.asfortranarray(x)).flags.f_contiguous  # 'K' keeps the input's layout
    with pytest.raises(ValueError, match="order must be one of"):
        gf.exp(x, order="Z")


def test_unsupported_keywords_are_named():
    with pytest.raises(TypeError, match="subok"):
        gf.exp(1.0, subok=False)
    with pytest.raises(TypeError, match="bogus"):
        gf.exp(1.0, bogus=1)


def test_lists_and_tuples_convert_like_numpy():
    np.testing.assert_array_equal(gf.exp([0.0, 1.0]), np.exp([0.0, 1.0]))
    np.testing.assert_array_equal(gf.clamp((1, 5, 9), 2, 8), np.clip((1, 5, 9), 2, 8))


# -- 3. methods -------------------------------------------------------------------------------------
@pytest.mark.parametrize("target", HOST_TARGETS)
def test_outer_matches_numpy(target):
    a, b = np.linspace(-2, 2, 5), np.linspace(0, 3, 4).reshape(2, 2)
    r = proto_hypot.outer(a, b, target=target)
    assert r.shape == (5, 2, 2)
    np.testing.assert_allclose(r, np.hypot.outer(a, b), rtol=1e-15)


@pytest.mark.parametrize("target", HOST_TARGETS)
@pytest.mark.parametrize("axis", [0, 1, -1, None, (0, 1)])
def test_reduce_matches_numpy(target, axis):
    m = np.arange(12.0).reshape(3, 4) - 5
    np.testing.assert_allclose(proto_hypot.reduce(m, axis=axis, target=target),
                               np.hypot.reduce(m, axis=axis), rtol=1e-15)


def test_reduce_keepdims_initial_and_empty():
    m = np.arange(12.0).reshape(3, 4)
    assert proto_hypot.reduce(m, axis=1, keepdims=True).shape == (3, 1)
    np.testing.assert_allclose(proto_hypot.reduce(m, axis=0, initial=100.0),
                               np.hypot.reduce(m, axis=0, initial=100.0), rtol=1e-15)
    np.testing.assert_array_equal(proto_hypot.reduce(np.zeros((0, 3))), [0.0, 0.0, 0.0])
    with pytest.raises(ValueError):
        proto_max.reduce(np.zeros((0, 3)))  # no identity, nothing to start from


def test_reduce_dtype_rules():
    assert proto_hypot.reduce(np.arange(4, dtype=np.float32)).dtype == np.float32
    assert proto_hypot.reduce(np.arange(4)).dtype == np.float64
    assert proto_hypot.reduce(np.arange(4, dtype=np.float16)).dtype == np.float16
    out = np.empty(())
    assert proto_hypot.reduce(np.arange(4.0), out=out) is out
    assert out == np.hypot.reduce(np.arange(4.0))


def test_accumulate_and_at_match_numpy():
    v = np.array([3.0, 4.0, 12.0, 84.0])
    np.testing.assert_allclose(proto_hypot.accumulate(v), np.hypot.accumulate(v), rtol=1e-15)
    m = np.arange(6.0).reshape(2, 3)
    np.testing.assert_allclose(proto_max.accumulate(m, axis=1), np.maximum.accumulate(m, axis=1))
    ours, theirs = np.zeros(4), np.zeros(4)
    proto_hypot.at(ours, [0, 0, 2], 3.0)
    np.hypot.at(theirs, [0, 0, 2], 3.0)
    np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize("method", ["reduce", "accumulate", "outer", "at"])
@pytest.mark.parametrize("name", [n for n in builtin_names()  # all but binary elementwise kernels
                                  if declared_attributes(gf.registry[n])[:2] != (2, 1)])
def test_methods_the_kernel_cannot_have(name, method):
    kernel = gf.registry[name]
    args = {"reduce": (np.ones(3),), "accumulate": (np.ones(3),), "outer": (np.ones(2), np.ones(2)),
            "at": (np.ones(3), [0], 1.0)}[method]
    with pytest.raises(TypeError, match=f"{kernel.__name__}.{method} is not available"):
        getattr(kernel, method)(*args)


# -- 4. __array_ufunc__ interplay ------------------------------------------------------------------
def test_dask_array_stays_lazy_and_correct():
    da = pytest.importorskip("dask.array")
    x = np.linspace(-3, 3, 100)
    lazy = gf.gaussian(da.from_array(x, chunks=25), 0.0, 1.0)
    assert isinstance(lazy, da.Array)
    np.testing.assert_array_equal(lazy.compute(), gf.gaussian(x, 0.0, 1.0))


def test_dask_gufunc_with_output_only_dimension():
    da = pytest.importorskip("dask.array")
    x = np.linspace(-3, 3, 40)
    lazy = gf.hermite_norm(da.from_array(x, chunks=10), 5)
    assert isinstance(lazy, da.Array) and lazy.shape == (40, 5)
    np.testing.assert_array_equal(lazy.compute(), gf.hermite_norm(x, 5))


def test_dask_rejects_a_target_it_cannot_forward():
    da = pytest.importorskip("dask.array")
    with pytest.raises(TypeError, match="cannot be passed through"):
        gf.exp(da.ones(4, chunks=2), target="parallel")


def test_xarray_keeps_coordinates():
    xr = pytest.importorskip("xarray")
    arr = xr.DataArray(np.linspace(-3, 3, 5), dims=["t"], coords={"t": np.arange(5) * 10})
    r = gf.clamp(arr, -1.0, 1.0)
    assert isinstance(r, xr.DataArray)
    np.testing.assert_array_equal(r.coords["t"], arr.coords["t"])
    np.testing.assert_array_equal(r.values, np.clip(arr.values, -1.0, 1.0))


def test_override_returning_not_implemented_raises_type_error():
    class Refuses:
        def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
            return NotImplemented

    with pytest.raises(TypeError, match="NotImplemented"):
        gf.exp(Refuses())


class Spy:
    """An override that records what its ``__array_ufunc__`` receives, and handles the call."""

    def __init__(self) -> None:
        self.seen: dict = {}

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        self.seen = {"ufunc": ufunc, "method": method, "inputs": inputs, "kwargs": kwargs}
        return "handled"


def test_override_receives_the_kernel_and_keywords():
    spy = Spy()
    assert gf.clamp(spy, 0.0, 1.0, dtype=np.float32) == "handled"
    seen = spy.seen
    assert seen["ufunc"] is gf.clamp and seen["method"] == "__call__"
    assert seen["inputs"] == (spy, 0.0, 1.0) and seen["kwargs"] == {"dtype": np.float32}


def test_kernels_pickle_by_name():
    assert pickle.loads(pickle.dumps(gf.gaussian)) is gf.gaussian


# -- method edge cases (issue 10) -------------------------------------------------------------------
@gf.ufunc(signatures=gf.float_signatures(2), reference=np.fmax, identity=-math.inf, replace=True)
def proto_fmax(a, b):
    """np.fmax with the identity -inf (np.fmax itself has none)."""
    if a != a:
        return b
    if b != b:
        return a
    return a if a >= b else b


def test_reduce_with_where_starts_from_any_declared_identity():
    x = np.array([[1.0, -5.0, 3.0], [2.0, np.nan, -7.0]])
    mask = np.array([True, False, True])
    for axis in (0, 1, None):
        np.testing.assert_array_equal(proto_fmax.reduce(x, axis=axis, where=mask),
                                      np.fmax.reduce(x, axis=axis, where=mask, initial=-np.inf))
    np.testing.assert_array_equal(proto_fmax.reduce(np.zeros((0, 2))), [-np.inf, -np.inf])
    with pytest.raises(ValueError, match="identity"):
        proto_max.reduce(x, where=mask)  # no identity: NumPy's error, naming the kernel


@pytest.mark.parametrize("method", ["reduce", "accumulate"])
def test_out_of_the_wrong_shape_is_refused_and_left_alone(method):
    out = np.full((2, 3), 7.0)
    with pytest.raises(ValueError, match=f"proto_hypot.{method}"):
        getattr(proto_hypot, method)(np.ones((2, 3)), axis=0, out=out if method == "reduce" else out[:1])
    assert (out == 7.0).all()
    with pytest.raises(ValueError):  # a 0-d out= (NumPy 2.4's own accumulate crashes on it)
        proto_hypot.accumulate(np.ones(3), out=np.zeros(()))


def test_zero_d_reduce_and_axis_errors_like_numpy():
    assert proto_hypot.reduce(np.array(3.0)) == np.hypot.reduce(np.array(3.0)) == 3.0
    for method in ("reduce", "accumulate"):
        with pytest.raises(np.exceptions.AxisError, match=f"proto_hypot.{method}: axis 5 is out of bounds"):
            getattr(proto_hypot, method)(np.ones(3), axis=5)
    with pytest.raises(TypeError, match="cannot accumulate on a scalar"):
        proto_hypot.accumulate(np.array(1.0))


@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
def test_methods_keep_subclasses_like_numpy():
    m = np.ma.masked_array([[3.0, 4.0], [5.0, 12.0]], mask=[[False, True], [False, False]])
    for method in ("reduce", "accumulate"):
        ours, theirs = getattr(proto_hypot, method)(m, axis=0), getattr(np.hypot, method)(m, axis=0)
        assert type(ours) is type(theirs)
        np.testing.assert_array_equal(np.ma.getmaskarray(ours), np.ma.getmaskarray(theirs))
        np.testing.assert_allclose(ours.data, theirs.data, rtol=1e-15)
    outer = proto_hypot.outer(m[0], np.ones(2))
    assert type(outer) is np.ma.MaskedArray
    np.testing.assert_array_equal(outer.mask, np.hypot.outer(m[0], np.ones(2)).mask)
    with pytest.raises(TypeError, match="matrix"):
        proto_hypot.outer(np.asmatrix(np.ones((1, 2))), np.ones(2))


def test_float16_reduce_accumulates_in_float32_a_deliberate_difference():
    """The float16 loop computes in float32; reduce keeps the float32 partial results and rounds
    once at the end (NumPy's float16 loops round every step, except add's within a buffer)."""
    x = np.linspace(1, 2, 50, dtype=np.float16)
    r = proto_hypot.reduce(x)
    assert r.dtype == np.float16
    assert r == proto_hypot.reduce(x.astype(np.float32)).astype(np.float16)


def test_at_refuses_integer_arrays_a_deliberate_difference():
    """NumPy stores the float result into integers, truncating it silently."""
    ints = np.zeros(3, np.int64)
    with pytest.raises(TypeError, match=r"proto_hypot\.at: the array's dtype int64 is not floating"):
        proto_hypot.at(ints, [0], 1.5)
    np.hypot.at(ints, [0], 1.5)
    assert ints[0] == 1
    half = np.zeros(3, np.float16)
    proto_hypot.at(half, [0, 0], 0.1)  # float16 reads b as float16, as np.hypot.at does
    theirs = np.zeros(3, np.float16)
    np.hypot.at(theirs, [0, 0], 0.1)
    np.testing.assert_array_equal(half, theirs)


@pytest.mark.parametrize("method", ["reduce", "accumulate", "outer", "at"])
def test_methods_defer_to_dask_like_numpy(method):
    """Dask implements no ufunc method but outer (and that one only for NumPy's own ufuncs, by
    name): NumPy raises TypeError for a ufunc of this name, and so does the kernel, naming it."""
    da = pytest.importorskip("dask.array")
    lazy = da.ones((2, 2), chunks=1)
    args = {"reduce": (lazy,), "accumulate": (lazy,), "outer": (lazy, lazy), "at": (lazy, [0], 1.0)}[method]
    with pytest.raises(TypeError, match=f"proto_hypot.{method}: operand types .* NotImplemented"):
        getattr(proto_hypot, method)(*args)
    with pytest.raises(TypeError, match="NotImplemented"):
        getattr(gf.get("proto_hypot", "cpu").ufunc, method)(*args)


@pytest.mark.parametrize("method", ["reduce", "accumulate", "outer"])
def test_methods_defer_to_xarray_like_numpy(method):
    xr = pytest.importorskip("xarray")
    arr = xr.DataArray(np.ones((2, 2)), dims=["a", "b"])
    args = (arr, arr) if method == "outer" else (arr,)
    with pytest.raises(NotImplementedError, match=f"{method} method for ufunc <gpufuncs ufunc 'proto_hypot'"):
        getattr(proto_hypot, method)(*args)
    with pytest.raises(NotImplementedError, match=f"{method} method for ufunc <ufunc 'hypot'>"):
        getattr(np.hypot, method)(*args)


def test_methods_receive_numpys_keywords_through_the_protocol():
    spy, out = Spy(), np.zeros(2)
    assert proto_hypot.reduce(spy, axis=1, out=out, keepdims=True) == "handled"
    assert spy.seen == {"ufunc": proto_hypot, "method": "reduce", "inputs": (spy,),
                    "kwargs": {"axis": 1, "keepdims": True, "out": (out,)}}
    with pytest.raises(TypeError, match="target='cpu' cannot be passed through Spy"):
        proto_hypot.reduce(spy, target="cpu")
