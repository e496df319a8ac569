"""The floor of issue 31's large fused calls on the GPU: the fused chain and log-likelihood beside
kernels written by hand with ``numba.cuda``, the same arithmetic, plainer, and with fast math.

Issue 31 asks, at 10^8 float32, that the fused chain ``clamp(gaussian(x, mu, s) * w + exp(-x), 0,
1)`` take at most 1.0x ``torch.compile``, and the fused log-likelihood ``log(gaussian(x, mu,
s)).sum()`` at most 1.0x ``torch.compile`` and 1.5x ``cp.sum(x)``. At that size both are bound
by the GPU's arithmetic, not by memory; this splits the time by what computes it:

- ``fused``: the call (``gf.fuse``);
- ``hand, kernels' math``: one ``numba.cuda`` kernel calling the built-in kernels' own Python
  functions (``gaussian``'s overflow, underflow and NaN handling, ``clamp``'s NaN rule) and
  ``math.exp``/``math.log`` (libdevice's accurate functions); the log-likelihood sums in float64
  per thread, across a warp by shuffles and across warps by an atomic add (no compensation,
  an order that depends on scheduling: a floor, not an answer gpufuncs may give);
- ``hand, plain``: the same with the textbook formula (``exp(-0.5 z z) / (s sqrt(2 pi))``);
- ``hand, fast math``: the plain one compiled with ``fastmath=True`` (approximate ``exp``,
  ``log`` and division, as ``torch.compile``'s Triton code may use);
- ``..., 16-byte``: the chain's kernels' math and plain one again, each thread moving four
  neighbouring values with one 16-byte load and store (``ld/st.global.v4``, as Triton's code
  does) instead of a grid-stride loop of single values: the access pattern's share;
- the anchors: ``torch.compile`` (default mode, after its warm-up), ``cupy.fuse`` (chain) and
  ``cp.sum(x)`` (log-likelihood).

Beside each time, the call's error against the same function computed in float64 from the
same float32 values (``max ulp``): the chain's largest, over its elements, and the log-likelihood's
(one value), in units in the last place of float32 at the exact value. NumPy's own float32
eager call is a row too, with no GPU time: the error gpufuncs' results are tested against.

Each time is the GPU's per call: 20 calls issued back to back between two CUDA events, median
of 15 repetitions after warm-up (at 10^8 a call's host work hides behind the previous call's
kernel). At 10^7 the hand kernels' lines are their launches' host time (numba-cuda's
dispatcher), not the GPU's. Run on a GPU machine: ``python -m benchmarks.fuse_floor_gpu [n ...]``
(default 10^7 and 10^8); ``--save`` writes ``results/fuse-floor-<gpu>.*`` (``--save DIR``:
into ``DIR``).
"""

from __future__ import annotations

import argparse
import functools
import math
import statistics
from collections.abc import Callable
from typing import Any

import numpy as np
from numba import cuda, float32, float64

import gpufuncs as gf

from .bench_fuse import (
    _INV_SQRT_2PI,
    MU,
    SIGMA,
    W,
    cupy_chain,
    fused_chain,
    log_likelihood,
    report_gpu_table,
    torch_chain,
    torch_loglik,
)
from .harness import add_save_argument

#: Threads a block of the hand-written kernels, and blocks per multiprocessor (grid-stride loops).
THREADS, BLOCKS_PER_SM = 256, 8
CALLS, REPEATS = 20, 15


def _device(pyfunc: Callable[..., Any], fastmath: bool = False) -> Any:
    return cuda.jit(device=True, fastmath=fastmath)(pyfunc)


def _plain_gaussian(x, mu, s):
    z = (x - mu) / s
    return math.exp(float32(-0.5) * z * z) * (float32(_INV_SQRT_2PI) / s)


def _plain_clamp(v, lo, hi):
    return min(max(v, lo), hi)


def _chain_kernel(gaussian: Any, clamp: Any, fastmath: bool) -> Any:
    @cuda.jit(fastmath=fastmath)
    def chain(x, y, mu, s, w):
        start, stride = cuda.grid(1), cuda.gridsize(1)
        for i in range(start, x.size, stride):
            v = x[i]
            y[i] = clamp(gaussian(v, mu, s) * w + math.exp(-v), float32(0), float32(1))

    return chain


