"""Broadcast and strided calls: ``gaussian`` on arrays that are not all contiguous and of one shape.

``python -m benchmarks.bench_layouts`` (host, about two minutes; ``--name`` for another machine's
file) and ``python -m benchmarks.bench_layouts --gpu`` (needs CuPy and a GPU). The table is
printed; ``--save`` writes the result files (``--save DIR``: into ``DIR``).

Four layouts, float32 and float64, n = rows x columns elements of output:

- ``outer``: ``gaussian(x[:, None], mu[None, :], 0.5)``, a column of samples against a row of means;
- ``row+column``: ``gaussian(x, mu, sigma)``, ``x`` a matrix, ``mu`` a row, ``sigma`` a column;
- ``columns``: ``gaussian(x[:, :c], mu, 0.5)``, a block of columns of a matrix twice as wide;
- ``stepped``: ``gaussian(x[::2], 0.5, 1.5)``, every other element of a flat array.

Host (``results/layouts.*``): ``target`` ``cpu``, ``parallel`` and ``auto`` against NumPy's
expression of the same arguments (``ratio``: ours / NumPy's, measured interleaved, medians after
warm-up), and Numba's own ``@vectorize`` object of the kernel called with the same arguments
(``numba``: NumPy's iterator over its loop, what these calls ran before the rows loops).

GPU (``results/layouts-<gpu>.*``), on CuPy arrays: against CuPy's expression, one call plus a
stream synchronize (``sync``) and calls issued back to back for 5 ms (``pipe``).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

import gpufuncs as gf

from .harness import host_or_gpu_main, measure, measure_pair

#: (rows, columns) of the output: 10^4, 10^6 and 10^7 elements.
GRIDS = ((100, 100), (1000, 1000), (2000, 5000))
DTYPES = (np.float32, np.float64)
LAYOUTS = ("outer", "row+column", "columns", "stepped")


def _arguments(xp: Any, layout: str, rows: int, columns: int, dtype: type) -> tuple[Any, ...]:
    rng = np.random.default_rng(rows * columns)

    def draw(*shape: int, low: float = -3.0, high: float = 3.0) -> Any:
        return xp.asarray(rng.uniform(low, high, shape).astype(dtype))

    if layout == "outer":
        return draw(rows, 1), draw(1, columns), 0.5
    if layout == "columns":
        return draw(rows, 2 * columns)[:, :columns], draw(columns), 0.5
    if layout == "stepped":
        return draw(2 * rows * columns)[::2], 0.5, 1.5
    return draw(rows, columns), draw(columns), draw(rows, 1, low=0.25, high=2.0)


def numpy_gaussian(xp: Any) -> Callable[..., Any]:
    """NumPy's (or CuPy's) expression of the normal pdf: the reference."""
    scale = 1.0 / math.sqrt(2.0 * math.pi)

    def expression(x: Any, mu: Any, sigma: Any) -> Any:
        return xp.exp(-0.5 * ((x - mu) / sigma) ** 2) * scale / sigma

    return expression


def _cases(xp: Any) -> list[tuple[str, type, int, tuple[Any, ...]]]:
    return [(layout, dtype, r * c, _arguments(xp, layout, r, c, dtype))
            for layout in LAYOUTS for dtype in DTYPES for r, c in GRIDS]


def host_rows() -> list[dict[str, Any]]:
    """The host table (see the module docstring)."""
    reference, numba_ufunc = numpy_gaussian(np), gf.get("gaussian", target="cpu")
    rows = []
    for layout, dtype, n, args in _cases(np):
        row: dict[str, Any] = {"layout": layout, "dtype": np.dtype(dtype).name, "n": n}
        repeat = 15 if n >= 10**7 else 60
        for target in ("cpu", "parallel", "auto"):
            ours, theirs = measure_pair(lambda t=target, a=args: gf.gaussian(*a, target=t),
                                        lambda a=args: reference(*a), repeat=repeat, inner=None,
                                        min_time=2e-3)
            row[f"{target}_us"], row[f"{target}_ratio"] = round(ours * 1e6, 1), round(ours / theirs, 3)
        row["numpy_us"] = round(theirs * 1e6, 1)
        numba_us = measure(lambda a=args: numba_ufunc(*a), repeat=repeat, min_time=2e-3) * 1e6
        row["numba_us"] = round(numba_us, 1)
        rows.append(row)
        print(row, file=sys.stderr)
    return rows


def gpu_rows() -> list[dict[str, Any]]:
    """The GPU table (see the module docstring)."""
    import cupy as cp

    sync, reference = cp.cuda.get_current_stream().synchronize, numpy_gaussian(cp)
    rows = []
    for layout, dtype, n, args in _cases(cp):
        row: dict[str, Any] = {"layout": layout, "dtype": np.dtype(dtype).name, "n": n}
        for mode in ("sync", "pipe"):
            pipelined = mode == "pipe"
            ours, theirs = measure_pair(lambda a=args: gf.gaussian(*a), lambda a=args: reference(*a),
                                        sync=sync, repeat=60 if pipelined else 200,
                                        inner=None if pipelined else 1, min_time=5e-3 if pipelined else 2e-4)
            row[f"{mode}_us"], row[f"{mode}_cupy_us"] = round(ours * 1e6, 1), round(theirs * 1e6, 1)
            row[f"{mode}_ratio"] = round(ours / theirs, 3)
        rows.append(row)
        print(row, file=sys.stderr)
    return rows


def main(argv: list[str] | None = None) -> int:
    """Run the host (default) or GPU comparison and print it; ``--save`` writes it under
    ``benchmarks/results/``."""
    return host_or_gpu_main("python -m benchmarks.bench_layouts", __doc__.splitlines()[0], "layouts",
                            host_rows, gpu_rows, argv)


if __name__ == "__main__":
    sys.exit(main())
