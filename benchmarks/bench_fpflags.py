"""The cost of honouring ``np.errstate`` (``docs/semantics.md``): each kernel against its twin
compiled without the check, in the same process.

``python -m benchmarks.bench_fpflags`` (host, about a minute; ``--name`` for another machine's
file) and ``python -m benchmarks.bench_fpflags --gpu`` (needs CuPy and a GPU). The twin is
compiled and planned with the check off (what ``GPUFUNCS_FPSTATUS=0`` gives); the two are
measured interleaved (``measure_pair``), medians after warm-up; ratios are checked / unchecked.
The table is printed; ``--save`` writes the result files (``--save DIR``: into ``DIR``).

Host (``results/fpflags.*``): ``exp`` and ``gaussian`` (scalars 0.5, 1.5) with ``target="cpu"``
and ``"parallel"``, float32 and float64, n = 10^4, 10^6, 10^7, normal values (nothing flagged:
what every call pays, a clear and a read of the floating-point status per loop), and ``exp`` at
10^6 where every element overflows (the loop is run again to classify what it found), and both
at 10^4 and 10^6 with 1% NaN under NumPy's default error state (``1% NaN, warn``: the second run that
tells the vector compares' spurious invalid from the kernel's own). Rows ``floor (itself)``
time the checked kernel against itself: how far from 1 a ratio strays by noise.

GPU (``results/fpflags-<gpu>.*``), on CuPy arrays with a new output, one call plus a stream
synchronize (``sync``) and calls issued back to back for 5 ms before one synchronize (``pipe``):

- ``exp`` and ``gaussian``, float32 and float64, n = 10^3, 10^6, 10^7, normal values;
- ``exp all-overflow``: every element overflows (every warp stores into the flag slot);
- ``exp raise-mode``: ``np.errstate(over='raise')`` on device arrays, which makes each call wait
  for its kernel and read its flags (``sync`` only: a pipelined call cannot do that);
- ``exp host``: NumPy arrays with ``target='cuda'`` (the flags read after the copy back);
- ``gaussian floor (itself)``: the checked kernel against itself (the noise floor).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np

import gpufuncs as gf
from gpufuncs.targets.cpu import fpflags as host_fpflags

from .harness import host_or_gpu_main, measure_pair

SCALARS = {"exp": (), "gaussian": (0.5, 1.5)}
#: The ``values`` of rows that time the checked kernel against itself: the noise floor of a ratio.
FLOOR = "floor (itself)"
#: The ``values`` of rows with 1% NaN, called under NumPy's default error state: the vector
#: compares' spurious invalid makes the loop run again to be told from the kernel's own
#: (``fpflags.refine``), which is what these rows cost over the twin.
NAN = "1% NaN, warn"
WARN = {"all": "warn", "under": "ignore"}  # NumPy's default error state


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


def host_rows() -> list[dict[str, Any]]:
    """The host table: each kernel and target against its unchecked twin."""
    rng = np.random.default_rng(1)
    kernels = {name: gf.registry[name] for name in SCALARS}
    twins = {name: unchecked_twin(name) for name in kernels}
    cases = [(target, name, "normal", dtype, n, (rng.normal(size=n).astype(dtype), *SCALARS[name]))
             for target in ("cpu", "parallel") for name in kernels for dtype in (np.float32, np.float64)
             for n in (10**4, 10**6, 10**7)]
    cases += [(target, "exp", "all-overflow", np.float64, 10**6, (np.full(10**6, 1000.0),))
              for target in ("cpu", "parallel")]
    cases += [(target, "gaussian", FLOOR, np.float32, 10**6, (rng.normal(size=10**6).astype(np.float32),
                                                             *SCALARS["gaussian"]))
              for target in ("cpu", "parallel")]
    cases += [(target, name, NAN, dtype, n, (_with_nan(rng.normal(size=n).astype(dtype)), *SCALARS[name]))
              for target in ("cpu", "parallel") for name in kernels for dtype in (np.float32, np.float64)
              for n in (10**4, 10**6)]
    # The twins' loops are compiled with the check off (the status intrinsics emit nothing):
    # every loop is compiled on its first call, here.
    host_fpflags.ENABLED = False
    with np.errstate(all="ignore"):
        for target, name, _, _, _, args in cases:
            twins[name](*args, target=target)
    host_fpflags.ENABLED = True
    rows = []
    for target, name, what, dtype, n, args in cases:
        other = kernels[name] if what == FLOOR else twins[name]
        with np.errstate(**(WARN if what == NAN else {"all": "ignore"})):
            ours, theirs = measure_pair(lambda k=kernels[name], a=args, t=target: k(*a, target=t),
                                        lambda k=other, a=args, t=target: k(*a, target=t),
                                        repeat=60 if n >= 10**7 else 200, inner=None, min_time=2e-3)
        rows.append({"target": target, "kernel": name, "values": what, "dtype": np.dtype(dtype).name,
                     "n": n, "us": round(ours * 1e6, 1), "nofp_us": round(theirs * 1e6, 1),
                     "ratio": round(ours / theirs, 3)})
        print(rows[-1], file=sys.stderr)
    return rows


def _with_nan(x: np.ndarray) -> np.ndarray:
    """``x`` with every 100th value NaN."""
    x[::100] = np.nan
    return x


def gpu_rows() -> list[dict[str, Any]]:
    """The GPU table (see the module docstring)."""
    import cupy as cp

    from gpufuncs.targets.cuda import fpflags

    rng = np.random.default_rng(1)
    sync = cp.cuda.get_current_stream().synchronize
    kernels = {name: gf.registry[name] for name in SCALARS}
    twins = {name: unchecked_twin(name) for name in kernels}
    cases = []
    for name in kernels:
        for dtype in (np.float32, np.float64):
            for n in (10**3, 10**6, 10**7):
                x = cp.asarray(rng.normal(size=n).astype(dtype))
                cases.append((name, "normal", dtype, n, (x, *SCALARS[name])))
    for dtype in (np.float32, np.float64):
        for n in (10**6, 10**7):
            cases.append(("exp", "all-overflow", dtype, n, (cp.full(n, 1000.0, dtype),)))
            x = cp.asarray(rng.normal(size=n).astype(dtype))
            cases.append(("gaussian", FLOOR, dtype, n, (x, *SCALARS["gaussian"])))
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
                other = kernels[name] if what == FLOOR else twins[name]
                ours, theirs = _pair(lambda k=kernels[name], a=args: k(*a),
                                     lambda k=other, a=args: k(*a), sync, mode == "pipe")
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
    columns = ["kernel", "values", "dtype", "n", "sync_us", "sync_nofp_us", "sync_ratio", "pipe_us",
               "pipe_nofp_us", "pipe_ratio"]
    for row in rows:
        for c in columns:
            row.setdefault(c, "")
            if isinstance(row[c], float):
                row[c] = round(row[c], 3 if c.endswith("ratio") else 1)
    return [{c: row[c] for c in columns} for row in rows]


def main(argv: list[str] | None = None) -> int:
    """Run the host (default) or GPU comparison and print it; ``--save`` writes it under
    ``benchmarks/results/``."""
    return host_or_gpu_main("python -m benchmarks.bench_fpflags", __doc__.splitlines()[0], "fpflags",
                            host_rows, gpu_rows, argv)


if __name__ == "__main__":
    sys.exit(main())