@functools.cache
def _vectors() -> tuple[Any, Any]:
    """``load4(a, i)`` and ``store4(a, i, v0, v1, v2, v3)``: four float32 values at ``a[i]``
    (16-byte aligned) as one vector load or store."""
    from llvmlite import ir
    from numba.core import types
    from numba.cuda.extending import intrinsic

    vector = ir.VectorType(ir.FloatType(), 4)

    def address(context: Any, builder: Any, array_type: Any, array: Any, index: Any) -> Any:
        data = context.make_array(array_type)(context, builder, array).data
        return builder.bitcast(builder.gep(data, [index]), vector.as_pointer())

    @intrinsic
    def load4(typingctx: Any, a: Any, i: Any) -> Any:
        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            v = builder.load(address(context, builder, sig.args[0], *args), align=16)
            return context.make_tuple(builder, sig.return_type, [
                builder.extract_element(v, ir.Constant(ir.IntType(32), k)) for k in range(4)])
        return types.UniTuple(types.float32, 4)(a, i), codegen

    @intrinsic
    def store4(typingctx: Any, a: Any, i: Any, v0: Any, v1: Any, v2: Any, v3: Any) -> Any:
        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            v = ir.Constant(vector, ir.Undefined)
            for k in range(4):
                v = builder.insert_element(v, args[2 + k], ir.Constant(ir.IntType(32), k))
            builder.store(v, address(context, builder, sig.args[0], args[0], args[1]), align=16)
            return context.get_dummy_value()
        return types.void(a, i, v0, v1, v2, v3), codegen

    return load4, store4


def _vector_chain_kernel(gaussian: Any, clamp: Any) -> Any:
    """The chain with each thread's four neighbouring values moved 16 bytes at a time."""
    load4, store4 = _vectors()

    @cuda.jit(device=True, inline=True)
    def one(v, mu, s, w):
        return clamp(gaussian(v, mu, s) * w + math.exp(-v), float32(0), float32(1))

    @cuda.jit
    def chain(x, y, mu, s, w):
        i = cuda.grid(1) * 4
        if i + 3 < x.size:
            a, b, c, d = load4(x, i)
            store4(y, i, one(a, mu, s, w), one(b, mu, s, w), one(c, mu, s, w), one(d, mu, s, w))
        else:
            for k in range(i, x.size):
                y[k] = one(x[k], mu, s, w)

    return chain


def _loglik_kernel(gaussian: Any, fastmath: bool) -> Any:
    @cuda.jit(fastmath=fastmath)
    def loglik(x, out, mu, s):
        start, stride = cuda.grid(1), cuda.gridsize(1)
        total = float64(0)
        for i in range(start, x.size, stride):
            total += float64(math.log(gaussian(x[i], mu, s)))
        for offset in (16, 8, 4, 2, 1):
            total += cuda.shfl_down_sync(0xFFFFFFFF, total, offset)
        if cuda.laneid == 0:
            cuda.atomic.add(out, 0, total)

    return loglik


def _variants() -> dict[str, tuple[Any, Any, bool]]:
    """Per variant: the gaussian and clamp device functions, and whether it is fast math."""
    exact_gaussian, exact_clamp = gf.gaussian.spec.pyfunc, gf.clamp.spec.pyfunc
    return {
        "hand, kernels' math": (_device(exact_gaussian), _device(exact_clamp), False),
        "hand, plain": (_device(_plain_gaussian), _device(_plain_clamp), False),
        "hand, fast math": (_device(_plain_gaussian, True), _device(_plain_clamp, True), True),
    }


#: A case's calls: label -> (the call timed, the call's result as a host array).
Calls = dict[str, tuple[Callable[[], Any], Callable[[], np.ndarray]]]


def _host(value: Any) -> np.ndarray:
    """A CuPy array or torch tensor's values on the host."""
    return value.cpu().numpy() if hasattr(value, "cpu") else value.get()


def _timed(fn: Callable[[], Any]) -> tuple[Callable[[], Any], Callable[[], np.ndarray]]:
    return fn, lambda: _host(fn())


def _written(fn: Callable[[], Any], into: Any) -> tuple[Callable[[], Any], Callable[[], np.ndarray]]:
    """A hand kernel's call, whose result is what it writes (or adds) ``into``."""
    def result() -> np.ndarray:
        into.fill(0)
        fn()
        return into.get()
    return fn, result


