"""GPU benchmark: the cuda target against the memory limit, CuPy and Numba, on one GPU.

The ``gpu`` suite of ``python -m benchmarks``: run it on a GPU machine with ``--suite gpu`` (a
few minutes; ``--quick`` for n up to 10^6). Needs CuPy. ``--save`` writes
``results/gpu-<gpu>.{txt,json}``.

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
synchronize and pipelined; each row's calls are interleaved with CuPy's (``measure_pair``), so
that the machine's drift during the run does not land on one side of a ratio close to 1.
``--targets-only`` runs just the cases that issue targets name (saved only into a ``--save DIR``).

Kernels, their scalar arguments and their CuPy formulas come from the registry (each kernel's
``benchmark=gf.Benchmark(..., cupy=gf.CupyFormula(...))``, see :mod:`cases`); a kernel without a
CuPy formula stops the run naming it. On a machine without CuPy or a GPU the suite is skipped,
saying why (:func:`unavailable`).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

import gpufuncs as gf

try:  # the suite runs only with both; unavailable() says which one is missing
    import cupy as cp
except ImportError:
    cp = None

from .cases import Case, cases, cupy_missing
from .harness import machine_info, measure, measure_pair

SIZES = tuple(10**e for e in range(3, 9))
DTYPES = (np.float32, np.float64)
MAX_OUTPUTS = 32 * 10**7  # output elements per call: hermite_norm (32 orders) stops at 10^7 samples
HOST_MAX_OUTPUTS = 32 * 10**6  # host rows: up to 10^7 elements, hermite_norm up to 10^6 samples
HOST_EXTRA = ("gaussian", np.float32, 10**8)  # the host-path target of the issues
SMALL = ("gaussian", 1000)  # the small-call table: kernel and n
COLUMNS = ("kernel", "dtype", "n", "case", "sync_us", "pipe_us", "GB/s", "x_copy_sync", "x_copy",
           "x_cupy_sync", "x_cupy", "x_numba", "x_pinned")
#: Calls per repetition of the pipelined small-call figures (one synchronize per batch).
PIPELINE = 200

Step = tuple[str, Callable[[], list[dict[str, Any]]]]


def unavailable() -> str | None:
    """Why the GPU suite cannot run on this machine, or ``None`` when it can."""
    if cp is None:
        return "CuPy is not installed (its ElementwiseKernel is the GPU anchor): pip install cupy-cuda12x"
    try:
        count = cp.cuda.runtime.getDeviceCount()
    except Exception as exc:  # CUDARuntimeError without a driver or device
        return f"CuPy finds no CUDA GPU ({exc})"
    if count == 0:
        return "CuPy finds no CUDA GPU"
    if "cuda" not in gf.available_targets():
        from gpufuncs.targets import get_target

        return f"gpufuncs' cuda target is unavailable: {get_target('cuda').unavailable_reason()}"
    return None


def cupy_kernels(selected: list[Case]) -> dict[str, Any]:
    """Each kernel's CuPy ``ElementwiseKernel`` (its declared formula), by name."""
    missing = cupy_missing(selected)
    if missing:
        raise SystemExit(f"kernels without a CuPy formula (benchmark=gf.Benchmark(..., cupy=...)): "
                         f"{', '.join(missing)}")
    return {case.name: cp.ElementwiseKernel(case.bench.cupy.in_params, case.bench.cupy.out_params,
                                            case.bench.cupy.operation, f"bench_{case.name}")
            for case in selected}


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
        # 25 for big calls too: with 9, one 1e8 run put a call that takes 1.08x a copy at 1.21x.
        repeat = 25 if big else (60 if self.quick else 200)
        return measure(fn, sync=self.stream.synchronize, warmup=5, repeat=repeat, inner=1)

    def both(self, fn: Callable[[], Any], big: bool = False) -> tuple[float, float]:
        """(call + synchronize, pipelined)."""
        return self.each(fn, big), self(fn, big)

    def batch(self, fn: Callable[[], Any]) -> float:
        """:data:`PIPELINE` calls, then one synchronize."""
        return measure(fn, sync=self.stream.synchronize, warmup=20, repeat=15, inner=PIPELINE)

    def against(self, fn: Callable[[], Any], ref: Callable[[], Any]) -> tuple[float, float, float, float]:
        """``fn`` and ``ref`` interleaved (see :func:`harness.measure_pair`): (call + synchronize
        of each, then :data:`PIPELINE` calls and one synchronize of each)."""
        sync = self.stream.synchronize
        each = measure_pair(fn, ref, sync=sync, repeat=60 if self.quick else 300)
        batch = measure_pair(fn, ref, sync=sync, warmup=20, repeat=10 if self.quick else 25, inner=PIPELINE)
        return (*each, *batch)


