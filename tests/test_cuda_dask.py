"""Dask arrays of CuPy chunks on the cuda target (marked ``cuda``: run with ``pytest -m cuda``
on a GPU machine): lazy, chunk by chunk, CuPy in and CuPy out, locally and on a one-worker
``LocalCluster``."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
from test_cuda import _copy_counters

import gpufuncs as gf
from gpufuncs.testing import compare

pytestmark = pytest.mark.cuda

da = pytest.importorskip("dask.array")
X = np.linspace(-3.0, 3.0, 100_000)


@pytest.fixture(scope="module")
def cp():
    return pytest.importorskip("cupy")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cupy_chunks_run_on_the_device_and_stay_cupy(monkeypatch, cp, dtype):
    x = da.from_array(cp.asarray(X.astype(dtype)), chunks=25_000, asarray=False)
    result = gf.gaussian(x, 0.5, 1.5)
    assert type(result._meta) is cp.ndarray and result.dtype == dtype
    assert result.chunks == x.chunks
    expected = gf.gaussian(cp.asarray(X.astype(dtype)), 0.5, 1.5)
    result.compute()  # compiled and warmed up
    calls = _copy_counters(monkeypatch, cp, pytest.importorskip("torch"))
    computed = result.compute()
    assert calls == []  # no host round trip
    assert type(computed) is cp.ndarray
    assert bool(cp.all(computed == expected))


def test_hermite_norm_on_cupy_chunks(cp):
    x = da.from_array(cp.asarray(X[:4000]), chunks=1000, asarray=False)
    result = gf.hermite_norm(x, 8)
    assert type(result._meta) is cp.ndarray and result.chunks == (x.chunks[0], (8,))
    computed = result.compute()
    assert type(computed) is cp.ndarray
    compare(gf.hermite_norm, (X[:4000], 8), computed.get(), target="cuda")  # its declared tolerance


_CLUSTER = textwrap.dedent("""
    import cupy as cp, numpy as np, dask.array as da, gpufuncs as gf
    from dask.distributed import Client, LocalCluster

    if __name__ == "__main__":
        with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None,
                          host="127.0.0.1") as cluster, Client(cluster) as client:
            x = np.linspace(-3, 3, 200_000, dtype=np.float32)
            dx = da.from_array(cp.asarray(x), chunks=50_000, asarray=False)
            got = gf.gaussian(dx, 0.5, 1.5).compute()
            assert type(got) is cp.ndarray, type(got)
            assert bool(cp.all(got == gf.gaussian(cp.asarray(x), 0.5, 1.5)))
            print("cluster cupy ok")
""")


def test_cupy_chunks_on_a_one_worker_local_cluster():
    pytest.importorskip("distributed")
    done = subprocess.run([sys.executable, "-c", _CLUSTER], capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    assert done.stdout.decode().split()[-3:] == ["cluster", "cupy", "ok"]
