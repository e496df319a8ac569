"""``clamp(x, xmin, xmax)``: bit-for-bit ``numpy.clip``."""

import numpy as np

from ..registry import float_signatures, ufunc
from ..spec import Benchmark, CupyFormula, Tolerance


@ufunc(
    signatures=float_signatures(3),
    reference=np.clip,
    tolerances={np.float32: Tolerance(rtol=0.0), np.float64: Tolerance(rtol=0.0)},
    benchmark=Benchmark(
        {"numpy": np.clip}, scalars=(-1.0, 1.0),
        # The kernel's NaN rule first (NaN anywhere gives NaN), then NumPy's order.
        cupy=CupyFormula("T x, T lo, T hi", "T y",
                         "if (x != x || lo != lo || hi != hi) { y = x != x ? x : (lo != lo ? lo : hi); } "
                         "else { T low = x < lo ? lo : x; y = low > hi ? hi : low; }")),
)
def clamp(x, xmin, xmax):
    """Limit ``x`` to ``[xmin, xmax]``; identical to ``numpy.clip``, bit for bit.

    NaN in any argument gives NaN, and ``xmin > xmax`` gives ``xmax`` (NumPy's order: the
    maximum with ``xmin`` first, then the minimum with ``xmax``).
    """
    # NumPy keeps x unless it is strictly outside, so signed zeros come out as np.clip's.
    low = xmin if x < xmin else x
    clipped = xmax if low > xmax else low
    # NaN anywhere gives the first NaN of x, xmin, xmax, as np.clip (no ordered comparison
    # above decides for a NaN): one select per argument, the last argument's first, each on
    # the one before, computed for every element in vector code (no sum of the arguments,
    # which raised invalid for inf + -inf, no early return). Flat, not nested: with array
    # bounds the nested choice of the NaN compiled to slower vector code (2-core machine,
    # 10^6 float64 values and bounds, cpu: 0.87 -> 0.56 ms; np.clip 0.79).
    result = xmax if xmax != xmax else clipped
    result = xmin if xmin != xmin else result
    return x if x != x else result