def copy_time(timer: Timer, nbytes: int) -> tuple[float, float]:
    """A device-to-device copy that reads and writes ``nbytes`` in total (sync, pipelined)."""
    half = max(nbytes // 2, 1)
    src, dst = cp.empty(half, cp.uint8), cp.empty(half, cp.uint8)
    kind = cp.cuda.runtime.memcpyDeviceToDevice
    return timer.both(lambda: cp.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, half, kind,
                                                          timer.stream.ptr), big=True)


def pinned_time(timer: Timer, in_bytes: int, out_bytes: int) -> float:
    """A pinned host->device copy of ``in_bytes`` and device->host of ``out_bytes`` (pipelined)."""
    from numba import cuda

    host_in = cuda.pinned_array(in_bytes, np.uint8)
    host_out = cuda.pinned_array(out_bytes, np.uint8)
    dev_in, dev_out = cp.empty(in_bytes, cp.uint8), cp.empty(out_bytes, cp.uint8)
    rt, ptr = cp.cuda.runtime, timer.stream.ptr

    def round_trip():
        rt.memcpyAsync(dev_in.data.ptr, host_in.ctypes.data, in_bytes, rt.memcpyHostToDevice, ptr)
        rt.memcpyAsync(host_out.ctypes.data, dev_out.data.ptr, out_bytes, rt.memcpyDeviceToHost, ptr)

    return timer(round_trip, big=True)


def device_out(case: Case, n: int, dtype: Any) -> Any:
    """A CuPy ``out=`` in the cuda target's own layout: order-major, seen as ``(n,) + sizes``."""
    sizes = case.bench.sizes
    return cp.empty((*reversed(sizes), n), dtype).T if sizes else cp.empty(n, dtype)


def cupy_calls(case: Case, ek: Any, x: Any, extra: tuple[Any, ...], out: Any) -> dict[str, Callable]:
    """The anchor's calls by case: a new output (``device``) and ``out=`` (``device+out``).

    A generalized kernel's formula writes a given order-major buffer (see
    :class:`gpufuncs.CupyFormula`), so both cases are that one call.
    """
    if case.kernel.spec.is_gufunc:
        n = x.shape[0]
        raw = cp.empty((*case.bench.sizes, n), x.dtype)
        sizes = tuple(np.int32(s) for s in case.bench.sizes)

        def into_raw():
            return ek(x, *extra, *sizes, np.int64(n), raw)

        return {"device": into_raw, "device+out": into_raw}
    return {"device": lambda: ek(x, *extra), "device+out": lambda: ek(x, *extra, out)}


def bench(case: Case, dtype: Any, n: int, timer: Timer, ek: Any, with_host: bool) -> list[dict[str, Any]]:
    """The rows of one kernel, dtype and size: device, device+out and (``with_host``) host."""
    kernel, name = case.kernel, case.name
    x_host = np.random.default_rng(0).normal(size=n).astype(dtype)
    x = cp.asarray(x_host)
    extra = case.inputs(x_host)[case.bench.arrays:]
    inputs, sizes = (x,) * case.bench.arrays + extra, case.bench.sizes
    big = n >= 10**7
    nbytes = case.nbytes(n, dtype)
    copy = copy_time(timer, nbytes)
    out = device_out(case, n, dtype)
    ours = {"device": timer.both(lambda: kernel(*inputs, *sizes), big),
            "device+out": timer.both(lambda: kernel(*inputs, *sizes, out=out), big)}
    calls = cupy_calls(case, ek, x, extra, out)
    distinct = {id(f): f for f in calls.values()}  # a gufunc's two cases are one call: timed once
    timings = {key: timer.both(f, big) for key, f in distinct.items()}
    cupy = {c: timings[id(f)] for c, f in calls.items()}
    numba_t = numba_device_time(case, x_host, extra, timer, big)
    rows = [row(name, dtype, n, c, t, nbytes, copy=copy, cupy=cupy[c], numba=numba_t)
            for c, t in ours.items()]
    if with_host:
        host_inputs = (x_host,) * case.bench.arrays + extra
        t = timer.both(lambda: kernel(*host_inputs, *sizes, target="cuda"), big=True)
        in_b = n * x_host.itemsize * case.bench.arrays
        numba_host = None if kernel.spec.is_gufunc else numba_host_time(case, host_inputs, timer)
        rows.append(row(name, dtype, n, "host", t, nbytes, numba=numba_host,
                        pinned=pinned_time(timer, in_b, nbytes - in_b)))
    cp.get_default_memory_pool().free_all_blocks()
    return rows


