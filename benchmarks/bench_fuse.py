"""``gf.fuse`` against the same chain of calls unfused, and against the tools users fuse with.

The chain of issue 31, ``clamp(gaussian(x, mu, s) * w + np.exp(-x), 0, 1)`` on float32:

- fused: :data:`fused_chain` (``gf.fuse``), one pass over memory;
- unfused: the same calls run eagerly (gpufuncs kernels and NumPy's or CuPy's ``exp``), a
  temporary per step;
- on the CPU: NumPy's eager expression and numexpr (all threads) where installed;
- on the GPU: ``cupy.fuse`` of the same function written with CuPy's functions, and
  ``torch.compile`` (default mode, after its warm-up) where PyTorch is installed.

Run ``python -m benchmarks.bench_fuse`` (the host; ``--target parallel`` for all cores) or
``python -m benchmarks.bench_fuse --gpu`` (CuPy arrays on the first GPU). The rows are printed;
``--save`` writes them to ``benchmarks/results/<name>_fuse.{json,txt}`` (``--name``; ``--save
DIR``: into ``DIR``). numexpr and PyTorch, where not installed, are named at the start and
left out. Ratios are medians of
interleaved repetitions (see :func:`harness.measure_pair`), times medians after warm-up; GPU
times are call + synchronize and pipelined (a stream of calls, one synchronize).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import gpufuncs as gf

from .harness import (
    add_save_argument,
    format_table,
    machine_info,
    measure,
    measure_pair,
    missing_module,
    not_saved_hint,
    save_results,
)

MU, SIGMA, W = 0.5, 1.5, 2.0
_INV_SQRT_2PI = 1 / math.sqrt(2 * math.pi)


def chain(x, mu, s, w):
    """The chain, as a user writes it with gpufuncs kernels and NumPy."""
    return gf.clamp(gf.gaussian(x, mu, s) * w + np.exp(-x), 0, 1)


fused_chain = gf.fuse(chain)


def _host_calls(x: np.ndarray, target: str) -> dict[str, Callable[[], Any]]:
    """The fused chain and its anchors on ``x``."""
    calls = {
        "fused": lambda: fused_chain(x, MU, SIGMA, W, target=target),
        "unfused": lambda: gf.clamp(gf.gaussian(x, MU, SIGMA, target=target) * W + np.exp(-x), 0, 1,
                                    target=target),
        "numpy": lambda: np.clip(np.exp(-0.5 * ((x - MU) / SIGMA) ** 2) * (_INV_SQRT_2PI / SIGMA * W)
                                 + np.exp(-x), 0, 1),
    }
    try:
        import numexpr
    except ImportError:
        return calls
    density = f"exp(-0.5 * ((x - {MU}) / {SIGMA}) ** 2) * {_INV_SQRT_2PI / SIGMA * W} + exp(-x)"
    calls["numexpr"] = lambda: numexpr.evaluate("where(v < 0, 0, where(v > 1, 1, v))", local_dict={
        "v": numexpr.evaluate(density, local_dict={"x": x})})
    return calls


def cpu_rows(sizes: tuple[int, ...], target: str, quick: bool) -> list[dict[str, Any]]:
    """Fused, unfused, NumPy and numexpr on the host, per size (µs per call)."""
    return _host_rows(_host_calls, sizes, target, quick)


def _host_rows(calls_on: Callable[[np.ndarray, str], dict[str, Callable[[], Any]]], sizes: tuple[int, ...],
               target: str, quick: bool) -> list[dict[str, Any]]:
    """Per size, each call's time (µs) and the fused call's ratio to each other one."""
    rows = []
    for n in sizes:
        calls = calls_on(np.random.default_rng(n).uniform(-4, 4, n).astype(np.float32), target)
        repeat = 5 if quick else (15 if n >= 10**7 else 60)
        row: dict[str, Any] = {"n": n, "target": target}
        for label, fn in calls.items():
            row[f"{label} us"] = round(1e6 * measure(fn, repeat=repeat, inner=1), 2)
        for label in calls:
            if label != "fused":
                pair = measure_pair(calls["fused"], calls[label], inner=None, repeat=repeat)
                row[f"fused/{label}"] = round(pair[0] / pair[1], 3)
        rows.append(row)
    return rows


@gf.fuse
def log_likelihood(x, mu, s):
    """A transform and a reduction: the fused log-likelihood (issue 31)."""
    return np.log(gf.gaussian(x, mu, s)).sum()


def _loglik_calls(x: np.ndarray, target: str) -> dict[str, Callable[[], Any]]:
    mu, s, norm = np.float32(MU), np.float32(SIGMA), np.float32(_INV_SQRT_2PI / SIGMA)
    return {
        "fused": lambda: log_likelihood(x, mu, s, target=target),
        "unfused": lambda: np.log(gf.gaussian(x, mu, s, target=target)).sum(),
        "numpy": lambda: np.log(np.exp(np.float32(-0.5) * ((x - mu) / s) ** 2) * norm).sum(),
        "sum(x)": lambda: np.sum(x),
    }


def loglik_rows(sizes: tuple[int, ...], target: str, quick: bool) -> list[dict[str, Any]]:
    """The log-likelihood fused, as the same calls unfused, as NumPy's eager expression, and
    ``np.sum(x)`` alone (reading ``x`` once: the floor of any pass over it), µs per call."""
    return _host_rows(_loglik_calls, sizes, target, quick)


#: Fused reductions beside NumPy's own: (label, the function, its input's dtype and shape of n).
REDUCTIONS: tuple[tuple[str, Callable[[Any], Any], Any, Callable[[int], tuple[int, ...]]], ...] = (
    ("x.sum() float32", lambda x: x.sum(), np.float32, lambda n: (n,)),
    ("x.sum() float64", lambda x: x.sum(), np.float64, lambda n: (n,)),
    ("x.max() float64", lambda x: x.max(), np.float64, lambda n: (n,)),
    ("(x * 3).mean(axis=0) float32", lambda x: (x * 3).mean(axis=0), np.float32,
     lambda n: (n // 1000, 1000)),
    ("(x * 3).max(axis=1) float64", lambda x: (x * 3).max(axis=1), np.float64,
     lambda n: (n // 1000, 1000)),
    ("x.sum(axis=1) float64, rows of 10", lambda x: x.sum(axis=1), np.float64, lambda n: (n // 10, 10)),
    ("x.sum(axis=1) float64, rows of 100", lambda x: x.sum(axis=1), np.float64, lambda n: (n // 100, 100)),
    ("x.sum(axis=1) float64, rows of 1000", lambda x: x.sum(axis=1), np.float64, lambda n: (n // 1000, 1000)),
    ("x.sum(axis=1) float32, rows of 10", lambda x: x.sum(axis=1), np.float32, lambda n: (n // 10, 10)),
    ("x.sum(axis=1) float32, rows of 100", lambda x: x.sum(axis=1), np.float32, lambda n: (n // 100, 100)),
    ("x.sum(axis=1) float32, rows of 1000", lambda x: x.sum(axis=1), np.float32, lambda n: (n // 1000, 1000)),
    ("x[:10**5].sum() float64", lambda x: x.sum(), np.float64, lambda n: (min(n, 10**5),)),
    ("log-density sum(axis=1) float32, rows of 100",
     lambda x: np.log(np.exp(-0.5 * ((x - 0.5) / 1.5) ** 2) * 0.266).sum(axis=1), np.float32,
     lambda n: (n // 100, 100)),
    ("(x * 3).sum() float64, 10 values", lambda x: (x * 3).sum(), np.float64, lambda n: (10,)),
)


def reduction_rows(sizes: tuple[int, ...], target: str, quick: bool) -> list[dict[str, Any]]:
    """Each of :data:`REDUCTIONS` fused and as NumPy computes it eagerly, µs per call."""
    rows = []
    for n in sizes:
        for label, func, dtype, shape in REDUCTIONS:
            x = np.random.default_rng(n).uniform(-4, 4, shape(n)).astype(dtype)
            fused = gf.fuse(func)
            calls = {"fused": lambda f=fused, x=x: f(x, target=target), "numpy": lambda f=func, x=x: f(x)}
            repeat = 5 if quick else (15 if n >= 10**7 else 60)
            row: dict[str, Any] = {"n": n, "target": target, "kernel": label}
            for name, call in calls.items():
                row[f"{name} us"] = round(1e6 * measure(call, repeat=repeat, inner=1), 2)
            pair = measure_pair(calls["fused"], calls["numpy"], inner=None, repeat=repeat)
            row["fused/numpy"] = round(pair[0] / pair[1], 3)
            rows.append(row)
    return rows


def torch_chain(t: Any) -> Any:
    """The chain written with PyTorch's functions (what ``torch.compile`` compiles)."""
    import torch

    v = torch.exp(-0.5 * ((t - MU) / SIGMA) ** 2) * (_INV_SQRT_2PI / SIGMA * W) + torch.exp(-t)
    return torch.clamp(v, 0, 1)


