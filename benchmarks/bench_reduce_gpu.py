"""A user kernel's ``reduce`` on the GPU against ``cupy.sum`` (issue 31: an add kernel at 10^8),
and a reduction kernel against CuPy's ``ReductionKernel``.

``add.reduce(x)`` of a gpufuncs kernel ``a + b`` on a CuPy array (one launch, see
``gpufuncs.targets.cuda.single_pass``) against ``cp.sum(x)`` (CUB), float32, call + synchronize
and pipelined, as ratios of interleaved repetitions (µs per call besides); the time of the
pairwise tree of launches that device arrays other than CuPy's take (``methods._tree``); and
the norm ``gf.reduction(x * x, np.add, finish=sqrt)`` against ``cp.ReductionKernel`` of the same.

Run on a GPU machine: ``python -m benchmarks.bench_reduce_gpu``; ``--save`` writes
``benchmarks/results/<name>_reduce.{json,txt}`` (``--name``, default ``gpu``).
"""

from __future__ import annotations

import argparse
import functools
from typing import Any

import numpy as np

import gpufuncs as gf
from gpufuncs.dispatch.methods import _tree

from .bench_fuse import _gpu_meta, _save
from .harness import add_save_argument, machine_info, measure, measure_pair, not_saved_hint


@gf.ufunc(signatures=["float32(float32, float32)", "float64(float64, float64)"],
          reference=lambda a, b: a + b, identity=0, name="bench_reduce_add", replace=True)
def add(a, b):
    return a + b


@gf.reduction(combine=np.add, identity=0.0, finish=np.sqrt)
def l2norm(x):
    return x * x


def rows(sizes: tuple[int, ...], quick: bool) -> list[dict[str, Any]]:
    import cupy as cp

    from .bench_gpu import PIPELINE

    sync = cp.cuda.get_current_stream().synchronize
    repeat, batch_repeat = (20, 3) if quick else (100, 11)
    found = []
    for n in sizes:
        x = cp.asarray(np.random.default_rng(n).standard_normal(n).astype(np.float32))
        ours, theirs = functools.partial(add.reduce, x), functools.partial(cp.sum, x)
        each = measure_pair(ours, theirs, sync=sync, repeat=repeat)
        piped = measure_pair(ours, theirs, sync=sync, warmup=5, repeat=batch_repeat, inner=PIPELINE)
        # the pairwise tree of launches that device arrays other than CuPy's still take
        in_tree = functools.partial(_tree, add, x, 0, {"target": "cuda"}, True)
        tree = measure(in_tree, sync=sync, repeat=repeat)
        norm, cupy_norm = functools.partial(l2norm, x), functools.partial(_cupy_norm(), x)
        norms = measure_pair(norm, cupy_norm, sync=sync, repeat=repeat)
        norms_piped = measure_pair(norm, cupy_norm, sync=sync, warmup=5, repeat=batch_repeat, inner=PIPELINE)
        found.append({"n": n, "reduce sync us": round(1e6 * each[0], 2), "tree sync us": round(1e6 * tree, 2),
                      "cp.sum sync us": round(1e6 * each[1], 2),
                      "reduce/cp.sum sync": round(each[0] / each[1], 3),
                      "reduce/cp.sum pipe": round(piped[0] / piped[1], 3),
                      "l2norm sync us": round(1e6 * norms[0], 2), "cupy RK sync us": round(1e6 * norms[1], 2),
                      "l2norm/cupy RK sync": round(norms[0] / norms[1], 3),
                      "l2norm/cupy RK pipe": round(norms_piped[0] / norms_piped[1], 3)})
        cp.get_default_memory_pool().free_all_blocks()
    return found


@functools.cache
def _cupy_norm() -> Any:
    import cupy as cp

    return cp.ReductionKernel("T x", "T y", "x * x", "a + b", "y = sqrt(a)", "0", "bench_l2norm")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_reduce_gpu", description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--name", default="gpu", help="results file prefix")
    add_save_argument(parser)
    opts = parser.parse_args(argv)
    found = rows((10**6, 10**7, 10**8), opts.quick)
    for row in found:
        print(row, flush=True)
    meta = machine_info({"suite": "reduce", "target": "cuda", "kernel": "a + b, and the norm, float32",
                         **_gpu_meta(True)})
    if opts.save:
        print("saved", _save(opts.name, found, meta, opts.save, "reduce"))
    else:
        print(not_saved_hint())


if __name__ == "__main__":
    main()