def numba_device_time(case: Case, x_host: np.ndarray, extra: tuple[Any, ...], timer: Timer,
                      big: bool) -> float:
    """Numba's ``@vectorize``/``@guvectorize`` (cuda) on Numba device arrays with ``out=``;
    a gufunc's output in row layout, ``(n,) + sizes`` contiguous, as usually written."""
    from numba import cuda

    numba_object = gf.get(case.name, target="cuda")
    dx = cuda.to_device(x_host)
    arrays = (dx,) * case.bench.arrays
    if case.kernel.spec.is_gufunc:
        # Numba's object takes one extra input per output-only size, whose core shape gives it.
        size_inputs = [cuda.to_device(np.empty(s, x_host.dtype)) for s in case.bench.sizes]
        dout = cuda.device_array((x_host.size, *case.bench.sizes), x_host.dtype)
        return timer(lambda: numba_object(*arrays, *extra, *size_inputs, dout), big)
    dout = cuda.device_array(x_host.size, x_host.dtype)
    return timer(lambda: numba_object(*arrays, *extra, out=dout), big)


def numba_host_time(case: Case, host_inputs: tuple[Any, ...], timer: Timer) -> float:
    """Numba's ``@vectorize(target="cuda")`` called on NumPy arrays (it copies both ways)."""
    numba_object = gf.get(case.name, target="cuda")
    return timer(lambda: numba_object(*host_inputs), big=True)


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


def small_calls(timer: Timer, ek: Any) -> list[dict[str, Any]]:
    """The :data:`SMALL` kernel in float32, by array kind and output, against its CuPy
    ``ElementwiseKernel`` ``ek``: call + synchronize, and pipelined (:data:`PIPELINE` calls,
    one synchronize)."""
    from numba import cuda

    try:
        import torch
    except ImportError:  # named when the run starts; its rows are left out
        torch = None
    name, n = SMALL
    case = cases([name])[0]
    x_host = np.linspace(-3, 3, n, dtype=np.float32)
    arrays = {"cupy": cp.asarray(x_host), "numba": cuda.to_device(x_host)}
    outs = {"cupy": cp.empty(n, cp.float32), "numba": cuda.device_array(n, np.float32)}
    if torch is not None:
        arrays["torch"] = torch.as_tensor(x_host, device="cuda")
        outs["torch"] = torch.empty(n, dtype=torch.float32, device="cuda")
    extra = case.inputs(x_host)[case.bench.arrays:]
    x, out = arrays["cupy"], outs["cupy"]
    theirs = {"alloc": lambda: ek(x, *extra), "out=": lambda: ek(x, *extra, out)}
    torch_exp = timer.batch(lambda: torch.exp(arrays["torch"])) if torch is not None else None
    rows = []
    kernel, scalars = case.kernel, case.bench.scalars  # Python floats, as users pass them
    for kind, arg in arrays.items():
        # Written as a user writes the call: out= as a keyword, no ** of a dict (which CuPy's
        # side, given its output positionally, does not pay either).
        ours = {"alloc": lambda arg=arg: kernel(arg, *scalars),
                "out=": lambda arg=arg, out=outs[kind]: kernel(arg, *scalars, out=out)}
        for how in ("alloc", "out="):
            # CuPy's call is measured again for each row, interleaved with ours (see against).
            sync, c_sync, pipe, c_pipe = timer.against(ours[how], theirs[how])
            rows.append({"array kind": kind, "output": how, "sync_us": round(sync * 1e6, 2),
                         "cupy_sync_us": round(c_sync * 1e6, 2), "x_cupy_sync": round(sync / c_sync, 3),
                         "pipe_us": round(pipe * 1e6, 2), "cupy_pipe_us": round(c_pipe * 1e6, 2),
                         "x_cupy_pipe": round(pipe / c_pipe, 3),
                         "torch_exp_pipe_us": None if torch_exp is None else round(torch_exp * 1e6, 2)})
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

    def verdict(value: float, limit: float, note: str) -> str:
        """As the CPU suite writes them: ``<figure> (<= <goal>) met [<note>]``."""
        return f"{value:.3f} (<= {limit}) {'met' if value <= limit else 'NOT MET'} [{note}]"

    lines = []
    for r in small:
        what = f"gaussian f32 n=1e3 {r['array kind']} {r['output']}"
        sync, pipe = f"{r['sync_us']} us", f"{r['pipe_us']} us"
        lines.append(f"{what} call+sync/CuPy: {verdict(r['x_cupy_sync'], 1.0, sync)}")
        lines.append(f"{what} pipelined/CuPy: {verdict(r['x_cupy_pipe'], 1.5, pipe)}")
    for (kernel, n, label, limit) in (("gaussian", 10**8, "gaussian f32 n=1e8", 1.15),
                                      ("hermite_norm", 10**7, "hermite_norm f32 32 orders n=1e7", 1.3)):
        r = find(kernel, "float32", n, "device")
        if r:
            piped = f"pipelined {r['x_copy']}"
            lines.append(f"{label} device call+sync/copy: {verdict(r['x_copy_sync'], limit, piped)}")
    g = find("gaussian", "float32", 10**8, "host")
    if g:
        lines.append(f"gaussian f32 n=1e8 host: {g['x_numba']}x numba vectorize(cuda) on NumPy; "
                     f"{g['x_pinned']}x the pinned round trip")
    return lines