def torch_loglik(t: Any) -> Any:
    """The log-likelihood written with PyTorch's functions."""
    import torch

    return torch.log(torch.exp(-0.5 * ((t - MU) / SIGMA) ** 2) * (_INV_SQRT_2PI / SIGMA)).sum()


@functools.cache
def cupy_chain() -> Any:
    """The chain written with CuPy's functions, as ``cupy.fuse`` of ``(x, mu, s, w)``."""
    import cupy as cp

    @cp.fuse()
    def chain(x, mu, s, w):
        v = cp.exp(-0.5 * ((x - mu) / s) ** 2) * (_INV_SQRT_2PI / s) * w + cp.exp(-x)
        return cp.minimum(cp.maximum(v, 0), 1)

    return chain


def gpu_rows(sizes: tuple[int, ...], quick: bool) -> list[dict[str, Any]]:
    """The chain fused, unfused, ``cupy.fuse`` and ``torch.compile`` on the GPU: call +
    synchronize and pipelined, as ratios of interleaved repetitions (µs per call besides)."""
    import cupy as cp

    anchors: dict[str, Callable[[Any], Callable[[], Any]]] = {
        "unfused": lambda x: lambda: gf.clamp(gf.gaussian(x, MU, SIGMA) * W + cp.exp(-x), 0, 1),
        "cupy.fuse": lambda x: lambda: cupy_chain()(x, cp.float32(MU), cp.float32(SIGMA), cp.float32(W)),
    }
    return _gpu_rows(sizes, quick, lambda x: functools.partial(fused_chain, x, MU, SIGMA, W),
                     anchors, torch_chain)


