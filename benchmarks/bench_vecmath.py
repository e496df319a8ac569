"""Timing of ``gpufuncs.targets.cpu.vecmath`` against libm and NumPy, one core.

Run ``python benchmarks/bench_vecmath.py`` (about a minute; ``--n`` and ``--repeat`` change the
size and the repetitions). For each function and dtype it times, at 10**6 contiguous elements:

- ``vecmath``: an ``@njit`` loop ``out[i] = vecmath.f(x[i])``, vectorized as the cpu target's loops;
- ``libm``: the same loop calling ``math.f`` (a scalar libm call per element);
- ``numpy``: the ufunc (``np.exp`` ...) writing into a preallocated ``out``.

Times are medians of ``--repeat`` runs after warm-up, in milliseconds; the ratios are
``libm / vecmath`` (speed-up of the replacement) and ``vecmath / numpy`` (above 1: slower than
NumPy). The table is printed; ``--save`` writes it as ``benchmarks/results/vecmath.txt`` (and
``.json``; ``--save DIR``: into ``DIR``) with the machine, the CPU LLVM compiled for and the
library versions.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable

import numpy as np
from harness import (  # (this folder is on sys.path: run as a script)
    add_save_argument,
    machine_info,
    not_saved_hint,
    save_results,
)
from numba import njit

from gpufuncs.targets.cpu import vecmath
from gpufuncs.targets.cpu.loops import wide_vectors

FUNCTIONS = ("exp", "exp2", "expm1", "log", "log1p", "pow", "sqrt")
NUMPY = {"exp": np.exp, "exp2": np.exp2, "expm1": np.expm1, "log": np.log, "log1p": np.log1p,
         "pow": np.power, "sqrt": np.sqrt}


def inputs(name: str, dtype: type, n: int) -> tuple[np.ndarray, ...]:
    """Typical arguments: results well inside the range, spread over several binades."""
    rng = np.random.default_rng(0)
    if name == "pow":
        return (np.exp(rng.uniform(-3, 3, n)).astype(dtype), rng.uniform(-6, 6, n).astype(dtype))
    x = {
        "exp": lambda: rng.uniform(-30, 30, n),
        "exp2": lambda: rng.uniform(-40, 40, n),
        "expm1": lambda: rng.uniform(-5, 5, n),
        "log": lambda: np.exp(rng.uniform(-20, 20, n)),
        "log1p": lambda: np.exp(rng.uniform(-10, 5, n)) - 0.5,
        "sqrt": lambda: np.exp(rng.uniform(-20, 20, n)),
    }[name]()
    return (x.astype(dtype),)


def make_loop(fn: Callable, nargs: int) -> Callable:
    """An ``@njit`` loop applying the scalar ``fn`` element by element, vectorized as the cpu
    target's flat loops are (``loops.wide_vectors``: 512-bit vectors where there is AVX-512)."""
    if nargs == 2:

        @njit
        def binary(x, y, out):
            wide_vectors()
            for i in range(x.size):
                out[i] = fn(x[i], y[i])

        return binary

    @njit
    def unary(x, out):
        wide_vectors()
        for i in range(x.size):
            out[i] = fn(x[i])

    return unary


def median_ms(call: Callable[[], object], repeat: int) -> float:
    """Median wall time of ``call`` in milliseconds, after three warm-up calls."""
    for _ in range(3):
        call()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return 1e3 * statistics.median(samples)


def run(n: int, repeat: int) -> list[dict[str, object]]:
    rows = []
    for name in FUNCTIONS:
        nargs = 2 if name == "pow" else 1
        fast = make_loop(getattr(vecmath, name), nargs)
        libm = make_loop(getattr(math, name), nargs)
        for dtype in (np.float32, np.float64):
            args = inputs(name, dtype, n)
            out = np.empty_like(args[0])
            ufunc = NUMPY[name]
            times = {
                "vecmath": median_ms(lambda f=fast, a=args, o=out: f(*a, o), repeat),
                "libm": median_ms(lambda f=libm, a=args, o=out: f(*a, o), repeat),
                "numpy": median_ms(lambda u=ufunc, a=args, o=out: u(*a, out=o), repeat),
            }
            rows.append({"function": name, "dtype": np.dtype(dtype).name, **times,
                         "libm/vecmath": times["libm"] / times["vecmath"],
                         "vecmath/numpy": times["vecmath"] / times["numpy"]})
    return rows


def table(rows: list[dict[str, object]]) -> str:
    columns = list(rows[0])
    cells = [[f"{r[c]:.3g}" if isinstance(r[c], float) else str(r[c]) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.rjust(w) for c, w in zip(columns, widths))]
    lines += ["  ".join(v.rjust(w) for v, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10**6, help="elements per call (10**6)")
    parser.add_argument("--repeat", type=int, default=15, help="timed calls per median (15)")
    add_save_argument(parser)
    args = parser.parse_args()
    print(f"n = {args.n}, median of {args.repeat} calls after warm-up, times in ms\n")
    rows = run(args.n, args.repeat)
    print(table(rows))
    if not args.save:
        print(not_saved_hint())
    else:
        codegen = njit(lambda: None).targetctx.codegen()
        meta = machine_info({"llvm cpu": codegen.magic_tuple()[1], "threads": 1,
                             "scaling by vscalef (AVX-512)": vecmath.has_avx512(codegen),
                             "n": args.n, "unit": f"ms per call, median of {args.repeat}"})
        rounded = [{k: round(v, 3) if isinstance(v, float) else v for k, v in r.items()} for r in rows]
        print("saved", save_results("vecmath", rounded, list(rows[0]), meta, args.save))


if __name__ == "__main__":
    main()
