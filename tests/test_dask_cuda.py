"""dask-cuda's ``LocalCUDACluster``: one worker per GPU, CuPy-chunked Dask arrays made on the
workers, gpufuncs kernels run on every worker's own GPU and the results stay CuPy (marked
``cuda``; the two-GPU case also ``multigpu``). Each case runs in a subprocess, since a cluster's
workers are processes that re-import their ``__main__``."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.cuda

_SCRIPT = textwrap.dedent("""
    import json, sys
    import cupy as cp, dask, dask.array as da, numpy as np
    from dask.distributed import Client, wait
    from dask_cuda import LocalCUDACluster
    import gpufuncs as gf
    from gpufuncs.testing import compare

    CHUNK, CHUNKS = 50_000, 8

    def block(i):  # made on the worker, on its GPU
        return cp.linspace(-4, 4, CHUNK * CHUNKS, dtype=cp.float32)[i * CHUNK:(i + 1) * CHUNK]

    def held(dask_worker):  # what each worker keeps, and on which GPU
        return {"types": sorted({type(v).__module__ + "." + type(v).__name__
                                 for v in dask_worker.data.values()}),
                "keys": len(dask_worker.data), "gpu": cp.cuda.Device().pci_bus_id}

    if __name__ == "__main__":
        gpus = sys.argv[1]
        with LocalCUDACluster(CUDA_VISIBLE_DEVICES=gpus, threads_per_worker=1,
                              dashboard_address=None) as cluster, Client(cluster) as client:
            parts = [da.from_delayed(dask.delayed(block)(i), (CHUNK,), dtype="float32",
                                     meta=cp.empty(0, cp.float32)) for i in range(CHUNKS)]
            x = client.persist(da.concatenate(parts))
            pdf = gf.gaussian(x, 0.5, 1.5)
            assert type(pdf._meta) is cp.ndarray and pdf.dtype == np.float32, pdf
            kept = client.persist(pdf)
            wait(kept)
            workers = client.run(held)
            got = kept.compute()
            assert type(got) is cp.ndarray, type(got)
            host = np.linspace(-4, 4, CHUNK * CHUNKS, dtype=np.float32)
            # bit for bit the one-process call on the client's GPU (the same compiled code)
            assert bool(cp.all(got == gf.gaussian(cp.asarray(host), 0.5, 1.5)))
            compare(gf.gaussian, (host, 0.5, 1.5), got.get(), target="cuda")
            total = float(client.compute(pdf.sum()).result())
            expected = float(gf.gaussian(host.astype(np.float64), 0.5, 1.5).sum())
            assert abs(total - expected) <= 1e-5 * expected, (total, expected)
            print(json.dumps(list(workers.values())))
""")


@pytest.mark.parametrize("gpus", ["0", pytest.param("0,1", marks=pytest.mark.multigpu)])
def test_kernels_run_on_every_workers_gpu_and_stay_cupy(gpus):
    pytest.importorskip("cupy")
    pytest.importorskip("dask_cuda")
    done = subprocess.run([sys.executable, "-c", _SCRIPT, gpus], capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    workers = json.loads(done.stdout.decode().splitlines()[-1])
    assert len(workers) == len(gpus.split(","))
    assert len({w["gpu"] for w in workers}) == len(workers)  # one GPU each, all different
    for worker in workers:  # every worker took part, and kept only CuPy arrays
        assert worker["keys"] > 0 and worker["types"] == ["cupy.ndarray"], workers