def gpu_loglik_rows(sizes: tuple[int, ...], quick: bool) -> list[dict[str, Any]]:
    """The log-likelihood fused, as the same calls unfused (``gf.gaussian``, ``cp.log``,
    ``.sum()``), ``cp.sum(x)`` alone (reading ``x`` once) and ``torch.compile`` on the GPU."""
    import cupy as cp

    anchors: dict[str, Callable[[Any], Callable[[], Any]]] = {
        "unfused": lambda x: lambda: cp.log(gf.gaussian(x, MU, SIGMA)).sum(),
        "cp.sum(x)": lambda x: lambda: cp.sum(x),
    }
    return _gpu_rows(sizes, quick, lambda x: functools.partial(log_likelihood, x, MU, SIGMA),
                     anchors, torch_loglik)


def _gpu_rows(sizes: tuple[int, ...], quick: bool, fused_on: Callable[[Any], Callable[[], Any]],
              anchors: dict[str, Callable[[Any], Callable[[], Any]]],
              torch_function: Callable[[Any], Any]) -> list[dict[str, Any]]:
    """Per size, the fused call's time and its ratio to each anchor's, call + synchronize and
    pipelined; ``torch.compile`` of ``torch_function`` among the anchors where PyTorch is
    installed."""
    import cupy as cp

    from .bench_gpu import PIPELINE

    try:
        import torch

        compiled = torch.compile(torch_function)

        def on_tensor(x: Any) -> Callable[[], Any]:
            t = torch.as_tensor(x, device="cuda")
            return lambda: compiled(t)

        anchors = {**anchors, "torch.compile": on_tensor}
    except ImportError:
        pass
    sync = cp.cuda.get_current_stream().synchronize
    repeat, batch_repeat = (30, 5) if quick else (200, 15)
    rows = []
    for n in sizes:
        x = cp.asarray(np.random.default_rng(n).uniform(-4, 4, n).astype(np.float32))
        fused = fused_on(x)
        alone = measure(fused, sync=sync, repeat=repeat, inner=1)
        row: dict[str, Any] = {"n": n, "fused sync us": round(1e6 * alone, 2)}
        for label, make in anchors.items():
            anchor = make(x)
            for _ in range(3):
                anchor()
            each = measure_pair(fused, anchor, sync=sync, repeat=repeat)
            piped = measure_pair(fused, anchor, sync=sync, warmup=10, repeat=batch_repeat, inner=PIPELINE)
            row[f"{label} sync us"] = round(1e6 * each[1], 2)
            row[f"fused/{label} sync"] = round(each[0] / each[1], 3)
            row[f"fused/{label} pipe"] = round(piped[0] / piped[1], 3)
        rows.append(row)
        cp.get_default_memory_pool().free_all_blocks()
    return rows


