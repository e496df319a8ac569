"""``exp(x)``: the exponential."""

import math

import numpy as np

from ..registry import float_signatures, ufunc
from ..spec import Benchmark, CupyFormula, Tolerance


@ufunc(
    signatures=float_signatures(1),
    reference=np.exp,
    # 1 ULP on the CPU targets (libm); CUDA's expf is documented within 2 ULP.
    tolerances={np.float32: Tolerance(rtol=0.0, ulps=1), np.float64: Tolerance(rtol=0.0, ulps=1),
                ("cuda", np.float32): Tolerance(rtol=0.0, ulps=2)},
    benchmark=Benchmark({"numpy": np.exp}, cupy=CupyFormula("T x", "T y", "y = exp(x)")),
)
def exp(x):
    """Exponential ``e**x``, like ``numpy.exp``: overflow gives inf, underflow 0, NaN stays NaN."""
    return math.exp(x)
