"""GPU benchmark: the cuda target against the memory limit, CuPy and Numba, on one GPU.

Run on a GPU machine: ``python benchmarks/bench_gpu.py`` (a few minutes; ``--quick`` for n up
to 10^6). Needs CuPy. Saved with :func:`harness.save_results` as ``results/gpu-<gpu>.{txt,json}``.

Every kernel, float32 and float64, n = 10^3 ... 10^8 (``hermite_norm``: 32 orders, n samples up
to 10^7), in three cases:

- ``device``: CuPy arrays in, the call allocates its output (a CuPy array);
- ``device+out``: CuPy arrays in, ``out=`` given;
- ``host``: NumPy arrays with ``target="cuda"`` (n up to 10^7, and 10^8 for gaussian float32).

Each row gives two times per call, medians after warm-up: ``sync_us``, one call followed by a
stream synchronize (what a single call costs), and ``pipe_us``, calls issued back to back for at
least 5 ms (200 calls for small ones) and one synchronize (the Python cost of a call overlaps the
GPU work of the previous ones, as in a pipeline); GB/s of bytes read plus written (pipelined),
and ratios (ours / theirs, lower is better, each the same mode) against these, measured in the
same run:

- ``copy``: a device-to-device ``cudaMemcpyAsync`` moving the same bytes (the memory limit);
- ``cupy``: an ``ElementwiseKernel`` with the same formula, called the same way;
- ``numba``: Numba's ``@vectorize(target="cuda")`` / ``@guvectorize`` (``gf.get(name, "cuda")``)
  on the same data with ``out=`` (Numba device arrays; row layout for hermite, as usually written);
- ``pinned`` (host rows): a pinned host->device plus device->host copy of the same bytes.

A second table measures small calls: gaussian float32 at n = 1000 for CuPy, Numba and torch
arrays (a new output, and ``out=``), against CuPy's ``ElementwiseKernel`` on CuPy arrays, call +
synchronize and pipelined. ``--targets-only`` runs just the cases that issue targets name.
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import cupy as cp
import numpy as np
from numba import cuda

import gpufuncs as gf

try:  # run as a script or as a module
    from harness import format_table, machine_info, measure, save_results
except ImportError:
    from .harness import format_table, machine_info, measure, save_results

SIZES = tuple(10**e for e in range(3, 9))
HERMITE_SIZES = tuple(10**e for e in range(3, 8))
ORDERS = 32
X0, SIGMA = 0.5, 1.5
SQRT_2PI = math.sqrt(2 * math.pi)
COLUMNS = ("kernel", "dtype", "n", "case", "sync_us", "pipe_us", "GB/s", "x_copy_sync", "x_copy",
           "x_cupy_sync", "x_cupy", "x_numba", "x_pinned")
#: Calls per repetition of the pipelined small-call figures (one synchronize per batch).
PIPELINE = 200

# CuPy ElementwiseKernels with the kernels' formulas (NaN rules included).
CUPY = {
    "gaussian": cp.ElementwiseKernel(
        "T x, T x0, T s", "T y",
        f"if (s != s || s <= (T)0) {{ y = (T)(0.0 / 0.0); }} else {{ T z = (x - x0) / s; "
        f"y = exp(-(z * z) / (T)2) / (T){SQRT_2PI!r} / s; }}", "bench_gaussian"),
    "exp": cp.ElementwiseKernel("T x", "T y", "y = exp(x)", "bench_exp"),
    "clamp": cp.ElementwiseKernel(
        "T x, T lo, T hi", "T y",
        "if (x != x || lo != lo || hi != hi) { y = x + lo + hi; } "
        "else { T low = x < lo ? lo : x; y = low > hi ? hi : low; }", "bench_clamp"),
    # Order-major like ours: out[k * N + i].
    "hermite_norm": cp.ElementwiseKernel(
        "T x, int32 n, int64 N", "raw T out",
        "T prev = 1; out[i] = prev; if (n > 1) { T cur = x; out[N + i] = cur; "
        "for (int k = 2; k < n; ++k) { T nxt = (x * cur - sqrt((T)(k - 1)) * prev) / sqrt((T)k); "
        "out[(long long)k * N + i] = nxt; prev = cur; cur = nxt; } }", "bench_hermite"),
}


def scalars(name: str, dtype: Any) -> tuple[Any, ...]:
    t = np.dtype(dtype).type
    return {"gaussian": (t(X0), t(SIGMA)), "exp": (), "clamp": (t(-0.5), t(0.5)),
            "hermite_norm": ()}[name]


def traffic(name: str, n: int, itemsize: int) -> int:
    """Bytes read plus written (scalars are passed by value)."""
    return n * itemsize * (1 + ORDERS if name == "hermite_norm" else 2)


class Timer:
    """Median seconds per call, the GPU synchronized inside the timed region."""

    def __init__(self, quick: bool) -> None:
        self.stream = cp.cuda.get_current_stream()
        self.quick = quick

    def __call__(self, fn: Callable[[], Any], big: bool = False) -> float:
        """Pipelined: calls back to back for at least 5 ms, then one synchronize."""
        repeat = 5 if big or self.quick else 15
        return measure(fn, sync=self.stream.synchronize, warmup=2, repeat=repeat, min_time=5e-3)

    def each(self, fn: Callable[[], Any], big: bool = False) -> float:
        """One call followed by a synchronize (a single call's latency)."""
        repeat = 9 if big else (60 if self.quick else 200)
        return measure(fn, sync=self.stream.synchronize, warmup=5, repeat=repeat, inner=1)

    def both(self, fn: Callable[[], Any], big: bool = False) -> tuple[float, float]:
        """(call + synchronize, pipelined)."""
        return self.each(fn, big), self(fn, big)

    def batch(self, fn: Callable[[], Any]) -> float:
        """:data:`PIPELINE` calls, then one synchronize."""
        return measure(fn, sync=self.stream.synchronize, warmup=20, repeat=15, inner=PIPELINE)


def copy_time(timer: Timer, nbytes: int) -> tuple[float, float]:
    """A device-to-device copy that reads and writes ``nbytes`` in total (sync, pipelined)."""
    half = max(nbytes // 2, 1)
    src, dst = cp.empty(half, cp.uint8), cp.empty(half, cp.uint8)
    kind = cp.cuda.runtime.memcpyDeviceToDevice
    return timer.both(lambda: cp.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, half, kind,
                                                          timer.stream.ptr), big=True)


def pinned_time(timer: Timer, in_bytes: int, out_bytes: int) -> float:
    host_in = cuda.pinned_array(in_bytes, np.uint8)
    host_out = cuda.pinned_array(out_bytes, np.uint8)
    dev_in, dev_out = cp.empty(in_bytes, cp.uint8), cp.empty(out_bytes, cp.uint8)
    rt, ptr = cp.cuda.runtime, timer.stream.ptr

    def round_trip():
        rt.memcpyAsync(dev_in.data.ptr, host_in.ctypes.data, in_bytes, rt.memcpyHostToDevice, ptr)
        rt.memcpyAsync(host_out.ctypes.data, dev_out.data.ptr, out_bytes, rt.memcpyDeviceToHost, ptr)

    return timer(round_trip, big=True)


def bench(name: str, dtype: Any, n: int, timer: Timer, with_host: bool) -> list[dict[str, Any]]:
    kernel = gf.registry[name]
    rng = np.random.default_rng(0)
    x_host = rng.normal(size=n).astype(dtype)
    x = cp.asarray(x_host)
    extra = scalars(name, dtype)
    size_args = (ORDERS,) if name == "hermite_norm" else ()
    big = n >= 10**7
    nbytes = traffic(name, n, np.dtype(dtype).itemsize)
    copy = copy_time(timer, nbytes)
    out = cp.empty((ORDERS, n), dtype).T if name == "hermite_norm" else cp.empty(n, dtype)
    ours = {
        "device": timer.both(lambda: kernel(x, *extra, *size_args), big),
        "device+out": timer.both(lambda: kernel(x, *extra, *size_args, out=out), big),
    }
    ek = CUPY[name]
    if name == "hermite_norm":
        raw = cp.empty((ORDERS, n), dtype)
        cupy_t = timer.both(lambda: ek(x, np.int32(ORDERS), np.int64(n), raw), big)
        cupy = {"device": cupy_t, "device+out": cupy_t}  # it only writes a given buffer
    else:
        cupy = {"device": timer.both(lambda: ek(x, *extra), big),
                "device+out": timer.both(lambda: ek(x, *extra, out), big)}
    numba_t = numba_device_time(name, x_host, extra, timer, big)
    rows = []
    for case, t in ours.items():
        rows.append(row(name, dtype, n, case, t, nbytes, copy=copy, cupy=cupy[case], numba=numba_t))
    if with_host:
        t = timer.both(lambda: kernel(x_host, *extra, *size_args, target="cuda"), big=True)
        in_b, out_b = n * x_host.itemsize, nbytes - n * x_host.itemsize
        numba_host = (numba_host_time(name, x_host, extra, timer)
                      if name != "hermite_norm" else None)
        rows.append(row(name, dtype, n, "host", t, nbytes, numba=numba_host,
                        pinned=pinned_time(timer, in_b, out_b)))
    cp.get_default_memory_pool().free_all_blocks()
    return rows


def numba_device_time(name: str, x_host: np.ndarray, extra: tuple[Any, ...], timer: Timer,
                      big: bool) -> float:
    numba_object = gf.get(name, target="cuda")
    dx = cuda.to_device(x_host)
    if name == "hermite_norm":  # row layout, (n, 32) contiguous, as usually written
        dout = cuda.device_array((x_host.size, ORDERS), x_host.dtype)
        size = cuda.to_device(np.empty(ORDERS, x_host.dtype))
        return timer(lambda: numba_object(dx, size, dout), big)
    dout = cuda.device_array(x_host.size, x_host.dtype)
    return timer(lambda: numba_object(dx, *extra, out=dout), big)


def numba_host_time(name: str, x_host: np.ndarray, extra: tuple[Any, ...], timer: Timer) -> float:
    numba_object = gf.get(name, target="cuda")
    return timer(lambda: numba_object(x_host, *extra), big=True)


def row(name, dtype, n, case, t, nbytes, copy=None, cupy=None, numba=None, pinned=None) -> dict[str, Any]:
    """One table row; ``t``, ``copy`` and ``cupy`` are (call + sync, pipelined) pairs."""
    sync, pipe = t

    def ratio(ours, other):
        return round(ours / other, 3) if other else ""

    return {"kernel": name, "dtype": np.dtype(dtype).name, "n": n, "case": case,
            "sync_us": round(sync * 1e6, 2), "pipe_us": round(pipe * 1e6, 2),
            "GB/s": round(nbytes / pipe / 1e9, 1),
            "x_copy_sync": ratio(sync, copy and copy[0]), "x_copy": ratio(pipe, copy and copy[1]),
            "x_cupy_sync": ratio(sync, cupy and cupy[0]), "x_cupy": ratio(pipe, cupy and cupy[1]),
            "x_numba": ratio(pipe, numba), "x_pinned": ratio(pipe, pinned)}


def small_calls(timer: Timer) -> list[dict[str, Any]]:
    """gaussian float32, n = 1000, by array kind and output, against CuPy's ElementwiseKernel:
    call + synchronize, and pipelined (:data:`PIPELINE` calls, one synchronize)."""
    import torch

    x_host = np.linspace(-3, 3, 1000, dtype=np.float32)
    arrays = {"cupy": cp.asarray(x_host), "numba": cuda.to_device(x_host),
              "torch": torch.as_tensor(x_host, device="cuda")}
    outs = {"cupy": cp.empty(1000, cp.float32), "numba": cuda.device_array(1000, np.float32),
            "torch": torch.empty(1000, dtype=torch.float32, device="cuda")}
    ek = CUPY["gaussian"]
    x, out = arrays["cupy"], outs["cupy"]
    a, b = np.float32(X0), np.float32(SIGMA)
    theirs = {"alloc": lambda: ek(x, a, b), "out=": lambda: ek(x, a, b, out)}
    reference = {how: (timer.each(f), timer.batch(f)) for how, f in theirs.items()}
    torch_exp = timer.batch(lambda: torch.exp(arrays["torch"]))
    rows = []
    for kind, arg in arrays.items():
        for how in ("alloc", "out="):
            kwargs = {"out": outs[kind]} if how == "out=" else {}

            def ours(arg=arg, kwargs=kwargs):
                return gf.gaussian(arg, X0, SIGMA, **kwargs)

            sync, pipe = timer.each(ours), timer.batch(ours)
            c_sync, c_pipe = reference[how]
            rows.append({"array kind": kind, "output": how, "sync_us": round(sync * 1e6, 2),
                         "cupy_sync_us": round(c_sync * 1e6, 2), "x_cupy_sync": round(sync / c_sync, 3),
                         "pipe_us": round(pipe * 1e6, 2), "cupy_pipe_us": round(c_pipe * 1e6, 2),
                         "x_cupy_pipe": round(pipe / c_pipe, 3),
                         "torch_exp_pipe_us": round(torch_exp * 1e6, 2)})
    return rows


def first_call_seconds() -> str:
    """A new process: import, CUDA context, first gaussian call (kernel from the disk cache)."""
    code = ("import time; t0 = time.perf_counter(); import numpy as np, gpufuncs as gf; "
            "from numba import cuda; x = cuda.to_device(np.ones(10, np.float32)); "
            "t1 = time.perf_counter(); gf.gaussian(x, 0.0, 1.0); cuda.synchronize(); "
            "t2 = time.perf_counter(); print(f'{t1 - t0:.2f} s import + context, '"
            "f'{t2 - t1:.2f} s first call')")
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip()
            for _ in range(2)]
    return runs[-1]