def _save(name: str, rows: list[dict[str, Any]], meta: dict[str, Any], directory: Path,
          suite: str = "fuse") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}_{suite}.json"
    path.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    lines = [f"{k}: {v}" for k, v in meta.items()] + [""]
    lines += ["  ".join(f"{k}={v}" for k, v in row.items()) for row in rows]
    (directory / f"{name}_{suite}.txt").write_text("\n".join(lines) + "\n")
    return path


def _missing(gpu: bool) -> tuple[str | None, list[str]]:
    """What this run cannot do without: an error (CuPy for ``--gpu``), and the anchors left out."""
    prog = "python -m benchmarks.bench_fuse"
    if gpu:
        error = missing_module("cupy", "python -m pip install cupy-cuda12x", f"{prog} --gpu")
        notes = [missing_module("torch", "python -m pip install torch (left out)",
                                "the torch.compile anchor")]
    else:
        error = None
        notes = [missing_module("numexpr", "python -m pip install numexpr (left out)", "the numexpr anchor")]
    return error, [n for n in notes if n]


#: A fresh process's first call of the fused chain on ``cpu`` (float32, 10^3 values): its seconds.
_FUSED_FIRST = """
import time, numpy as np, gpufuncs as gf
x = np.linspace(-3, 3, 1000, dtype=np.float32)
@gf.fuse
def chain(x, mu, s, w):
    return gf.clamp(gf.gaussian(x, mu, s) * w + np.exp(-x), 0, 1)
t = time.perf_counter()
chain(x, 0.0, 1.0, 2.0, target="cpu")
print(time.perf_counter() - t)
"""
#: The same body written by hand as Numba's ``@vectorize`` (gaussian's own scalar function,
#: called as an ``@njit`` function): decorated, compiled and called once.
_BY_HAND_FIRST = """
import math, time, numba, numpy as np, gpufuncs as gf
x = np.linspace(-3, 3, 1000, dtype=np.float32)
gaussian = numba.njit(gf.gaussian.spec.pyfunc)
t = time.perf_counter()
@numba.vectorize(["float32(float32, float32, float32, float32)"])
def chain(x, mu, s, w):
    v = gaussian(x, mu, s) * w + math.exp(-x)
    return min(max(v, np.float32(0)), np.float32(1))
chain(x, np.float32(0), np.float32(1), np.float32(2))
print(time.perf_counter() - t)
"""


