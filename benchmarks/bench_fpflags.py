"""The cost of the cuda target's floating-point check (``docs/semantics.md``), on one GPU.

``python -m benchmarks.bench_fpflags`` (needs CuPy and a GPU; about a minute). Each kernel is
compared with a twin compiled and planned with the check off (what ``GPUFUNCS_FPSTATUS=0``
gives), in the same process, their repetitions interleaved (``measure_pair``): medians after
warm-up of one call plus a stream synchronize (``sync``) and of calls issued back to back for
5 ms before one synchronize (``pipe``), on CuPy arrays with a new output; ratios are
checked / unchecked. Rows:

- ``exp`` and ``gaussian`` (scalars 0.5, 1.5), float32 and float64, n = 10^3, 10^6, 10^7, normal
  values (nothing flagged: the cost every call pays);
- ``exp all-overflow``: every element overflows (every warp stores into the flag slot);
- ``exp raise-mode``: ``np.errstate(over='raise')`` on device arrays, which makes each call wait
  for its kernel and read its flags (``sync`` only: a pipelined call cannot do that);
- ``exp host``: NumPy arrays with ``target='cuda'`` (the flags read after the copy back).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np

import gpufuncs as gf
from gpufuncs.targets.cuda import fpflags

from .harness import format_table, machine_info, measure_pair


def unchecked_twin(name: str) -> Any:
    """Kernel ``name`` registered again as ``<name>_nofp``, to be compiled with the check off."""
    spec = gf.registry[name].spec
    return gf.ufunc(signatures=[loop.signature for loop in spec.loops], name=f"{name}_nofp",
                    replace=True)(spec.pyfunc)


def _pair(checked: Callable[[], Any], unchecked: Callable[[], Any], sync: Callable[[], Any],
          pipelined: bool) -> tuple[float, float]:
    if pipelined:
        return measure_pair(checked, unchecked, sync=sync, repeat=60, inner=None, min_time=5e-3)
    return measure_pair(checked, unchecked, sync=sync, repeat=200)


def main() -> None:
    """Measure and print the table (microseconds per call and ratios)."""
    import cupy as cp

    rng = np.random.default_rng(1)
    sync = cp.cuda.get_current_stream().synchronize
    kernels = {name: gf.registry[name] for name in ("exp", "gaussian")}
    twins = {name: unchecked_twin(name) for name in kernels}
    scalars = {"exp": (), "gaussian": (0.5, 1.5)}
    cases = []
    for name in kernels:
        for dtype in (np.float32, np.float64):
            for n in (10**3, 10**6, 10**7):
                x = cp.asarray(rng.normal(size=n).astype(dtype))
                cases.append((name, "normal", dtype, n, (x, *scalars[name])))
    for dtype in (np.float32, np.float64):
        for n in (10**6, 10**7):
            cases.append(("exp", "all-overflow", dtype, n, (cp.full(n, 1000.0, dtype),)))
    # The twins' kernels and plans are made with the check off: every call signature's
    # executor is built on its first call, here.
    fpflags.ENABLED = False
    with np.errstate(all="ignore"):
        for name, _, _, _, args in cases:
            twins[name](*args)
        host = rng.normal(size=10**6)
        twins["exp"](host, target="cuda")
    fpflags.ENABLED = True
    rows = []
    with np.errstate(all="ignore"):
        for name, what, dtype, n, args in cases:
            row = {"kernel": name, "values": what, "dtype": np.dtype(dtype).name, "n": n}
            for mode in ("sync", "pipe"):
                ours, theirs = _pair(lambda k=kernels[name], a=args: k(*a),
                                     lambda k=twins[name], a=args: k(*a), sync, mode == "pipe")
                row[f"{mode}_us"], row[f"{mode}_nofp_us"] = ours * 1e6, theirs * 1e6
                row[f"{mode}_ratio"] = ours / theirs
            rows.append(row)
            print(row, file=sys.stderr)
    for n in (10**3, 10**6):
        x = cp.asarray(rng.normal(size=n))
        twins["exp"](x)  # (its executor exists: made with the check off above for 10**6)
        with np.errstate(over="raise"):
            ours, theirs = _pair(lambda a=x: gf.exp(a), lambda a=x: twins["exp"](a), sync, False)
        rows.append({"kernel": "exp", "values": "raise-mode", "dtype": "float64", "n": n,
                     "sync_us": ours * 1e6, "sync_nofp_us": theirs * 1e6, "sync_ratio": ours / theirs})
    ours, theirs = _pair(lambda: gf.exp(host, target="cuda"), lambda: twins["exp"](host, target="cuda"),
                         None, False)
    rows.append({"kernel": "exp", "values": "host", "dtype": "float64", "n": host.size,
                 "sync_us": ours * 1e6, "sync_nofp_us": theirs * 1e6, "sync_ratio": ours / theirs})
    print(machine_info().get("gpu", ""), file=sys.stderr)
    columns = ["kernel", "values", "dtype", "n", "sync_us", "sync_nofp_us", "sync_ratio", "pipe_us",
               "pipe_nofp_us", "pipe_ratio"]
    for row in rows:
        for c in columns:
            row.setdefault(c, "")
            if isinstance(row[c], float):
                row[c] = round(row[c], 3 if c.endswith("ratio") else 1)
    print(format_table(rows, columns))


if __name__ == "__main__":
    main()
