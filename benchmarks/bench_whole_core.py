"""A generalized kernel's input that is one core for every row: a ``(n),(n)->()`` dot product of
rows against one vector, on the host targets (``n``: the elements of the rows).

Each row times ``dot(x, w)`` (``w`` one vector, passed whole to every row of the flat loops)
beside ``dot(x, W)`` (the same vector repeated for every row, an array of ``x``'s shape: the
rows the loops read otherwise) and NumPy's ``np.einsum("ij,j->i", x, w)``, interleaved in
pairs (medians after warm-up, microseconds). ``whole/repeated`` below 1: the whole core is
cheaper than rows of it. ``einsum`` is for scale: the kernel adds one product after the other
in a float64 sum, in the order written, which the compiler keeps (IEEE addition does not
reorder), where NumPy's dot of long rows runs several sums in SIMD registers.

Run: ``python -m benchmarks.bench_whole_core`` (``--name`` for another machine's file);
``--save`` writes ``results/<name>.*`` (``--save DIR``: into ``DIR``).
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

import gpufuncs as gf

from .harness import add_save_argument, format_table, machine_info, measure_pair, not_saved_hint, save_results

COLUMNS = ("n", "rows", "width", "dtype", "target", "whole us", "repeated us", "einsum us", "whole/repeated",
           "whole/einsum")


@gf.gufunc(signatures=["void(float32[:], float32[:], float32[:])",
                       "void(float64[:], float64[:], float64[:])"],
           layout="(n),(n)->()", reference=lambda a, b: np.einsum("...i,...i->...", a, b),
           name="bench_dot", replace=True)
def bench_dot(a, b, out):
    s = 0.0
    for i in range(a.shape[0]):
        s += a[i] * b[i]
    out[0] = s


def rows_of(rows: int, width: int, dtype: Any) -> list[dict[str, Any]]:
    """The three calls at one size, on each host target."""
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((rows, width)).astype(dtype), rng.standard_normal(width).astype(dtype)
    repeated = np.ascontiguousarray(np.broadcast_to(w, x.shape))
    found = []
    for target in ("cpu", "parallel", "auto"):
        def ours(target: str = target) -> Any:
            return bench_dot(x, w, target=target)

        whole, again = measure_pair(ours, lambda target=target: bench_dot(x, repeated, target=target),
                                    repeat=41)
        _, einsum = measure_pair(ours, lambda: np.einsum("ij,j->i", x, w), repeat=41)
        found.append({"n": rows * width, "rows": rows, "width": width, "dtype": np.dtype(dtype).name,
                      "target": target,
                      "whole us": round(whole * 1e6, 2), "repeated us": round(again * 1e6, 2),
                      "einsum us": round(einsum * 1e6, 2), "whole/repeated": round(whole / again, 3),
                      "whole/einsum": round(whole / einsum, 3)})
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", default="whole-core", help="results file name (default whole-core)")
    add_save_argument(parser)
    opts = parser.parse_args(argv)
    found = [r for rows, width in ((10_000, 16), (100_000, 16), (10_000, 256))
             for dtype in (np.float32, np.float64) for r in rows_of(rows, width, dtype)]
    print(format_table(found, COLUMNS))
    if opts.save:
        meta = machine_info({"suite": "whole core", "kernel": "(n),(n)->() dot of rows against one vector",
                             "method": "pairs interleaved, medians of 41 after warm-up"})
        print("saved", save_results(opts.name, found, COLUMNS, meta, opts.save))
    else:
        print(not_saved_hint())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