def _cases(n: int) -> tuple[np.ndarray, dict[str, Calls]]:
    """The values (on the host) and, per function, its calls."""
    import cupy as cp
    import torch

    values = np.random.default_rng(n).uniform(-4, 4, n).astype(np.float32)
    x = cp.asarray(values)
    y, total = cp.empty_like(x), cp.zeros(1, cp.float64)
    mu, s, w = np.float32(MU), np.float32(SIGMA), np.float32(W)
    blocks = min(-(-n // THREADS), cuda.get_current_device().MULTIPROCESSOR_COUNT * BLOCKS_PER_SM)
    t = torch.as_tensor(x, device="cuda")

    compiled_chain, compiled_loglik = torch.compile(torch_chain), torch.compile(torch_loglik)
    chain: Calls = {"fused": _timed(lambda: fused_chain(x, MU, SIGMA, W))}
    loglik: Calls = {"fused": _timed(lambda: log_likelihood(x, MU, SIGMA))}
    for label, (gaussian, clamp, fast) in _variants().items():
        chain_k = _chain_kernel(gaussian, clamp, fast)[blocks, THREADS]
        loglik_k = _loglik_kernel(gaussian, fast)[blocks, THREADS]
        chain[label] = _written(lambda k=chain_k: k(x, y, mu, s, w), y)
        loglik[label] = _written(lambda k=loglik_k: k(x, total, mu, s), total)
    vector_blocks = -(-n // (4 * THREADS))
    for label, (gaussian, clamp, _) in list(_variants().items())[:2]:
        chain_k = _vector_chain_kernel(gaussian, clamp)[vector_blocks, THREADS]
        chain[f"{label}, 16-byte"] = _written(lambda k=chain_k: k(x, y, mu, s, w), y)
    chain["torch.compile"] = _timed(lambda: compiled_chain(t))
    chain["cupy.fuse"] = _timed(lambda: cupy_chain()(x, mu, s, w))
    loglik["torch.compile"] = _timed(lambda: compiled_loglik(t))
    loglik["cp.sum(x)"] = _timed(lambda: cp.sum(x))
    return values, {"chain": chain, "log-likelihood": loglik}


def _exact(values: np.ndarray) -> dict[str, np.ndarray]:
    """Each function (and ``cp.sum(x)``'s sum) computed in float64 from the float32 values."""
    x = values.astype(np.float64)
    density = np.exp(-0.5 * ((x - MU) / SIGMA) ** 2) * (_INV_SQRT_2PI / SIGMA)
    return {"chain": np.clip(density * W + np.exp(-x), 0, 1), "log-likelihood": np.log(density).sum(),
            "cp.sum(x)": x.sum()}


def _numpy_float32(values: np.ndarray) -> dict[str, np.ndarray]:
    """NumPy's eager float32 calls of the same functions (``gaussian`` as its formula)."""
    mu, s = np.float32(MU), np.float32(SIGMA)
    density = np.exp(np.float32(-0.5) * ((values - mu) / s) ** 2) * np.float32(_INV_SQRT_2PI / SIGMA)
    return {"chain": np.clip(density * np.float32(W) + np.exp(-values), 0, 1),
            "log-likelihood": np.log(density).sum()}


def max_ulps(result: np.ndarray, exact: np.ndarray) -> float:
    """The largest distance of ``result`` from ``exact``, in float32 units in the last place
    at the exact value."""
    result = np.asarray(result, np.float64).reshape(np.shape(exact))
    ulp = np.spacing(np.abs(np.asarray(exact, np.float32))).astype(np.float64)
    return float(np.max(np.abs(result - exact) / ulp))


def gpu_time(fn: Callable[[], Any]) -> float:
    """Median µs of GPU time per call of ``fn``, :data:`CALLS` calls between two events."""
    import cupy as cp

    for _ in range(3):
        fn()
    cp.cuda.Device().synchronize()
    start, stop, samples = cp.cuda.Event(), cp.cuda.Event(), []
    for _ in range(REPEATS):
        start.record()
        for _ in range(CALLS):
            fn()
        stop.record()
        stop.synchronize()
        samples.append(cp.cuda.get_elapsed_time(start, stop) * 1e3 / CALLS)
    return statistics.median(samples)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sizes", nargs="*", type=float, default=[1e7, 1e8], help="values (default 1e7 1e8)")
    add_save_argument(parser)
    opts = parser.parse_args(argv)
    rows = []
    for n in map(int, opts.sizes):
        values, cases = _cases(n)
        exact, numpy = _exact(values), _numpy_float32(values)
        for name, calls in cases.items():
            times = {label: gpu_time(fn) for label, (fn, _) in calls.items()}
            for label, (_, result) in calls.items():
                us = times[label]
                rows.append({"function": name, "n": n, "call": label, "gpu us": round(us, 1),
                             "fused/this": round(times["fused"] / us, 3),
                             "max ulp": round(max_ulps(result(), exact.get(label, exact[name])), 2)})
            rows.append({"function": name, "n": n, "call": "numpy float32 (host)",
                         "max ulp": round(max_ulps(numpy[name], exact[name]), 2)})
    report_gpu_table("fuse-floor", rows, ("function", "n", "call", "gpu us", "fused/this", "max ulp"),
                     {"suite": "fuse floor", "dtype": "float32",
                      "unit": "GPU us per call (20 calls between two events, median of 15)"}, opts.save)

if __name__ == "__main__":
    main()
