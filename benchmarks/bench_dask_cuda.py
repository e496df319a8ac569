"""Several GPUs with Dask: gpufuncs on CuPy-chunked Dask arrays in dask-cuda's
``LocalCUDACluster``, the same graphs on two GPUs against one.

Run ``python benchmarks/bench_dask_cuda.py`` on a machine with two or more GPUs (needs CuPy and
``dask-cuda``). Two clusters run side by side: one worker on GPU 0, and one worker on each of GPUs
0 and 1. Both hold the same input, ``--n`` float32 standard normal values (default 10^9) in
``--chunks`` CuPy chunks made on the workers and persisted there. Each case is timed on both
clusters, their repetitions interleaved, median of ``--repeat`` after a warm-up:

* **gaussian, kept on the workers**: ``gf.gaussian(x, 0.5, 1.5)`` persisted (every chunk
  computed on its worker's GPU and kept there, nothing gathered); target >= 1.8x on two GPUs;
* **gaussian, then a sum back**: the same densities summed, one number brought to the client;
* **CuPy's expression, then a sum back**: the density written as a Dask expression on the CuPy
  chunks, the anchor a user already has;
* **floor**: the same number of tasks that return their chunk untouched (no GPU work): what the
  scheduler costs a graph of this shape, which no GPU can take away; and the same for the sum,
  each task giving one value to sum;
* **Monte Carlo**: ``--monte-carlo-n`` values (default 10^10) made by Dask's CuPy-backed
  generator, their densities and their sum, each chunk made, used and summed in one task: a
  graph of the same shape whose GPU work is larger than the scheduler's floor;
* **GPU time alone**: the gaussian calls on every chunk in this process on GPU 0, synchronized,
  without Dask: the work that two GPUs can split.

The table is printed; ``--save`` writes it as ``benchmarks/results/dask-cuda-<gpu>.{txt,json}``
(``--save DIR``: into ``DIR``) when two GPUs took part.
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
import time
from collections.abc import Callable
from typing import Any

try:
    import cupy as cp
    import dask
    import dask.array as da
    import dask_cuda
    import distributed
    from dask_cuda import LocalCUDACluster
    from distributed import Client, wait
except ImportError as exc:
    raise SystemExit(f"bench_dask_cuda needs {exc.name}, which is not installed: python -m pip install "
                     '"gpufuncs[dask-cuda]" (the dask-cuda extra; CuPy: cupy-cuda12x)') from None

import numpy as np

import gpufuncs as gf

try:  # run as a script or as a module
    from harness import add_save_argument, format_table, machine_info, not_saved_hint, save_results
except ImportError:
    from .harness import add_save_argument, format_table, machine_info, not_saved_hint, save_results

COLUMNS = ("case", "n", "chunks", "seconds_two", "seconds_one", "speedup", "target")
X0, SIGMA = 0.5, 1.5


def _normal_chunk(size: int, seed: int) -> Any:
    return cp.random.default_rng(seed).standard_normal(size, dtype=cp.float32)


def normal_input(n: int, chunks: int) -> da.Array:
    """``n`` float32 standard normal values in ``chunks`` CuPy chunks, each made by a task."""
    parts = [da.from_delayed(dask.delayed(_normal_chunk)(size, seed), (size,), dtype="float32",
                             meta=cp.empty(0, cp.float32)) for seed, size in enumerate(_sizes(n, chunks))]
    return da.concatenate(parts)


def _sizes(n: int, chunks: int) -> list[int]:
    return [n * (i + 1) // chunks - n * i // chunks for i in range(chunks)]


def _expression(x: Any) -> Any:
    return da.exp(-0.5 * ((x - X0) / SIGMA) ** 2) / (SIGMA * math.sqrt(2 * math.pi))


def _same(block: Any) -> Any:
    return block


def _first(block: Any) -> Any:
    return block[:1]


def _monte_carlo(n: int, chunks: int) -> da.Array:
    """``n`` float32 standard normal values made by Dask's CuPy-backed generator, each chunk in
    the task that uses it (no persisted input): blockwise, so Dask fuses making a chunk, its
    densities and its partial sum into one task."""
    rng = da.random.default_rng(cp.random.default_rng(1))
    return gf.gaussian(rng.standard_normal(n, chunks=-(-n // chunks), dtype=np.float32), X0, SIGMA)


Run = Callable[[Client, da.Array], Any]


def cases(n: int, monte_carlo_n: int, chunks: int) -> dict[str, tuple[Run, str, int]]:
    """Each case: run it on a client and that client's persisted input (returns once done), its
    target, and the values it computes."""
    def persisted(make: Callable[[da.Array], da.Array]) -> Run:
        def run(client: Client, x: da.Array) -> None:
            with client.as_current():  # wait() looks for the current client
                wait(client.persist(make(x)))
        return run

    def summed(make: Callable[[da.Array], da.Array]) -> Run:
        return lambda client, x: float(client.compute(make(x).sum()).result())

    one_each = lambda x: x.map_blocks(_first, chunks=((1,) * x.numblocks[0],))  # noqa: E731
    return {
        "gaussian, kept on the workers": (persisted(lambda x: gf.gaussian(x, X0, SIGMA)), ">= 1.8", n),
        "floor: the same tasks, no GPU work": (persisted(lambda x: x.map_blocks(_same)), "(bound)", n),
        "gaussian, then a sum back": (summed(lambda x: gf.gaussian(x, X0, SIGMA)), "", n),
        "CuPy's expression, then a sum back": (summed(_expression), "(anchor)", n),
        "floor: the same sum of one value a chunk": (summed(one_each), "(bound)", n),
        f"Monte Carlo: {monte_carlo_n:.0e} values made, gaussian, summed, in each task":
            (summed(lambda x: _monte_carlo(monte_carlo_n, chunks)), "", monte_carlo_n),
    }


def interleaved(run: Run, on: tuple[tuple[Client, da.Array], ...],
                repeat: int) -> tuple[float, ...]:
    """Median seconds of ``run`` on each (client, input) after a warm-up, the two alternated."""
    times: tuple[list[float], ...] = tuple([] for _ in on)
    for client, x in on:
        run(client, x)
    for r in range(repeat):
        for which in (range(len(on)) if r % 2 == 0 else reversed(range(len(on)))):
            start = time.perf_counter()
            run(*on[which])
            times[which].append(time.perf_counter() - start)
    return tuple(statistics.median(t) for t in times)


def gpu_alone(n: int, chunks: int, repeat: int) -> float:
    """Seconds of the gaussian calls on every chunk on GPU 0 in this process, synchronized."""
    parts = [_normal_chunk(size, seed) for seed, size in enumerate(_sizes(n, chunks))]
    outs = [cp.empty_like(part) for part in parts]

    def calls() -> None:
        for part, out in zip(parts, outs):
            gf.gaussian(part, X0, SIGMA, out=out)
        cp.cuda.get_current_stream().synchronize()

    calls()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        calls()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _cluster(gpus: str) -> LocalCUDACluster:
    # no spilling: the chunks stay on the GPU, as a user who sized the cluster would have them
    return LocalCUDACluster(CUDA_VISIBLE_DEVICES=gpus, threads_per_worker=1, dashboard_address=":0",
                            device_memory_limit=0, memory_limit=0, protocol="tcp")


def bench(n: int, chunks: int, monte_carlo_n: int, repeat: int) -> list[dict[str, Any]]:
    """Every case on two GPUs against one, and the GPU time alone."""
    with _cluster("0,1") as two, Client(two, set_as_default=False) as on_two, \
            _cluster("0") as one, Client(one, set_as_default=False) as on_one:
        on = tuple((client, client.persist(normal_input(n, chunks))) for client in (on_two, on_one))
        for client, x in on:
            with client.as_current():
                wait(x)
        rows = []
        for name, (run, target, values) in cases(n, monte_carlo_n, chunks).items():
            seconds_two, seconds_one = interleaved(run, on, repeat)
            rows.append({"case": name, "n": values, "chunks": chunks, "seconds_two": seconds_two,
                         "seconds_one": seconds_one, "speedup": seconds_one / seconds_two,
                         "target": target})
        placed = {len(keys) for keys in on_two.has_what().values()}
    alone = gpu_alone(n, chunks, repeat)
    rows.append({"case": "GPU time alone: gaussian on every chunk, no Dask", "n": n, "chunks": chunks,
                 "seconds_two": None, "seconds_one": alone, "speedup": None, "target": "(work)"})
    print(f"chunks held by each worker of the two-GPU cluster, by count: {sorted(placed)}")
    return rows


def main() -> None:
    from gpufuncs.targets.cuda.runtime import device_count

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=lambda t: int(float(t)), default=10**9, help="float32 elements")
    parser.add_argument("--chunks", type=int, default=16)
    parser.add_argument("--monte-carlo-n", type=lambda t: int(float(t)), default=10**10,
                        help="values made, used and summed in the Monte Carlo case")
    parser.add_argument("--repeat", type=int, default=7)
    add_save_argument(parser)
    args = parser.parse_args()
    if device_count() < 2:
        raise SystemExit(f"bench_dask_cuda needs two GPUs; {device_count()} visible")
    rows = bench(args.n, args.chunks, args.monte_carlo_n, args.repeat)
    print(format_table(rows, COLUMNS))
    if not args.save:
        print(not_saved_hint())
        return
    gpu = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    name = re.sub(r"[^a-z0-9]+", "-", gpu.lower()).strip("-")
    meta = machine_info({"gpus": f"{device_count()} x {gpu}", "dask": dask.__version__,
                         "distributed": distributed.__version__, "dask_cuda": dask_cuda.__version__,
                         "dtype": "float32", "method": f"medians of {args.repeat} after a warm-up, "
                                                       "one-GPU and two-GPU clusters interleaved"})
    print("saved", save_results(f"dask-cuda-{name}", rows, COLUMNS, meta, args.save))


if __name__ == "__main__":
    main()
