"""A fresh process's first call on CuPy arrays, against a CuPy ``ElementwiseKernel``'s (issue 32).

Each of ``--processes`` new Python processes imports NumPy, CuPy and gpufuncs, makes a CuPy
array of 10^6 float32 values (CUDA's context made, synchronized), then times two first calls,
each followed by a synchronize: ``gf.gaussian`` on the array, and a CuPy ``ElementwiseKernel``
of the same formula (the anchor). Both disk caches are warm: one process before the timed ones
fills them (gpufuncs' cubins, CuPy's kernel cache). The processes alternate which call comes
first, so that neither always pays what the first CUDA work in a process pays. The table gives
the median over processes, with the import and context time for scale (not in either figure).
Run on a GPU machine: ``python -m benchmarks.gpu_fresh [--save] [--name gpu-h100_fresh]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

from .harness import add_save_argument, machine_info, not_saved_hint, save_results

N = 10**6
GOAL_S = 0.1  # issue 32: at most 0.1 s beyond import and context

_CHILD = """
import json, sys, time
t0 = time.perf_counter()
import numpy as np, cupy as cp, gpufuncs as gf
x = cp.linspace(-3.0, 3.0, int(sys.argv[2]), dtype=cp.float32); cp.cuda.Device().synchronize()
ready = time.perf_counter()
ek = cp.ElementwiseKernel("float32 x, float32 mu, float32 s", "float32 y",
                          "float d = (x - mu) / s; y = 0.3989422804014327f / s * expf(-0.5f * d * d)",
                          "fresh_gaussian")

def timed(call):
    start = time.perf_counter()
    call()
    cp.cuda.Device().synchronize()
    return time.perf_counter() - start

calls = {"gpufuncs": lambda: gf.gaussian(x, 0.5, 1.5),
         "cupy": lambda: ek(x, np.float32(0.5), np.float32(1.5))}
order = ["gpufuncs", "cupy"] if sys.argv[1] == "0" else ["cupy", "gpufuncs"]
found = {name: timed(calls[name]) for name in order}
print(json.dumps({"import + context": ready - t0, **found}))
"""


def _process(index: int) -> dict[str, float]:
    done = subprocess.run([sys.executable, "-c", _CHILD, str(index % 2), str(N)], capture_output=True,
                          text=True, timeout=300, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def rows(processes: int) -> list[dict[str, object]]:
    """One row: medians over ``processes`` fresh processes, after one that warms both caches."""
    _process(0)
    runs = [_process(i) for i in range(processes)]
    median = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
    return [{"kernel": "gaussian", "dtype": "float32", "n": N, "processes": processes,
             "import + context (s)": median["import + context"], "gpufuncs (s)": median["gpufuncs"],
             "cupy EK (s)": median["cupy"], "gpufuncs/cupy": median["gpufuncs"] / median["cupy"],
             "gpufuncs runs (s)": " ".join(f"{r['gpufuncs']:.3f}" for r in runs),
             "cupy runs (s)": " ".join(f"{r['cupy']:.3f}" for r in runs)}]


def main(argv: list[str] | None = None) -> int:
    """Measure, print, and with ``--save`` write ``<name>.json`` / ``.txt``."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_fresh", description=__doc__)
    parser.add_argument("--processes", type=int, default=7, help="timed processes (default 7)")
    parser.add_argument("--name", default="gpu_fresh", help="results file name (default gpu_fresh)")
    add_save_argument(parser)
    opts = parser.parse_args(argv)
    import cupy

    found = rows(opts.processes)
    first = found[0]["gpufuncs (s)"]
    verdict = f"{first:.3f} s (<= {GOAL_S} s) {'met' if first <= GOAL_S else 'NOT MET'}"
    meta = machine_info({"gpu": cupy.cuda.runtime.getDeviceProperties(0)["name"].decode(),
                         "cupy": cupy.__version__, "unit": "seconds, median over fresh processes",
                         "fresh process: first call on CuPy arrays, beyond import and context": verdict})
    columns = list(found[0])
    for key, value in found[0].items():
        print(f"{key:>22}: {value:.4g}" if isinstance(value, float) else f"{key:>22}: {value}")
    print(f"goal: {verdict}")
    if opts.save:
        print(f"saved {save_results(opts.name, found, columns, meta, opts.save)}")
    else:
        print(not_saved_hint())
    return 0


if __name__ == "__main__":
    sys.exit(main())