#: The fused log-likelihood's first call (a reduction: NumPy's pairwise order), the same way.
_FUSED_LOGLIK_FIRST = """
import time, numpy as np, gpufuncs as gf
x = np.linspace(-3, 3, 1000, dtype=np.float32)
@gf.fuse
def loglik(x, mu, s):
    return np.log(gf.gaussian(x, mu, s)).sum()
t = time.perf_counter()
loglik(x, 0.0, 1.0, target="cpu")
print(time.perf_counter() - t)
"""
#: The same by hand: an ``@njit`` loop adding the values one after the other (in float64, a
#: plainer sum than NumPy's pairwise one, which the fused function keeps).
_BY_HAND_LOGLIK_FIRST = """
import math, time, numba, numpy as np, gpufuncs as gf
x = np.linspace(-3, 3, 1000, dtype=np.float32)
gaussian = numba.njit(gf.gaussian.spec.pyfunc)
t = time.perf_counter()
@numba.njit
def loglik(x, mu, s):
    total = 0.0
    for v in x:
        total += math.log(gaussian(v, mu, s))
    return np.float32(total)
loglik(x, np.float32(0), np.float32(1))
print(time.perf_counter() - t)
"""

#: The first-call cases: a name, the fused code and the code by hand.
_FIRST_CALLS = (("chain, float32, cpu, empty disk cache", _FUSED_FIRST, _BY_HAND_FIRST),
                ("log-likelihood .sum(), float32, cpu, empty disk cache", _FUSED_LOGLIK_FIRST,
                 _BY_HAND_LOGLIK_FIRST))


def first_call_rows(quick: bool) -> list[dict[str, Any]]:
    """Each fused function's first call in a fresh process with an empty Numba disk cache (its
    compilation) against Numba compiling the same body written by hand, alternating, medians
    of 3 (5 unless ``quick``) processes each, seconds; and in a later process with the cache
    the first one filled (its kernels loaded)."""
    import statistics
    import subprocess
    import tempfile

    def seconds(code: str, cache: str) -> float:
        done = subprocess.run([sys.executable, "-c", code], env={**os.environ, "NUMBA_CACHE_DIR": cache},
                              check=True, capture_output=True, text=True)
        return float(done.stdout.split()[-1])

    rows = []
    for case, fused_code, hand_code in _FIRST_CALLS:
        times: dict[str, list[float]] = {"fused": [], "by hand": [], "loaded": []}
        for _ in range(3 if quick else 5):
            for name, code in (("fused", fused_code), ("by hand", hand_code)):
                with tempfile.TemporaryDirectory() as cache:
                    times[name].append(seconds(code, cache))
                    if name == "fused":  # (a later process: the cache that one filled)
                        times["loaded"].append(seconds(code, cache))
        fused, hand, loaded = (statistics.median(times[k]) for k in ("fused", "by hand", "loaded"))
        rows.append({"n": 1000, "case": case, "fused first call s": round(fused, 3),
                     "numba by hand s": round(hand, 3), "fused/by hand": round(fused / hand, 3),
                     "fused first call, warm disk cache s": round(loaded, 3)})
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", action="store_true", help="CuPy arrays on the GPU")
    parser.add_argument("--target", default="cpu", help="host target (cpu, parallel, auto)")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--name", default=None, help="results file prefix")
    parser.add_argument("--sizes", default=None, help="comma-separated sizes")
    parser.add_argument("--loglik", action="store_true",
                        help="the fused log-likelihood np.log(gaussian(x, mu, s)).sum() instead of the chain "
                             "(saved as <name>_loglik)")
    parser.add_argument("--reductions", action="store_true",
                        help="fused reductions (sum, max, mean over axis 0) beside NumPy's, host targets "
                             "(saved as <name>_reductions)")
    parser.add_argument("--first-call", action="store_true",
                        help="the fused chain's first call (compilation) in fresh processes against "
                             "Numba compiling the same body by hand (saved as <name>_firstcall)")
    add_save_argument(parser)
    opts = parser.parse_args(argv)
    if opts.first_call:
        return _first_call_main(opts)
    if opts.loglik:
        return _loglik_main(opts)
    if opts.reductions:
        return _reductions_main(opts)
    error, notes = _missing(opts.gpu)
    for line in notes:
        print(line, file=sys.stderr)
    if error:
        raise SystemExit(error)
    default = (10**5, 10**7, 10**8) if opts.gpu else (10**5, 10**7)
    sizes = tuple(int(float(s)) for s in opts.sizes.split(",")) if opts.sizes else default
    rows = gpu_rows(sizes, opts.quick) if opts.gpu else cpu_rows(sizes, opts.target, opts.quick)
    meta = machine_info({"suite": "fuse", "target": "cuda" if opts.gpu else opts.target,
                         "chain": "clamp(gaussian(x, mu, s) * w + np.exp(-x), 0, 1), float32",
                         **_gpu_meta(opts.gpu)})
    for row in rows:
        print(row, flush=True)
    name = opts.name or ("gpu" if opts.gpu else f"cpu-{opts.target}")
    if opts.save:
        print("saved", _save(name, rows, meta, opts.save))
    else:
        print(not_saved_hint())