def targets(rows: list[dict[str, Any]], small: list[dict[str, Any]]) -> list[str]:
    """The issue's targets, met or not, read from this run's rows."""
    def find(*key):
        return next((r for r in rows if (r["kernel"], r["dtype"], r["n"], r["case"]) == key), None)

    def verdict(value, limit):
        return f"{value} (target <= {limit}: {'met' if value <= limit else 'NOT MET'})"

    lines = []
    for r in small:
        lines.append(f"gaussian f32 n=1e3 {r['array kind']} {r['output']}: call+sync {r['sync_us']} us = "
                     f"{verdict(r['x_cupy_sync'], 1.0)}x CuPy; pipelined {r['pipe_us']} us = "
                     f"{verdict(r['x_cupy_pipe'], 1.5)}x CuPy")
    g = find("gaussian", "float32", 10**8, "device")
    if g:
        lines.append(f"gaussian f32 n=1e8 device: call+sync {verdict(g['x_copy_sync'], 1.15)}x a copy "
                     f"(pipelined {g['x_copy']}x)")
    h = find("hermite_norm", "float32", 10**7, "device")
    if h:
        lines.append(f"hermite_norm f32 32 orders 1e7 device: call+sync {verdict(h['x_copy_sync'], 1.3)}x "
                     f"a copy (pipelined {h['x_copy']}x)")
    g = find("gaussian", "float32", 10**8, "host")
    if g:
        lines.append(f"gaussian f32 n=1e8 host: {g['x_numba']}x numba vectorize(cuda) on NumPy; "
                     f"{g['x_pinned']}x the pinned round trip")
    return lines


