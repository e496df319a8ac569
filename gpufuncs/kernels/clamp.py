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
                         "if (x != x || lo != lo || hi != hi) { y = x + lo + hi; } "
                         "else { T low = x < lo ? lo : x; y = low > hi ? hi : low; }")),
)
def clamp(x, xmin, xmax):
    """Limit ``x`` to ``[xmin, xmax]``; identical to ``numpy.clip``, bit for bit.

    NaN in any argument gives NaN, and ``xmin > xmax`` gives ``xmax`` (NumPy's order: the
    maximum with ``xmin`` first, then the minimum with ``xmax``).
    """
    if x != x or xmin != xmin or xmax != xmax:
        # NaN anywhere gives NaN; tested first with quiet comparisons, so that no ordered
        # comparison ever sees a NaN and raises a spurious "invalid value" warning.
        return x + xmin + xmax
    # NumPy keeps x unless it is strictly outside, so signed zeros come out as np.clip's.
    low = xmin if x < xmin else x
    return xmax if low > xmax else low
