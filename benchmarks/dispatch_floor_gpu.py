"""Where a small gpufuncs call on CuPy arrays spends its CPU time, and the floor of any Python
dispatch, beside CuPy's ``ElementwiseKernel`` (issue 30's pipelined int64 ``a * b + c``).

Each line is the median over 31 repetitions of 200 calls followed by one synchronize (the
pipelined regime, where a small call's CPU cost is what the GPU waits for). Besides the whole
call and its pieces (the resolved call, the executor, the launch alone, the allocation alone,
keying the arguments), it times a *straight* call: a Python function doing only what any
dispatch must (key the arguments, find the executor, read the pointers, allocate, pack and
launch), with every step inline. That is the floor a Python dispatch can reach; CuPy's is
Cython. Diagnostic only: it reads the executor's closure, so it follows the code it measures.

Run on a GPU machine: ``python -m benchmarks.dispatch_floor_gpu [n ...]`` (default 10**4);
``--save`` writes ``results/dispatch-floor-<gpu>.*`` (``--save DIR``: into ``DIR``).
"""

from __future__ import annotations

import argparse
import inspect
import statistics
import struct
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import gpufuncs as gf
from gpufuncs.dispatch.args import ABSENT, keyer_of

from .bench_fuse import report_gpu_table
from .harness import add_save_argument


@gf.ufunc(signatures=["int64(int64, int64, int64)"], reference=lambda a, b, c: a * b + c,
          name="floor_muladd", replace=True)
def floor_muladd(a, b, c):
    return a * b + c


def closure_with(fn: Callable[..., Any], name: str) -> dict[str, Any]:
    """The closure variables of the first function reached from ``fn`` (through the functions
    its closure holds, breadth first) whose closure holds ``name``: the executor may be wrapped."""
    queue, seen = [fn], set()
    while queue:
        current = queue.pop(0)
        if id(current) in seen or not inspect.isfunction(current):
            continue
        seen.add(id(current))
        found = inspect.getclosurevars(current).nonlocals
        if name in found:
            return found
        queue.extend(v for v in found.values() if callable(v))
    raise LookupError(f"no function reached from {fn!r} holds {name!r} in its closure")


def _cases(n: int) -> dict[str, Callable[[], Any]]:
    import cupy as cp

    ek = cp.ElementwiseKernel("int64 a, int64 b, int64 c", "int64 y", "y = a * b + c", "floor_ek")
    rng = np.random.default_rng(0)
    a, b, c = (cp.asarray(rng.integers(-1000, 1000, n)) for _ in range(3))
    floor_muladd(a, b, c)
    resolved = floor_muladd.resolve(a, b, c)
    execute = resolved._executor
    found = closure_with(execute, "launch")
    launch, stream_of = found["launch"], found["stream_of"]
    launching = inspect.getclosurevars(launch).nonlocals
    pack, function = launching["pack"], launching["address"]
    launch_kernel, blocks = launching["launch_kernel"], launching["blocks"]
    store = inspect.getclosurevars(pack).nonlocals["local"]
    out = cp.empty(n, cp.int64)
    values = [a.data.ptr, b.data.ptr, c.data.ptr, out.data.ptr]
    pack_into = struct.Struct("<4q").pack_into
    size, alloc, current = n * 8, cp.cuda.alloc, cp.cuda.get_current_stream
    new, ndarray, shape, dtype = cp.ndarray.__new__, cp.ndarray, (n,), np.dtype(np.int64)
    keyer = keyer_of(type(a))

    def straight(inputs: tuple[Any, ...]) -> Any:
        handle = current().ptr
        pointers = [x.data.ptr for x in inputs]
        memory = alloc(size)
        pack_into(store.store, 0, *pointers, memory.ptr)
        launch_kernel(function, blocks, 1, 1, 256, 1, 1, 0, handle, store.address, 0)
        made = new(ndarray, _no_init=True)
        made._init(shape, dtype, memory)
        return made

    table = {(keyer(a), keyer(b), keyer(c)): straight}

    def straight_call(*args: Any) -> Any:
        return table[tuple(keyer(x) for x in args)](args)

    return {
        "cupy ElementwiseKernel": lambda: ek(a, b, c),
        "gpufuncs call": lambda: floor_muladd(a, b, c),
        "resolved call": lambda: resolved._run((a, b, c), ABSENT, ABSENT, {}),
        "executor": lambda: execute((a, b, c), None, True, None),
        "straight call (the floor)": lambda: straight_call(a, b, c),
        "straight executor": lambda: straight((a, b, c)),
        "launch alone": lambda: launch(values, 0),
        "allocation alone": lambda: alloc(size),
        "stream read": lambda: stream_of(a),
        "three keys": lambda: (keyer(a), keyer(b), keyer(c)),
    }


def pipelined_times(cases: dict[str, Callable[[], Any]]) -> dict[str, float]:
    """Median µs per call of each case, pipelined (see the module's docstring)."""
    import cupy as cp

    sync = cp.cuda.get_current_stream().synchronize
    for fn in cases.values():
        for _ in range(50):
            fn()
    sync()
    times: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(31):
        for label, fn in cases.items():
            start = time.perf_counter()
            for _ in range(200):
                fn()
            sync()
            times[label].append((time.perf_counter() - start) / 200 * 1e6)
    return {label: statistics.median(samples) for label, samples in times.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sizes", nargs="*", type=float, default=[1e4], help="elements (default 1e4)")
    add_save_argument(parser)
    opts = parser.parse_args(argv)
    rows = []
    for n in map(int, opts.sizes):
        times = pipelined_times(_cases(n))
        reference = times["cupy ElementwiseKernel"]
        rows += [{"n": n, "call": label, "us": round(us, 2), "/cupy": round(us / reference, 3)}
                 for label, us in times.items()]
    report_gpu_table("dispatch-floor", rows, ("n", "call", "us", "/cupy"),
                     {"suite": "dispatch floor", "kernel": "int64 a * b + c on CuPy arrays",
                      "unit": "us per call, pipelined (200 calls then one synchronize, median of 31)"},
                     opts.save)

if __name__ == "__main__":
    main()
