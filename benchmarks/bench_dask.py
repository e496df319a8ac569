"""Dask benchmark: gpufuncs in a ``LocalCluster`` of processes, against the same machine's
threads-only ``parallel`` target and against Dask's own NumPy expressions on the same cluster.

Run ``python benchmarks/bench_dask.py`` (defaults: gaussian on 10^9 float64 samples and a
10^8 x 32 Hermite expansion, one single-threaded worker per core; ``--quick`` for 10^7 and 10^6).
Each case builds the result from a persisted input and persists it (every chunk computed and
kept, nothing gathered), median of ``--repeat`` runs after a warm-up; peak memory is the largest
peak resident set of one worker during the case (``VmHWM``, reset before it), and the sum over
workers. Workers run with ``NUMBA_NUM_THREADS=1``, as Dask itself sets ``OMP_NUM_THREADS=1``:
one thread per worker process, not one pool per worker each as large as the machine.
The table is printed; ``--save`` writes it as ``benchmarks/results/<name>.{txt,json}``
(:func:`harness.save_results`; ``--save DIR``: into ``DIR``). Needs the ``dask`` extra.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

try:  # named at the start, with the extra that installs it, rather than a traceback
    import dask
    import dask.array as da
    import distributed
    from distributed import Client, LocalCluster, futures_of, wait
except ImportError as exc:
    raise SystemExit(f"bench_dask needs {exc.name}, which is not installed: "
                     'python -m pip install ".[dask]" (the dask extra)') from None

import gpufuncs as gf

try:  # run as a script or as a module
    from harness import add_save_argument, format_table, machine_info, measure, not_saved_hint, save_results
except ImportError:
    from .harness import add_save_argument, format_table, machine_info, measure, not_saved_hint, save_results

COLUMNS = ("case", "n", "how", "seconds", "x_parallel", "x_numpy_dask", "peak_worker_MB", "sum_workers_MB")
X0, SIGMA = 0.5, 1.5


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:  # "5": reset the peak resident set (VmHWM)
        f.write("5")


def _peak_mb() -> float:
    with open("/proc/self/status") as f:
        line = next(line for line in f if line.startswith("VmHWM"))
    return int(line.split()[1]) / 1024


def _numpy_gaussian(x: Any) -> Any:
    return np.exp(-0.5 * ((x - X0) / SIGMA) ** 2) / (SIGMA * math.sqrt(2 * math.pi))


def _numpy_hermite(block: np.ndarray, orders: int) -> np.ndarray:
    scale = 1 / np.sqrt([float(math.factorial(k)) for k in range(orders)])
    return np.polynomial.hermite_e.hermevander(block, orders - 1) * scale


def _time_cluster(client: Client, make: Callable[[], da.Array], repeat: int) -> tuple[float, float, float]:
    """Median seconds to persist ``make()``, and the worst and summed worker peaks (MB)."""
    times, peaks = [], []
    for _ in range(repeat + 1):  # the first run warms up (compiles in every worker)
        client.run(_reset_peak)
        start = time.perf_counter()
        result = make().persist()
        wait(result)
        failed = [f for f in futures_of(result) if f.status != "finished"]
        if failed:
            raise RuntimeError(f"{len(failed)} tasks failed: {failed[0].exception()!r}")
        times.append(time.perf_counter() - start)
        peaks.append(list(client.run(_peak_mb).values()))
        del result
    worst = max(peaks[1:], key=max)
    return statistics.median(times[1:]), max(worst), sum(worst)


def bench(client: Client, name: str, n: int, orders: int, chunk: int, repeat: int) -> list[dict[str, Any]]:
    x = da.random.default_rng(0).standard_normal(n, chunks=chunk).persist()
    wait(x)
    if name == "gaussian":
        ours, numpy_expr = (lambda: gf.gaussian(x, X0, SIGMA)), (lambda: _numpy_gaussian(x))
        local = lambda xs: gf.gaussian(xs, X0, SIGMA, target="parallel")  # noqa: E731
    else:
        ours = lambda: gf.hermite_norm(x, orders)  # noqa: E731
        numpy_expr = lambda: x.map_blocks(_numpy_hermite, orders, new_axis=1,  # noqa: E731
                                          chunks=(x.chunks[0], (orders,)), dtype=x.dtype)
        local = lambda xs: gf.hermite_norm(xs, orders, target="parallel")  # noqa: E731
    t_ours, peak, total = _time_cluster(client, ours, repeat)
    t_numpy, peak_np, total_np = _time_cluster(client, numpy_expr, repeat)
    x_local = x.compute()
    t_local = measure(lambda: local(x_local), warmup=1, repeat=repeat, inner=1)
    label = name if name == "gaussian" else f"hermite_norm {orders} orders"
    rows = [
        {"how": "gpufuncs on the cluster", "seconds": t_ours, "x_parallel": t_ours / t_local,
         "x_numpy_dask": t_ours / t_numpy, "peak_worker_MB": peak, "sum_workers_MB": total},
        {"how": "NumPy expression on the cluster", "seconds": t_numpy, "x_parallel": t_numpy / t_local,
         "x_numpy_dask": 1.0, "peak_worker_MB": peak_np, "sum_workers_MB": total_np},
        {"how": "parallel target, threads only", "seconds": t_local, "x_parallel": 1.0,
         "x_numpy_dask": t_local / t_numpy, "peak_worker_MB": None, "sum_workers_MB": None},
    ]
    return [{"case": label, "n": n, **row} for row in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="10^7 and 10^6 samples")
    parser.add_argument("--workers", type=int, default=os.cpu_count())
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--name", default=None, help="result file name (default dask-<cores>core)")
    add_save_argument(parser)
    args = parser.parse_args()
    n_gauss, n_herm = (10**7, 10**6) if args.quick else (10**9, 10**8)
    orders = 32
    dask.config.set({"distributed.worker.memory.target": False, "distributed.worker.memory.spill": False,
                     "distributed.worker.memory.pause": False,
                     # set before a worker starts, so that Numba reads it when it is imported
                     "distributed.nanny.pre-spawn-environ.NUMBA_NUM_THREADS": "1"})
    with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True, memory_limit=0,
                      dashboard_address=None, host="127.0.0.1") as cluster, \
            Client(cluster) as client:
        rows = [row for name, n in (("gaussian", n_gauss), ("hermite_norm", n_herm))
                for row in bench(client, name, n, orders, max(n // (4 * args.workers), 1), args.repeat)]
    print(format_table(rows, COLUMNS))
    meta = machine_info({"workers": f"{args.workers} processes x 1 thread", "dask": dask.__version__,
                         "distributed": distributed.__version__, "dtype": "float64",
                         "method": "persist a persisted input's result; median of "
                                   f"{args.repeat} after a warm-up"})
    name = args.name or f"dask-{os.cpu_count()}core"
    print("saved", save_results(name, rows, COLUMNS, meta, args.save) if args.save else not_saved_hint())


if __name__ == "__main__":
    main()
