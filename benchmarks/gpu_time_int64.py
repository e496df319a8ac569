"""Whether issue 30's pipelined int64 ``a * b + c`` waits on the GPU or on the CPU.

For gpufuncs and CuPy's ``ElementwiseKernel`` (allocating, and with ``out=``), per call, median
of 15 repetitions of 200 calls, µs:

- GPU time: the 200 calls queued behind long CuPy kernels, so that the CPU is ahead and the
  events around them time the GPU alone;
- CPU enqueue: the CPU time of the same 200 calls (no synchronize);
- pipelined: 200 calls then one synchronize, as ``bench_types --gpu`` measures it.

Where the pipelined time follows the CPU's and not the GPU's, the CPU dispatch is what a
ratio to CuPy measures. Diagnostic only: nothing is saved. Run on a GPU machine:
``python -m benchmarks.gpu_time_int64``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import gpufuncs as gf


@gf.ufunc(signatures=["int64(int64, int64, int64)"], reference=lambda a, b, c: a * b + c,
          name="gpu_time_muladd", replace=True)
def muladd(a, b, c):
    return a * b + c


def _per_call(cases: dict[str, Callable[[], Any]], busy: Callable[[], Any]) -> dict[str, tuple[float, ...]]:
    """``(GPU, CPU enqueue, pipelined)`` µs per call of each case."""
    import cupy as cp

    stream = cp.cuda.get_current_stream()
    found: dict[str, list[tuple[float, float, float]]] = {k: [] for k in cases}
    for _ in range(15):
        for label, call in cases.items():
            start, stop = cp.cuda.Event(), cp.cuda.Event()
            busy()
            start.record()
            began = time.perf_counter()
            for _ in range(200):
                call()
            enqueue = (time.perf_counter() - began) / 200
            stop.record()
            stop.synchronize()
            gpu = cp.cuda.get_elapsed_time(start, stop) / 1e3 / 200
            began = time.perf_counter()
            for _ in range(200):
                call()
            stream.synchronize()
            found[label].append((gpu, enqueue, (time.perf_counter() - began) / 200))
    return {label: tuple(1e6 * statistics.median(run[i] for run in runs) for i in range(3))
            for label, runs in found.items()}


def main() -> None:
    import cupy as cp

    ek = cp.ElementwiseKernel("int64 a, int64 b, int64 c", "int64 y", "y = a * b + c", "gpu_time_ek")
    big = cp.ones(1 << 30, cp.float32)

    def busy() -> None:
        for _ in range(6):
            big.__imul__(1.0)

    for n in (10**4, 10**6, 10**7):
        a, b, c = (cp.asarray(np.random.default_rng(k).integers(-1000, 1000, n)) for k in range(3))
        out = cp.empty(n, cp.int64)
        cases = {"cupy": lambda: ek(a, b, c), "gpufuncs": lambda: muladd(a, b, c),  # noqa: B023
                 "cupy out=": lambda: ek(a, b, c, out),  # noqa: B023
                 "gpufuncs out=": lambda: muladd(a, b, c, out=out)}  # noqa: B023
        for call in cases.values():
            for _ in range(50):
                call()
        print(f"n = {n:.0e}: us per call (GPU time / CPU enqueue / pipelined)")
        for label, (gpu, enqueue, piped) in _per_call(cases, busy).items():
            print(f"  {label:14s} {gpu:8.2f} {enqueue:8.2f} {piped:8.2f}")


if __name__ == "__main__":
    main()