def _gpu_meta(gpu: bool) -> dict[str, Any]:
    """The GPU and the versions of its anchors' libraries, for a ``--gpu`` run's results."""
    if not gpu:
        return {}
    import cupy as cp

    meta = {"gpu": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), "cupy": cp.__version__}
    try:
        import torch
    except ImportError:
        return meta
    return {**meta, "torch": torch.__version__}


def report_gpu_table(stem: str, rows: list[dict[str, Any]], columns: tuple[str, ...], about: dict[str, Any],
                     save: Any) -> None:
    """Print a GPU table and, where ``save`` (``--save``'s folder) is given, save it as
    ``<stem>-<gpu>.*`` with the machine, the GPU and ``about`` in its header."""
    print(format_table(rows, columns))
    if not save:
        print(not_saved_hint())
        return
    meta = machine_info({**about, **_gpu_meta(True)})
    gpu = meta["gpu"].split()[-1].lower()
    print("saved", save_results(f"{stem}-{gpu}", rows, columns, meta, save))


def _loglik_main(opts: argparse.Namespace) -> None:
    default = (10**5, 10**7, 10**8) if opts.gpu else (10**5, 10**7)
    sizes = tuple(int(float(s)) for s in opts.sizes.split(",")) if opts.sizes else default
    rows = gpu_loglik_rows(sizes, opts.quick) if opts.gpu else loglik_rows(sizes, opts.target, opts.quick)
    target = "cuda" if opts.gpu else opts.target
    meta = machine_info({"suite": "loglik", "target": target,
                         "function": "np.log(gaussian(x, mu, s)).sum(), float32", **_gpu_meta(opts.gpu)})
    for row in rows:
        print(row, flush=True)
    if opts.save:
        name = opts.name or ("gpu" if opts.gpu else f"cpu-{opts.target}")
        print("saved", _save(name, rows, meta, opts.save, "loglik"))
    else:
        print(not_saved_hint())


def _first_call_main(opts: argparse.Namespace) -> None:
    rows = first_call_rows(opts.quick)
    meta = machine_info({"suite": "firstcall", "target": "cpu",
                         "function": "fused functions' first calls against Numba compiling the same "
                                     "body by hand (@vectorize, or an @njit loop for the sum), fresh "
                                     "processes, empty disk cache"})
    for row in rows:
        print(row, flush=True)
    if opts.save:
        print("saved", _save(opts.name or "cpu", rows, meta, opts.save, "firstcall"))
    else:
        print(not_saved_hint())


def _reductions_main(opts: argparse.Namespace) -> None:
    if opts.gpu:
        raise SystemExit("--reductions measures host targets (--target); the GPU's are --loglik --gpu")
    sizes = tuple(int(float(s)) for s in opts.sizes.split(",")) if opts.sizes else (10**6,)
    rows = reduction_rows(sizes, opts.target, opts.quick)
    meta = machine_info({"suite": "reductions", "target": opts.target,
                         "function": "fused reductions beside NumPy's eager ones"})
    for row in rows:
        print(row, flush=True)
    if opts.save:
        print("saved", _save(opts.name or f"cpu-{opts.target}", rows, meta, opts.save, "reductions"))
    else:
        print(not_saved_hint())


if __name__ == "__main__":
    main()
