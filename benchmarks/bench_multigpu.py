"""Several GPUs: a large host array across every GPU, and device arrays on each GPU at once.

Run ``python benchmarks/bench_multigpu.py`` on a machine with two or more GPUs (CuPy needed):

* **host**: gaussian float32 on ``--n`` host elements (default 10^9) with ``device="all"``
  against ``device=0``, their repetitions interleaved (:func:`harness.measure_pair`); each call
  makes its result, as a user's call does; target: at least 0.9 of the ceiling's gain;
* **ceiling**: the bytes the host case moves (``4 * --n`` each way), as pinned copies in both
  directions at once split over every GPU, against the same on GPU 0: the most ``device="all"``
  can gain on host arrays on this machine, since their every byte crosses its memory and PCIe;
* **device-resident**: CuPy inputs of ``--device-n`` elements on each GPU, ``--calls`` calls
  with ``out=`` per GPU, each GPU driven by a thread of its own, all started together and
  synchronized, against the same calls, all of them on GPU 0 from one thread; target >= 1.8x.

Medians of ``--repeat`` after a warm-up. The table is printed; ``--save`` writes it with
:func:`harness.save_results` as ``benchmarks/results/multigpu-<gpu>.{txt,json}`` (``--save DIR``:
into ``DIR``) when two or more GPUs took part. ``--gpus 0,0`` runs the device-resident case with
two threads on GPU 0 (with one GPU: the script's own check, saved nowhere).
"""

from __future__ import annotations

import argparse
import re
import statistics
import threading
import time
from typing import Any

import numpy as np

import gpufuncs as gf

try:  # run as a script or as a module
    from harness import (
        add_save_argument,
        format_table,
        machine_info,
        measure_pair,
        missing_module,
        not_saved_hint,
        save_results,
    )
except ImportError:
    from .harness import (
        add_save_argument,
        format_table,
        machine_info,
        measure_pair,
        missing_module,
        not_saved_hint,
        save_results,
    )

COLUMNS = ("case", "n", "gpus", "seconds_all", "seconds_one", "speedup", "target")
X0, SIGMA = 0.5, 1.5


def host_case(n: int, repeat: int) -> dict[str, Any]:
    """``device="all"`` against ``device=0`` on a host array of ``n`` float32 values."""
    from gpufuncs.targets.cuda.runtime import device_count

    x = np.random.default_rng(0).normal(size=n).astype(np.float32)
    every, one = measure_pair(lambda: gf.gaussian(x, X0, SIGMA, target="cuda", device="all"),
                              lambda: gf.gaussian(x, X0, SIGMA, target="cuda", device=0),
                              warmup=1, repeat=repeat)
    return {"case": "host gaussian float32, device='all' vs device=0", "n": n, "gpus": device_count(),
            "seconds_all": every, "seconds_one": one, "speedup": one / every,
            "target": ">= 0.9 of the ceiling"}


def ceiling_case(nbytes: int, gpus: list[int], repeat: int) -> dict[str, Any]:
    """Pinned copies of ``nbytes`` each way, both directions at once, split over ``gpus``
    against all of them on GPU 0: the most ``device="all"`` can gain on host arrays, whose
    every byte crosses the host's memory and PCIe (no computing, no packing)."""
    import cupy as cp

    from gpufuncs.targets import get_target

    gpu0 = get_target("cuda").runtimes.get(0)
    source, target = gpu0.pinned(nbytes), gpu0.pinned(nbytes)

    def buffers(device: int, size: int) -> tuple[Any, ...]:
        with cp.cuda.Device(device):
            return (cp.empty(size, cp.uint8), cp.empty(size, cp.uint8),
                    cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True))

    def parts(devices: list[int]) -> list[tuple[int, int, int, tuple[Any, ...]]]:
        bounds = np.linspace(0, nbytes, len(devices) + 1).astype(int)
        return [(d, int(lo), int(hi - lo), buffers(d, int(hi - lo)))
                for d, lo, hi in zip(devices, bounds[:-1], bounds[1:])]

    def copies(split: list[tuple[int, int, int, tuple[Any, ...]]]) -> None:
        for device, start, size, (into, back, up, down) in split:
            with cp.cuda.Device(device):
                cp.cuda.runtime.memcpyAsync(into.data.ptr, source.ctypes.data + start, size, 1, up.ptr)
                cp.cuda.runtime.memcpyAsync(target.ctypes.data + start, back.data.ptr, size, 2, down.ptr)
        for *_, (_, _, up, down) in split:
            up.synchronize()
            down.synchronize()

    spread, single = parts(sorted(set(gpus))), parts([gpus[0]])
    every, one = measure_pair(lambda: copies(spread), lambda: copies(single), warmup=2, repeat=repeat)
    return {"case": f"ceiling: pinned copies both ways at once, {nbytes >> 20} MiB each way, split "
                    "over every GPU vs GPU 0", "n": nbytes, "gpus": ",".join(map(str, sorted(set(gpus)))),
            "seconds_all": every, "seconds_one": one, "speedup": one / every, "target": "(bound)"}


