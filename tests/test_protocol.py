"""The np.ufunc protocol: attributes, keywords, methods and __array_ufunc__ interplay."""

import math
import pickle

import numpy as np
import pytest

import gpufuncs as gf

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
@pytest.mark.parametrize(
    ("kernel", "nin", "nout", "types", "signature"),
    [
        # float16 is a loop of its own, computed in float32 (as NumPy's float16 loops are).
        (gf.gaussian, 3, 1, ["eee->e", "fff->f", "ddd->d"], None),
        (gf.exp, 1, 1, ["e->e", "f->f", "d->d"], None),
        (gf.clamp, 3, 1, ["eee->e", "fff->f", "ddd->d"], None),
        (gf.hermite_norm, 1, 1, ["e->e", "f->f", "d->d"], "()->(n)"),
    ],
)
def test_ufunc_attributes(kernel, nin, nout, types, signature):
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
    with pytest.raises(TypeError, match="not a floating dtype"):
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
@pytest.mark.parametrize("kernel", [gf.gaussian, gf.exp, gf.hermite_norm])
def test_methods_the_kernel_cannot_have(kernel, method):
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


def test_override_receives_the_kernel_and_keywords():
    seen = {}

    class Spy:
        def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
            seen.update(ufunc=ufunc, method=method, inputs=inputs, kwargs=kwargs)
            return "handled"

    spy = Spy()
    assert gf.clamp(spy, 0.0, 1.0, dtype=np.float32) == "handled"
    assert seen["ufunc"] is gf.clamp and seen["method"] == "__call__"
    assert seen["inputs"] == (spy, 0.0, 1.0) and seen["kwargs"] == {"dtype": np.float32}


def test_kernels_pickle_by_name():
    assert pickle.loads(pickle.dumps(gf.gaussian)) is gf.gaussian
