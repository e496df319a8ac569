"""Composed kernels against the same body written out by hand (issue 30, item 4).

``clamp(gaussian(x, 0, 1) * w, 0, 1)``, a kernel whose body calls two built-in kernels, must be
one loop: within 1.05x of the kernel with both bodies written out in it (:func:`by_hand`), on
the 2-core machine and on the H100. The constants are written in the loop's dtype
(``as_type``), as a gpufuncs kernel writes them.

Two suites of ``python -m benchmarks`` (neither is part of ``all``):

- ``compose``: ``cpu`` and ``parallel``, float32 and float64, n = 10^4, 10^6, 10^7; the two
  kernels (and the NumPy expression, for scale) timed in interleaved rounds, and each
  ``composed/hand`` ratio from the two calls alone, interleaved (see :func:`cpu_row`). ``--save``
  writes ``results/<name>_compose.{txt,json}`` (``--name``, default ``cpu``).
- ``compose_gpu``: the cuda target on CuPy arrays, n = 10^4 ... 10^8, call + synchronize and
  pipelined (:data:`bench_gpu.PIPELINE` calls, one synchronize), the two kernels' calls
  interleaved (:meth:`bench_gpu.Timer.against`). ``--save`` writes ``results/gpu-<gpu>_compose.*``;
  skipped, saying why, without CuPy or a GPU.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

import gpufuncs as gf
from gpufuncs import as_type, clamp, gaussian
from gpufuncs.kernels.gaussian import _INV_SQRT_2PI

from . import bench_cpu
from .harness import machine_info, measure_pair

CPU_SIZES = (10**4, 10**6, 10**7)
GPU_SIZES = (10**4, 10**6, 10**7, 10**8)
TARGETS = ("cpu", "parallel")
LIMIT = 1.05  # the target: composed / by hand

Step = bench_cpu.Step


def composed(x, w):
    """``clamp(gaussian(x, 0, 1) * w, 0, 1)``, calling the built-in kernels."""
    zero, one = as_type(0, x), as_type(1, x)
    return clamp(gaussian(x, zero, one) * w, zero, one)


def by_hand(x, w):
    """:func:`composed` with both bodies written out (``kernels/gaussian.py``, ``kernels/clamp.py``)."""
    x0, sigma = as_type(0, x), as_type(1, x)
    if sigma != sigma or sigma <= as_type(0, sigma):
        density = as_type(math.nan, x)
    else:
        one = as_type(1, x)
        overflowed = math.isinf(x - x0)
        half = as_type(0.5, x) if overflowed else one
        z = ((x * half - x0 * half) / sigma) * (as_type(2, x) if overflowed else one)
        zz = z * z
        split = (zz > as_type(170, zz)) & (sigma < as_type(1, sigma))
        e = math.exp(-zz * (as_type(0.25, zz) if split else as_type(0.5, zz)))
        scale = as_type(2.0**53, sigma) if sigma < as_type(2.0**-60, sigma) else one
        u = (e * (as_type(_INV_SQRT_2PI, z) / (sigma * scale))) * scale
        density = u * e if split else u
    v, xmin, xmax = density * w, as_type(0, x), as_type(1, x)
    low = xmin if v < xmin else v
    clipped = xmax if low > xmax else low
    first_nan = v if v != v else (xmin if xmin != xmin else xmax)
    return first_nan if (v != v) | (xmin != xmin) | (xmax != xmax) else clipped


def numpy_expression(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The same as a NumPy user writes it (for scale only)."""
    return np.clip(np.exp(-0.5 * x * x) * (_INV_SQRT_2PI * w), 0, 1)


@functools.cache
def kernels() -> tuple[gf.Kernel, gf.Kernel]:
    """The two kernels, registered on first use (``bench_composed``, ``bench_by_hand``): made at
    import, they would stop the other suites, which want a benchmark declaration of every kernel."""
    declare = functools.partial(gf.ufunc, signatures=gf.float_signatures(2), reference=None, replace=True)
    return declare(name="bench_composed")(composed), declare(name="bench_by_hand")(by_hand)


def inputs(n: int, dtype: type) -> tuple[np.ndarray, np.ndarray]:
    """``x`` uniform on [-4, 4] (as the CPU suite's samples) and weights on [0, 4]."""
    return bench_cpu.samples(n, dtype), np.random.default_rng(n + 1).uniform(0.0, 4.0, n).astype(dtype)


def verdict(value: float) -> str:
    return f"{value:.3f} (<= {LIMIT}) {'met' if value <= LIMIT else 'NOT MET'}"