def _timed_threads(work: list[Any]) -> float:
    """Seconds for every ``work`` callable to finish, each in a thread, all started together."""
    start = threading.Barrier(len(work) + 1)
    threads = [threading.Thread(target=lambda w=w: (start.wait(), w())) for w in work]
    for t in threads:
        t.start()
    start.wait()
    began = time.perf_counter()
    for t in threads:
        t.join()
    return time.perf_counter() - began


def device_case(n: int, gpus: list[int], calls: int, repeat: int) -> dict[str, Any]:
    """CuPy inputs on each of ``gpus``, one thread per GPU, against all calls on GPU 0."""
    import cupy as cp

    def state(device: int) -> tuple[Any, Any]:
        with cp.cuda.Device(device):
            x = cp.random.default_rng(device).standard_normal(n, dtype=cp.float32)
            return x, cp.empty_like(x)

    arrays = [state(d) for d in gpus]

    def run(device: int, x: Any, out: Any, count: int) -> None:
        for _ in range(count):
            gf.gaussian(x, X0, SIGMA, out=out)
        with cp.cuda.Device(device):
            cp.cuda.get_current_stream().synchronize()

    spread = [lambda d=d, a=a: run(d, *a, calls) for d, a in zip(gpus, arrays)]
    single = [lambda: run(gpus[0], *arrays[0], calls * len(gpus))]
    _timed_threads(spread)  # warm-up: compiles, loads, pools
    _timed_threads(single)
    times: tuple[list[float], list[float]] = ([], [])
    for r in range(repeat):  # interleaved, the order swapped every other repetition
        for which in ((0, 1) if r % 2 == 0 else (1, 0)):
            times[which].append(_timed_threads(spread if which == 0 else single))
    every, one = statistics.median(times[0]), statistics.median(times[1])
    return {"case": f"CuPy on each GPU from its own thread ({calls} calls of gaussian float32 out= "
                    "per GPU) vs all on GPU 0", "n": n, "gpus": ",".join(map(str, gpus)),
            "seconds_all": every, "seconds_one": one, "speedup": one / every, "target": ">= 1.8"}


def main() -> None:
    from gpufuncs.targets import get_target
    from gpufuncs.targets.cuda.runtime import device_count

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=lambda t: int(float(t)), default=10**9, help="host elements")
    parser.add_argument("--device-n", type=lambda t: int(float(t)), default=10**8,
                        help="elements of each GPU's CuPy input")
    parser.add_argument("--calls", type=int, default=20, help="device-resident calls per GPU")
    parser.add_argument("--gpus", type=lambda t: [int(g) for g in t.split(",")], default=None,
                        help="GPUs of the device-resident case (default: every GPU)")
    parser.add_argument("--repeat", type=int, default=5)
    add_save_argument(parser)
    args = parser.parse_args()
    missing = missing_module("cupy", "python -m pip install cupy-cuda12x", "bench_multigpu")
    if missing:
        raise SystemExit(missing)
    gpus = args.gpus or list(range(device_count()))
    rows = [host_case(args.n, args.repeat), ceiling_case(4 * args.n, gpus, args.repeat),
            device_case(args.device_n, gpus, args.calls, args.repeat)]
    print(format_table(rows, COLUMNS))
    if not args.save:
        print(not_saved_hint())
        return
    if device_count() < 2 or len(set(gpus)) < 2:
        print(f"not saved: {device_count()} GPU(s) visible, {len(set(gpus))} used")
        return
    gpu = get_target("cuda").runtimes.get(0).device.name
    name = re.sub(r"[^a-z0-9]+", "-", gpu.lower()).strip("-")
    meta = machine_info({"gpus": f"{device_count()} x {gpu}",
                         "method": f"medians of {args.repeat} after a warm-up, interleaved"})
    print("saved", save_results(f"multigpu-{name}", rows, COLUMNS, meta, args.save))


if __name__ == "__main__":
    main()
