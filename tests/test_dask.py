"""Past one machine: Dask arrays (lazy, chunk by chunk), a distributed cluster of processes,
xarray and pandas. Every result is compared with the same kernel on the NumPy data."""

from __future__ import annotations

import math
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import gpufuncs as gf

da = pytest.importorskip("dask.array")
xr = pytest.importorskip("xarray")
pd = pytest.importorskip("pandas")

X = np.linspace(-3.0, 3.0, 1000)


def _tasks(result) -> int:
    """Tasks of the layer that made ``result`` (one per output chunk when nothing was fused)."""
    return len(result.__dask_graph__().layers[result.name])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dask_array_in_gives_a_lazy_dask_array_with_one_task_per_chunk(dtype):
    x = da.from_array(X.astype(dtype), chunks=250)
    result = gf.gaussian(x, 0.5, 1.5)
    assert isinstance(result, da.Array)
    assert (result.chunks, result.dtype, result.shape) == (x.chunks, np.dtype(dtype), x.shape)
    assert type(result._meta) is np.ndarray and result._meta.dtype == dtype
    assert _tasks(result) == x.npartitions
    np.testing.assert_array_equal(result.compute(), gf.gaussian(X.astype(dtype), 0.5, 1.5))


def test_dask_broadcasts_dask_numpy_and_scalar_operands_as_dask_does():
    x = da.from_array(X.reshape(10, 100), chunks=(5, 50))
    x0 = np.linspace(-1.0, 1.0, 100)  # a NumPy array broadcast along the rows
    sigma = da.from_array(np.linspace(0.5, 2.0, 10).reshape(10, 1), chunks=(5, 1))
    result = gf.gaussian(x, x0, sigma)
    assert result.chunks == ((5, 5), (50, 50))
    expected = gf.gaussian(X.reshape(10, 100), x0, np.linspace(0.5, 2.0, 10).reshape(10, 1))
    np.testing.assert_array_equal(result.compute(), expected)
    np.testing.assert_array_equal(gf.clamp(x, -1.0, 1.0).compute(), np.clip(X.reshape(10, 100), -1, 1))


def test_hermite_norm_on_dask_adds_the_order_axis_as_one_chunk():
    x = da.from_array(X, chunks=300)
    result = gf.hermite_norm(x, 6)
    assert result.chunks == (x.chunks[0], (6,))
    assert result.dtype == np.float64 and _tasks(result) == x.npartitions
    np.testing.assert_array_equal(result.compute(), gf.hermite_norm(X, 6))


def test_out_given_a_dask_array_is_a_clear_error_and_changes_nothing():
    x = da.from_array(X, chunks=250)
    out = da.zeros(X.shape, chunks=250)
    name = out.name
    for given in (x, X):  # a Dask input, and a NumPy input with a Dask out=
        with pytest.raises(TypeError, match=r"^exp: out= cannot be a Dask array"):
            gf.exp(given, out=out)
        with pytest.raises(TypeError, match=r"^hermite_norm: out= cannot be a Dask array"):
            gf.hermite_norm(given, 3, out=da.zeros((X.size, 3), chunks=250))
    assert out.name == name  # not rebound
    np.testing.assert_array_equal(out.compute(), np.zeros(X.shape))


@pytest.mark.parametrize("dtype", [np.complex128, np.longdouble, "U3"])
def test_a_bad_dask_dtype_fails_when_the_graph_is_built_with_the_numpy_error(dtype):
    with pytest.raises(TypeError) as numpy_error:
        gf.gaussian(np.ones(4, dtype=dtype), 0.0, 1.0)
    with pytest.raises(TypeError) as dask_error:
        gf.gaussian(da.ones(4, dtype=dtype, chunks=2), 0.0, 1.0)
    assert str(dask_error.value) == str(numpy_error.value)


def test_xarray_keeps_coordinates_and_attributes():
    arr = xr.DataArray(X[:50].reshape(5, 10), dims=("t", "s"),
                       coords={"t": np.arange(5), "s": np.arange(10) * 0.5}, attrs={"units": "m"})
    direct = gf.gaussian(arr, 0.0, 1.0)
    applied = xr.apply_ufunc(gf.gaussian, arr.chunk({"t": 2}), 0.0, 1.0, dask="parallelized",
                             keep_attrs=True)
    expected = gf.gaussian(arr.values, 0.0, 1.0)
    for result in (direct, applied):
        assert isinstance(result, xr.DataArray) and result.dims == ("t", "s")
        assert result.coords.equals(arr.coords) and result.attrs == {"units": "m"}
        np.testing.assert_array_equal(result.values, expected)
    assert isinstance(applied.data, da.Array)


def test_xarray_hermite_norm_through_apply_ufunc_adds_a_named_dimension():
    arr = xr.DataArray(X[:40], dims="t", coords={"t": np.arange(40)}).chunk({"t": 10})
    result = xr.apply_ufunc(gf.hermite_norm, arr, 5, output_core_dims=[["order"]],
                            dask="parallelized", output_dtypes=[np.float64],
                            dask_gufunc_kwargs={"output_sizes": {"order": 5}})
    assert result.dims == ("t", "order") and result.sizes["order"] == 5
    assert result.data.chunks == ((10, 10, 10, 10), (5,))
    np.testing.assert_array_equal(result.values, gf.hermite_norm(X[:40], 5))