# -- cpu ----------------------------------------------------------------------------------------------
def cpu_row(dtype: type, n: int, quick: bool) -> dict[str, Any]:
    """Both kernels on ``cpu`` and ``parallel``, and the NumPy expression: times (µs) from
    rounds of every contender (:func:`bench_cpu.timed`), and each ``composed/hand`` ratio from
    the pair alone, their repetitions interleaved (:func:`harness.measure_pair`): two calls of
    one machine code whose ratio is near 1, where the 2-core machine's drift between rounds
    moved the rounds' ratio by 10% at 10^7 (other work on the machine)."""
    mine, theirs = kernels()
    x, w = inputs(n, dtype)
    calls = {"numpy": lambda: numpy_expression(x, w)}
    for t in TARGETS:
        calls[f"composed {t}"] = lambda t=t: mine(x, w, target=t)
        calls[f"by hand {t}"] = lambda t=t: theirs(x, w, target=t)
    timings = bench_cpu.timed(calls, n, quick)
    row: dict[str, Any] = {"dtype": np.dtype(dtype).name, "n": n, **timings.times()}
    for t in TARGETS:
        pair = measure_pair(calls[f"composed {t}"], calls[f"by hand {t}"], inner=None,
                            repeat=21 if quick else 201)
        row[f"{t} composed/hand"] = pair[0] / pair[1]
        row[f"{t} composed/np"] = timings.ratio(f"composed {t}", "numpy")
    return row


def cpu_steps(sizes: tuple[int, ...] = CPU_SIZES, dtypes: tuple[type, ...] = bench_cpu.DTYPES,
              quick: bool = False) -> list[Step]:
    """The ``compose`` suite's rows as steps (``quick``: n up to 10^6)."""
    return [(f"compose {np.dtype(dtype).name} n={n:.0e}",
             lambda dtype=dtype, n=n: [cpu_row(dtype, n, quick)])
            for dtype in dtypes for n in sizes if not (quick and n > 10**6)]


def cpu_meta(table: list[dict[str, Any]], load_before: float) -> dict[str, Any]:
    """Machine, load and the target's verdict per target, dtype and n."""
    import os

    import numba

    meta = machine_info({"load average (1 min) before": load_before, "unit": "µs per call",
                         "numba threads": numba.get_num_threads()})
    for r in table:
        for t in TARGETS:
            meta[f"compose {t} {r['dtype']} n={r['n']:.0e} composed/hand"] = verdict(r[f"{t} composed/hand"])
    meta["load average (1 min) after"] = os.getloadavg()[0]
    return meta


# -- gpu ----------------------------------------------------------------------------------------------
def gpu_rows(dtype: type, n: int, timer: Any) -> list[dict[str, Any]]:
    """Both kernels on CuPy arrays (a new output each call), interleaved: call + synchronize and
    pipelined."""
    import cupy as cp

    mine, theirs = kernels()
    x, w = (cp.asarray(a) for a in inputs(n, dtype))
    sync, ref_sync, pipe, ref_pipe = timer.against(lambda: mine(x, w), lambda: theirs(x, w))
    cp.get_default_memory_pool().free_all_blocks()
    return [{"dtype": np.dtype(dtype).name, "n": n, "composed sync_us": round(sync * 1e6, 2),
             "by hand sync_us": round(ref_sync * 1e6, 2), "composed/hand sync": round(sync / ref_sync, 3),
             "composed pipe_us": round(pipe * 1e6, 2), "by hand pipe_us": round(ref_pipe * 1e6, 2),
             "composed/hand pipe": round(pipe / ref_pipe, 3)}]


def gpu_steps(timer: Any, sizes: tuple[int, ...] = GPU_SIZES,
              dtypes: tuple[type, ...] = bench_cpu.DTYPES, quick: bool = False) -> list[Step]:
    """The ``compose_gpu`` suite's rows as steps (``quick``: n up to 10^6)."""
    return [(f"compose gpu {np.dtype(dtype).name} n={n:.0e}",
             lambda dtype=dtype, n=n: gpu_rows(dtype, n, timer))
            for dtype in dtypes for n in sizes if not (quick and n > 10**6)]


def gpu_verdicts(table: list[dict[str, Any]]) -> list[str]:
    """The target per dtype and n, both modes, one line each."""
    return [f"compose cuda {r['dtype']} n={r['n']:.0e} composed/hand {mode}: "
            f"{verdict(r['composed/hand ' + key])}"
            for r in table for mode, key in (("call+sync", "sync"), ("pipelined", "pipe"))]