def cases(quick: bool, targets_only: bool) -> list[tuple[str, Any, int, bool]]:
    """(kernel, dtype, n, with the host path) for every row."""
    if targets_only:
        return [("gaussian", np.float32, 10**8, False), ("hermite_norm", np.float32, 10**7, False)]
    found = []
    for name in ("gaussian", "exp", "clamp", "hermite_norm"):
        for dtype in (np.float32, np.float64):
            for n in HERMITE_SIZES if name == "hermite_norm" else SIZES:
                if quick and n > 10**6:
                    continue
                host_limit = 10**6 if name == "hermite_norm" else 10**7
                with_host = n <= host_limit or (name, dtype, n) == ("gaussian", np.float32, 10**8)
                found.append((name, dtype, n, with_host))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="n up to 10^6, fewer repetitions")
    parser.add_argument("--targets-only", action="store_true", help="only the cases targets name")
    args = parser.parse_args()
    timer = Timer(args.quick)
    rows: list[dict[str, Any]] = []
    for name in gf.names():
        if name not in CUPY:
            raise SystemExit(f"kernel {name!r} has no benchmark entry in CUPY: add one")
    small = small_calls(timer)
    print(format_table(small, list(small[0])), flush=True)
    for name, dtype, n, with_host in cases(args.quick, args.targets_only):
        rows += bench(name, dtype, n, timer, with_host)
        print(format_table(rows[-3:], COLUMNS).split("\n", 1)[1], flush=True)
    summary = targets(rows, small)
    print("\n".join(summary))
    if args.targets_only:
        return
    device = cuda.get_current_device()
    gpu = device.name.decode() if isinstance(device.name, bytes) else device.name
    meta = machine_info({"gpu": gpu, "cupy": cp.__version__, "first_call": first_call_seconds(),
                         "targets": summary})
    slug = "h100" if "H100" in gpu else gpu.lower().replace(" ", "-")
    path = save_results(f"gpu-{slug}", rows, COLUMNS, meta)
    save_results(f"gpu-{slug}_small", small, list(small[0]), meta)
    print(path.read_text())


if __name__ == "__main__":
    main()