@pytest.mark.parametrize("name, extra", [("gaussian", (0.5, 1.5)), ("exp", ()), ("clamp", (-1.0, 1.0))])
def test_pandas_in_gives_pandas_out_with_the_index(name, extra):
    kernel = gf.registry[name]
    series = pd.Series(X[:6], index=list("abcdef"), name="x")
    frame = pd.DataFrame({"p": X[:3], "q": X[3:6]}, index=list("uvw"))
    result = kernel(series, *extra)
    assert isinstance(result, pd.Series) and result.index.equals(series.index)
    np.testing.assert_array_equal(result.to_numpy(), kernel(X[:6], *extra))
    result = kernel(frame, *extra)
    assert isinstance(result, pd.DataFrame) and result.index.equals(frame.index)
    assert list(result.columns) == ["p", "q"]
    np.testing.assert_array_equal(result.to_numpy(), kernel(frame.to_numpy(), *extra))


def test_pandas_series_hermite_norm_gives_a_frame_with_the_index():
    series = pd.Series(X[:6], index=list("abcdef"))
    result = gf.hermite_norm(series, 4)
    assert isinstance(result, pd.DataFrame) and result.index.equals(series.index)
    np.testing.assert_array_equal(result.to_numpy(), gf.hermite_norm(X[:6], 4))


# -- pickling: by reference where an import finds the kernel, by value otherwise -----------------
def test_builtin_kernels_pickle_by_reference():
    from gpufuncs.kernels import builtin_names

    for name in builtin_names():
        payload = pickle.dumps(gf.registry[name])
        assert pickle.loads(payload) is gf.registry[name]
        assert len(payload) < 100  # a module and a name, not the declaration


def test_a_kernel_made_where_no_import_finds_it_pickles_by_value(restore_registry):
    cloudpickle = pytest.importorskip("cloudpickle")

    def make():
        @gf.ufunc(signatures=gf.float_signatures(1), reference=lambda x: x**3, name="dask_cube")
        def cube(x):
            return x * x * x
        return cube

    kernel = make()
    payload = cloudpickle.dumps(kernel)
    assert pickle.loads(payload) is kernel  # one object per process
    code = ("import pickle, sys, numpy as np\n"
            "k = pickle.loads(sys.stdin.buffer.read())\n"
            "assert pickle.loads(pickle.dumps(k)) is k\n"
            "print(k.__name__, k(np.arange(4.0)).tolist())")
    done = subprocess.run([sys.executable, "-c", code], input=payload, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().split() == ["dask_cube", "[0.0,", "1.0,", "8.0,", "27.0]"]


_CLUSTER_SCRIPT = textwrap.dedent("""
    import numpy as np, dask.array as da, gpufuncs as gf
    from dask.distributed import Client, LocalCluster

    # Defined in __main__ with no file behind it: workers can import neither it nor its module.
    @gf.ufunc(signatures=gf.float_signatures(2), reference=lambda a, b: a * a + b)
    def square_plus(a, b):
        return a * a + b

    def compiled_kernel_ids():
        k = gf.registry["square_plus"]
        return id(k), list(k._compiled)

    if __name__ == "__main__":
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                          host="127.0.0.1") as cluster, Client(cluster) as client:
            x = np.linspace(-2, 2, 4000)
            dx = da.from_array(x, chunks=500)
            got = square_plus(dx, 1.5).compute()
            np.testing.assert_array_equal(got, square_plus(x, 1.5))
            first = client.run(compiled_kernel_ids)
            np.testing.assert_array_equal(gf.gaussian(dx, 0.5, 2.0).compute(), gf.gaussian(x, 0.5, 2.0))
            np.testing.assert_array_equal(gf.hermite_norm(dx, 3).compute(), gf.hermite_norm(x, 3))
            np.testing.assert_array_equal(square_plus(dx, -1.0).compute(), square_plus(x, -1.0))
            second = client.run(compiled_kernel_ids)
            assert first == second, (first, second)  # the same kernel object, compiled once
            assert all(ids[1] == ["cpu"] for ids in first.values()), first
            cuda_blocks = dx.map_blocks(lambda b: gf.gaussian(b, 0.0, 1.0, target="cuda"), dtype=x.dtype)
            from gpufuncs.targets import get_target
            reason = get_target("cuda").unavailable_reason()
            try:
                cuda_blocks.compute()
                assert reason is None, "computed on cuda without a GPU"
            except gf.CudaUnavailableError as exc:
                assert reason is not None and reason in str(exc), exc
            print("workers", len(first), "ok")
""")


@pytest.mark.slow
def test_distributed_local_cluster_runs_builtin_and_main_defined_kernels():
    pytest.importorskip("distributed")
    # ``-c``: a __main__ without a file, as in a notebook; spawned workers cannot re-run it.
    done = subprocess.run([sys.executable, "-c", _CLUSTER_SCRIPT], capture_output=True, timeout=240)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    assert done.stdout.decode().split()[-3:] == ["workers", "2", "ok"]


@pytest.mark.parametrize("method", ["reduce", "accumulate", "outer"])
def test_ufunc_methods_on_dask_raise_what_a_numpy_ufunc_of_ours_raises(hypot_kernel, method):
    # A real numpy.ufunc with the same loops (Numba's) is what NumPy compares with: Dask
    # implements these methods only for NumPy's own ufuncs and returns NotImplemented.
    import numba

    numpy_ufunc = numba.vectorize(["float32(float32, float32)", "float64(float64, float64)"])(
        lambda a, b: math.sqrt(a * a + b * b))
    x = da.ones((4, 4), chunks=2)
    args = (x, x) if method == "outer" else (x,)
    with pytest.raises(TypeError, match="NotImplemented"):
        getattr(numpy_ufunc, method)(*args)
    with pytest.raises(TypeError, match=rf"{hypot_kernel.__name__}\.{method}: .*NotImplemented"):
        getattr(hypot_kernel, method)(*args)
