"""Integer and complex kernels against NumPy (host) and CuPy's ``ElementwiseKernel`` (GPU).

``python -m benchmarks.bench_types`` times, at each n, an int64 kernel ``a * b + c``, a
complex128 kernel ``z * z + c``, and two kernels of two outputs, ``divmod`` on int64 and ``modf``
on float64 (every operand an array of n elements):

* on the host, the call with ``target="auto"`` (and ``cpu``, ``parallel``) against the same
  NumPy expression, interleaved (:func:`harness.measure_pair`); ``--save`` writes
  ``results/types.*`` (``--name`` to change it: ``types-16core``);
* with ``--gpu``, on CuPy arrays, against a CuPy ``ElementwiseKernel`` of the same formula
  (``cupy.divmod`` and ``cupy.modf`` for the two-output kernels), one call followed by a
  synchronize and a pipeline of calls then one synchronize (both interleaved with CuPy's);
  ``--save`` writes ``results/types-<gpu>.*`` (``--save DIR``: into ``DIR``).

Ratios are gpufuncs' time over the reference's: below 1 is faster.
"""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

import gpufuncs as gf

from .harness import host_or_gpu_main, measure_pair

SIZES = (10**4, 10**6, 10**7)
#: GPU calls per pipelined repetition (as bench_gpu's).
PIPELINE = 200


@gf.ufunc(signatures=["int64(int64, int64, int64)"], reference=lambda a, b, c: a * b + c,
          name="bench_int_muladd", replace=True)
def bench_int_muladd(a, b, c):
    return a * b + c


@gf.ufunc(signatures=["complex128(complex128, complex128)"], reference=lambda z, c: z * z + c,
          name="bench_complex_square_add", replace=True)
def bench_complex_square_add(z, c):
    return z * z + c


@gf.ufunc(signatures=["UniTuple(int64, 2)(int64, int64)"], reference=np.divmod,
          name="bench_divmod", replace=True)
def bench_divmod(a, b):
    return divmod(a, b)


@gf.ufunc(signatures=["UniTuple(float64, 2)(float64)"], reference=np.modf, name="bench_modf",
          replace=True)
def bench_modf(x):
    if not abs(x) < 4503599627370496.0:  # 2**52: integral already, infinite or NaN
        return (x if math.isnan(x) else math.copysign(0.0, x)), x
    whole = math.copysign(float(int(abs(x))), x)
    return math.copysign(x - whole, x), whole


#: (label, kernel, numpy dtype, NumPy expression, the CuPy reference: ElementwiseKernel
#: in_params/out_params/operation, or the name of a CuPy ufunc).
CASES: tuple[tuple[str, Any, Any, Callable[..., Any], tuple[str, str, str] | str], ...] = (
    ("int64 a*b+c", bench_int_muladd, np.int64, lambda a, b, c: a * b + c,
     ("int64 a, int64 b, int64 c", "int64 y", "y = a * b + c")),
    ("complex128 z*z+c", bench_complex_square_add, np.complex128, lambda z, c: z * z + c,
     ("complex128 z, complex128 c", "complex128 y", "y = z * z + c")),
    ("int64 divmod", bench_divmod, np.int64, np.divmod, "divmod"),
    ("float64 modf", bench_modf, np.float64, np.modf, "modf"),
)


def _inputs(kernel: Any, dtype: Any, n: int, xp: Any = np) -> tuple[Any, ...]:
    rng = np.random.default_rng(0)
    if np.dtype(dtype).kind == "c":
        values = [rng.standard_normal(n) + 1j * rng.standard_normal(n) for _ in range(kernel.nin)]
    elif np.dtype(dtype).kind == "f":
        values = [rng.standard_normal(n) * 100 for _ in range(kernel.nin)]
    else:  # odd: no division by zero
        values = [rng.integers(-1000, 1000, n) | 1 for _ in range(kernel.nin)]
    return tuple(xp.asarray(v.astype(dtype)) for v in values)


def host_rows(sizes: tuple[int, ...]) -> list[dict[str, Any]]:
    """gpufuncs on each host target against the NumPy expression."""
    rows = []
    for label, kernel, dtype, expression, _ in CASES:
        for n in sizes:
            args = _inputs(kernel, dtype, n)
            np.testing.assert_allclose(kernel(*args), expression(*args), rtol=1e-12, atol=1e-12)  # (rounding)
            row: dict[str, Any] = {"kernel": label, "n": n}
            for target in ("auto", "cpu", "parallel"):
                ours, numpy = measure_pair(functools.partial(kernel, *args, target=target),
                                           functools.partial(expression, *args), repeat=31, inner=None)
                row[f"{target} us"] = round(ours * 1e6, 1)
                row[f"{target}/np"] = round(ours / numpy, 3)
            row["numpy us"] = round(numpy * 1e6, 1)
            rows.append(row)
            print(row, file=sys.stderr)
    return rows


def gpu_rows(sizes: tuple[int, ...]) -> list[dict[str, Any]]:
    """gpufuncs on CuPy arrays against a CuPy ElementwiseKernel of the same formula."""
    import cupy as cp

    sync = cp.cuda.get_current_stream().synchronize
    rows = []
    for label, kernel, dtype, _, cupy_reference in CASES:
        if isinstance(cupy_reference, str):
            reference = getattr(cp, cupy_reference)
        else:
            reference = cp.ElementwiseKernel(*cupy_reference, f"bench_{kernel.__name__}")
        for n in sizes:
            args = _inputs(kernel, dtype, n, cp)
            on_host = lambda r: tuple(map(cp.asnumpy, r)) if isinstance(r, tuple) else cp.asnumpy(r)  # noqa: E731
            np.testing.assert_allclose(on_host(kernel(*args)), on_host(reference(*args)),
                                       rtol=1e-12, atol=1e-12)
            ours, theirs = functools.partial(kernel, *args), functools.partial(reference, *args)
            each = measure_pair(ours, theirs, sync=sync, repeat=201)
            piped = measure_pair(ours, theirs, sync=sync, warmup=20, repeat=41, inner=PIPELINE)
            row = {"kernel": label, "n": n,
                   "call+sync us": round(each[0] * 1e6, 2), "cupy call+sync us": round(each[1] * 1e6, 2),
                   "call+sync /cupy": round(each[0] / each[1], 3),
                   "pipelined us": round(piped[0] * 1e6, 2), "cupy pipelined us": round(piped[1] * 1e6, 2),
                   "pipelined /cupy": round(piped[0] / piped[1], 3)}
            rows.append(row)
            print(row, file=sys.stderr)
    return rows


def main(argv: list[str] | None = None) -> int:
    """Run the host (default) or GPU comparison and print it; ``--save`` writes it under
    ``benchmarks/results/``."""
    return host_or_gpu_main("python -m benchmarks.bench_types", __doc__.splitlines()[0], "types",
                            lambda: host_rows(SIZES), lambda: gpu_rows(SIZES), argv)


if __name__ == "__main__":
    sys.exit(main())