TARGET_ROWS = (("gaussian", 10**8), ("hermite_norm", 10**7))  # --targets-only: float32, device


def plan(selected: list[Case], quick: bool = False, targets_only: bool = False,
         sizes: tuple[int, ...] = SIZES,
         dtypes: tuple[Any, ...] = DTYPES) -> list[tuple[Case, Any, int, bool]]:
    """(case, dtype, n, with the host path) for every row group: sizes up to
    :data:`MAX_OUTPUTS` output elements (10^6 samples with ``quick``), host rows up to
    :data:`HOST_MAX_OUTPUTS` and :data:`HOST_EXTRA`."""
    if targets_only:
        return [(c, np.float32, n, False) for c in selected for name, n in TARGET_ROWS if c.name == name]
    found = []
    for case in selected:
        for dtype in dtypes:
            for n in sizes:
                outputs = n * case.outputs_per_sample
                if outputs > MAX_OUTPUTS or (quick and n > 10**6):
                    continue
                with_host = outputs <= HOST_MAX_OUTPUTS or (case.name, dtype, n) == HOST_EXTRA
                found.append((case, dtype, n, with_host))
    return found


def gpu_steps(selected: list[Case], timer: Timer, quick: bool = False, targets_only: bool = False,
              sizes: tuple[int, ...] = SIZES, dtypes: tuple[Any, ...] = DTYPES) -> list[Step]:
    """The main table's row groups as steps."""
    kernels = cupy_kernels(selected)
    return [(f"gpu {case.name} {np.dtype(dtype).name} n={n:.0e}",
             lambda case=case, dtype=dtype, n=n, host=host: bench(case, dtype, n, timer,
                                                                 kernels[case.name], host))
            for case, dtype, n, host in plan(selected, quick, targets_only, sizes, dtypes)]


def small_steps(timer: Timer) -> list[Step]:
    """The small-call table as one step (none when its kernel is not registered)."""
    name = SMALL[0]
    if name not in gf.registry:
        return []
    ek = cupy_kernels(cases([name]))[name]
    return [(f"gpu small calls {name}", lambda: small_calls(timer, ek))]


def gpu_meta(summary: list[str]) -> dict[str, Any]:
    """The result files' meta: machine, GPU, versions, first-call time, the targets' verdicts."""
    from numba import cuda

    device = cuda.get_current_device()
    gpu = device.name.decode() if isinstance(device.name, bytes) else device.name
    return machine_info({"gpu": gpu, "cupy": cp.__version__, "first_call": first_call_seconds(),
                         "targets": summary})


def slug(gpu: str) -> str:
    """The results file name part of a GPU: ``h100`` for any H100."""
    return "h100" if "H100" in gpu else gpu.lower().replace(" ", "-")

