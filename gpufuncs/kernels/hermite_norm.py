"""``hermite_norm(x, n)``: normalized probabilists' Hermite functions ``He_k(x) / sqrt(k!)``."""

import math

import numpy as np

from ..registry import gufunc
from ..scalar import as_type
from ..spec import Tolerance


def _reference(x, n):
    from numpy.polynomial.hermite_e import hermevander
    from scipy.special import gammaln

    k = np.arange(n)
    with np.errstate(over="ignore", invalid="ignore"):
        return hermevander(x, n - 1)[..., :n] / np.exp(0.5 * gammaln(k + 1))


@gufunc(
    signatures=["void(float32, float32[:])", "void(float64, float64[:])"],
    layout="()->(n)",
    reference=_reference,
    # Norm-wise (see Tolerance): the recurrence's error grows slowly with k.
    tolerances={np.float32: Tolerance(rtol=64 * float(np.finfo(np.float32).eps)),
                np.float64: Tolerance(rtol=64 * float(np.finfo(np.float64).eps))},
    domains={"x": (-30.0, 30.0)},
)
def hermite_norm(x, out):
    """Normalized Hermite functions ``out[k] = He_k(x) / sqrt(k!)`` for ``k < n``.

    Probabilists' Hermite polynomials (``He_0 = 1``, ``He_1 = x``), computed with the normalized
    recurrence ``h_k = (x*h_{k-1} - sqrt(k-1)*h_{k-2}) / sqrt(k)``, which never forms ``k!`` and so
    stays finite wherever the result is (``n`` in the hundreds, ``|x|`` up to about 30 in
    float64). Called as ``hermite_norm(x, n)``: the result has shape ``x.shape + (n,)``.
    """
    n = out.shape[0]
    if n == 0:
        return
    prev = as_type(1, x)
    out[0] = prev
    if n == 1:
        return
    cur = x
    out[1] = cur
    for k in range(2, n):
        nxt = (x * cur - math.sqrt(as_type(k - 1, x)) * prev) / math.sqrt(as_type(k, x))
        out[k] = nxt
        prev = cur
        cur = nxt
