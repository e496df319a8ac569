"""``gaussian(x, x0, sigma)``: the normal probability density."""

import math

import numpy as np

from ..registry import float_signatures, ufunc
from ..scalar import as_type
from ..spec import Tolerance

_SQRT_2PI = math.sqrt(2.0 * math.pi)


def _reference(x, x0, sigma):
    from scipy.stats import norm

    return norm.pdf(x, loc=x0, scale=sigma)


@ufunc(
    signatures=float_signatures(3),
    reference=_reference,
    # float32 arithmetic: z = (x - x0) / sigma carries one rounding, which exp(-z*z/2) turns
    # into a relative error of about z**2 * eps; the largest z before float32 underflow is ~14.
    tolerances={
        np.float32: Tolerance(rtol=200 * float(np.finfo(np.float32).eps),
                              atol=float(np.finfo(np.float32).tiny)),
        np.float64: Tolerance(rtol=4 * float(np.finfo(np.float64).eps), ulps=4,
                              atol=float(np.finfo(np.float64).tiny)),
    },
    domains={"sigma": (0.0, np.inf)},
)
def gaussian(x, x0, sigma):
    """Normal probability density with mean ``x0`` and standard deviation ``sigma``.

    Equal to ``scipy.stats.norm.pdf(x, loc=x0, scale=sigma)``, edge cases included:
    ``sigma <= 0`` or NaN in any argument gives NaN, infinite ``x`` gives 0.
    """
    if sigma != sigma or sigma <= as_type(0, sigma):  # quiet NaN test first: no FP warning
        return as_type(math.nan, x)
    diff = x - x0
    if math.isinf(diff) and not (math.isinf(x) or math.isinf(x0)):
        z = x / sigma - x0 / sigma  # the difference of two finite values overflowed: scale first
    else:
        z = diff / sigma
    zz = z * z
    if zz > as_type(170, zz) and sigma < as_type(1, sigma):
        # exp(-z*z/2) alone would be subnormal (float32) before a small sigma lifts it back
        # into range: take it as two halves and divide in between.
        half = math.exp(-zz / as_type(4, zz))
        return half * (half / (as_type(_SQRT_2PI, z) * sigma))
    return math.exp(-zz / as_type(2, zz)) / as_type(_SQRT_2PI, z) / sigma
